//! `request_input.lua`: park a working task in `input_required` and release its lease.

use crate::store::reply::{Reply, RunEnd, code};
use crate::store::{Parked, StoreError};

include!(concat!(env!("OUT_DIR"), "/scripts/request_input.rs"));

/// With how long the run worked, and the tenant whose active-task slot the task held when it
/// ended cancelled and counted.
fn decode(reply: Reply) -> Result<(Parked, RunEnd), StoreError> {
    match reply.code()? {
        // `{1, version, ms worked}`.
        code::OK => Ok((Parked::Parked, RunEnd { slot: None, ran: reply.spent(2)? })),
        // `{3, version, tenant, ms worked}`: a cancel was requested meanwhile; the task ended
        // cancelled.
        code::CANCELLED => {
            Ok((Parked::CancelledInstead, RunEnd { slot: reply.counted_tenant(2)?, ran: reply.spent(3)? }))
        }
        code::LEASE_LOST => Ok((Parked::LeaseLost, RunEnd::default())),
        code::KEY_REUSED => Ok((Parked::KeyReused(reply.string(1)?), RunEnd::default())),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn parked_or_cancelled_instead() {
        let ran = Some(std::time::Duration::from_millis(7));
        assert_eq!(decode(reply![1, 2, 7]).unwrap(), (Parked::Parked, RunEnd { slot: None, ran }));
        let cancelled = decode(reply![3, 2, "acme", 7]);
        assert_eq!(cancelled.unwrap(), (Parked::CancelledInstead, RunEnd { slot: Some("acme".to_owned()), ran }));
        assert_eq!(decode(reply![1, 2, -1]).unwrap(), (Parked::Parked, RunEnd::default()));
        assert_eq!(decode(reply![-2]).unwrap(), (Parked::LeaseLost, RunEnd::default()));
    }
}
