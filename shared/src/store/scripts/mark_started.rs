//! `mark_started.lua`: the lease holder marks, before a side effect that must not run twice
//! unasked, that a run has begun it.

use crate::store::reply::{Reply, code};
use crate::store::{Started, StoreError};

include!(concat!(env!("OUT_DIR"), "/scripts/mark_started.rs"));

/// `{1, 0}`: no earlier run left a marker.
const NO_EARLIER_RUN: i64 = 0;

fn decode(reply: Reply) -> Result<Started, StoreError> {
    match reply.code()? {
        code::OK => Ok(match reply.int(1)? {
            NO_EARLIER_RUN => Started::First,
            fence => Started::Before { fence: u64::try_from(fence).map_err(|_| reply.unexpected_code())? },
        }),
        code::LEASE_LOST => Ok(Started::LeaseLost),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn first_or_after_an_earlier_run() {
        assert_eq!(decode(reply![1, 0]).unwrap(), Started::First);
        assert_eq!(decode(reply![1, 4]).unwrap(), Started::Before { fence: 4 });
        assert_eq!(decode(reply![-2]).unwrap(), Started::LeaseLost);
        assert!(decode(reply![1, -3]).is_err(), "a negative fence is a mismatch");
    }
}
