//! `reclaim_task.lua`: the reaper requeues a task whose lease expired, or ends it. Sent
//! through [`Store::on_pool_queue`], which finds the task's pool.

use crate::store::reply::{Reply, code};
use crate::store::{Reclaimed, StoreError};

include!(concat!(env!("OUT_DIR"), "/scripts/reclaim_task.rs"));

/// With the tenant whose active-task slot the task held, when it is over and counted.
fn decode(reply: Reply) -> Result<(Reclaimed, Option<String>), StoreError> {
    match reply.code()? {
        code::NOTHING => Ok((Reclaimed::Nothing, None)),
        code::OK => Ok((Reclaimed::Requeued, None)),
        // `{4, version, tenant}`: past the maximum, or its held question lost.
        code::FAILED => Ok((Reclaimed::Failed, reply.counted_tenant(2)?)),
        // `{3, version, tenant}`: a cancel was pending.
        code::CANCELLED => Ok((Reclaimed::Cancelled, reply.counted_tenant(2)?)),
        // `{5, tenant}`: a replay of a reclaim that ended it, or a stale index entry.
        code::ALREADY_ENDED => Ok((Reclaimed::AlreadyEnded, reply.counted_tenant(1)?)),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn an_uncounted_tenant_is_none() {
        let failed = decode(reply![4, 3, ""]).unwrap();
        assert_eq!(failed, (Reclaimed::Failed, None));
        let cancelled = decode(reply![3, 3, "acme"]);
        assert_eq!(cancelled.unwrap(), (Reclaimed::Cancelled, Some("acme".into())));
        let ended = decode(reply![5, "acme"]).unwrap();
        assert_eq!(ended, (Reclaimed::AlreadyEnded, Some("acme".into())));
        assert_eq!(decode(reply![1]).unwrap(), (Reclaimed::Requeued, None));
    }
}
