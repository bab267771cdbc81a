//! `release_task.lua`: a draining worker hands a task it could not finish back to its pool's
//! queue, or ends it. Sent through [`Store::on_pool_queue`](crate::store::Store::on_pool_queue), which finds the task's pool.

use crate::store::reply::{Reply, RunEnd, code};
use crate::store::{Released, StoreError};

include!(concat!(env!("OUT_DIR"), "/scripts/release_task.rs"));

/// With the tenant whose active-task slot the task held, when it ended and counted, and how
/// long the run worked when it ended from `working`.
fn decode(reply: Reply) -> Result<(Released, RunEnd), StoreError> {
    match reply.code()? {
        code::OK => Ok((Released::Requeued, RunEnd::default())),
        // `{3, version, tenant, ms worked}`: a cancel was pending.
        code::CANCELLED => Ok((Released::Cancelled, RunEnd { slot: reply.counted_tenant(2)?, ran: reply.spent(3)? })),
        // `{4, version, tenant}`: it held a question, which cannot outlive this worker. Not
        // timed: its time since the claim was not all `working`, nor all `input_required`.
        code::FAILED => Ok((Released::Failed, RunEnd { slot: reply.counted_tenant(2)?, ran: None })),
        code::LEASE_LOST => Ok((Released::LeaseLost, RunEnd::default())),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn requeued_or_ended() {
        assert_eq!(decode(reply![1]).unwrap(), (Released::Requeued, RunEnd::default()));
        let cancelled = decode(reply![3, 5, "acme", 9]).unwrap();
        let ran = Some(std::time::Duration::from_millis(9));
        assert_eq!(cancelled, (Released::Cancelled, RunEnd { slot: Some("acme".to_owned()), ran }));
        let failed = decode(reply![4, 5, ""]).unwrap();
        assert_eq!(failed, (Released::Failed, RunEnd::default()));
        assert_eq!(decode(reply![-2]).unwrap(), (Released::LeaseLost, RunEnd::default()));
    }
}
