//! `lease_requests.lua`: a slice of a tenant's request rate, for a replica to admit in memory.

use crate::store::reply::{Reply, code};
use crate::store::{Leased, StoreError};

include!(concat!(env!("OUT_DIR"), "/scripts/lease_requests.rs"));

/// `{1, granted}` | `{0, retry after ms}`.
fn decode(reply: Reply) -> Result<Leased, StoreError> {
    match reply.code()? {
        code::OK => match reply.int(1)? {
            n if n >= 1 => Ok(Leased::Granted(n as u64)),
            n => Err(StoreError::UnexpectedReply(format!("a lease of {n} requests"))),
        },
        code::NOTHING => Ok(Leased::Refused { retry_after_ms: reply.int(1)?.max(1) as u64 }),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn grants_and_refusals_decode() {
        assert_eq!(decode(reply![1, 25]).unwrap(), Leased::Granted(25));
        assert_eq!(decode(reply![0, 40]).unwrap(), Leased::Refused { retry_after_ms: 40 });
        assert_eq!(decode(reply![0, 0]).unwrap(), Leased::Refused { retry_after_ms: 1 });
        assert!(decode(reply![1, 0]).is_err());
        assert!(decode(reply![7]).is_err());
    }
}
