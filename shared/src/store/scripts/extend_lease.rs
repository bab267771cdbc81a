//! `extend_lease.lua`: the lease holder renews its lease.

use crate::store::reply::{Reply, code};
use crate::store::{Renewal, StoreError};

include!(concat!(env!("OUT_DIR"), "/scripts/extend_lease.rs"));

fn decode(reply: Reply) -> Result<Renewal, StoreError> {
    match reply.code()? {
        code::OK => Ok(Renewal::Held { cancel_requested: reply.int(1)? == 1 }),
        code::LEASE_LOST => Ok(Renewal::Lost),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn held_or_lost() {
        let held = decode(reply![1, 1]).unwrap();
        assert_eq!(held, Renewal::Held { cancel_requested: true });
        assert_eq!(decode(reply![-2]).unwrap(), Renewal::Lost);
        assert!(decode(reply![0]).is_err());
    }
}
