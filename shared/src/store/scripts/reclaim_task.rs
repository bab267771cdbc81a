//! `reclaim_task.lua`: the reaper requeues a task whose lease expired, or ends it. Sent
//! through [`Store::on_pool_queue`], which finds the task's pool.

use crate::store::reply::{Reply, code};
use crate::store::{QueueKeys, Reclaimed, Store, StoreError, TaskKeys};
use crate::task::TaskId;

/// The same keys as `release_task`'s, in the same order.
pub(in crate::store) use super::release_task::Keys;

pub(in crate::store) struct Args<'a> {
    pub(in crate::store) task_id: &'a TaskId,
    pub(in crate::store) max_reclaims: u32,
    /// What a task past the maximum fails with: error JSON, message.
    pub(in crate::store) failure: (&'a str, &'a str),
    pub(in crate::store) cancelled_message: &'a str,
    pub(in crate::store) events: &'a str,
    /// The outcome of a held question whose worker is gone: error JSON, message.
    pub(in crate::store) held_lost: (&'a str, &'a str),
    /// The reaper's pool: the first queue tried.
    pub(in crate::store) pool: &'a str,
}

pub(in crate::store) async fn call(store: &Store, task: &TaskKeys, args: Args<'_>) -> Result<Reclaimed, StoreError> {
    let build = |queue: &QueueKeys, pool: &str| {
        let mut call = super::RECLAIM_TASK.keys(Keys::new(task, queue).list());
        call.arg(args.task_id.as_str())
            .arg(args.max_reclaims)
            .arg(args.failure.0)
            .arg(args.failure.1)
            .arg(args.cancelled_message)
            .arg(args.events)
            .arg(args.held_lost.0)
            .arg(args.held_lost.1)
            .arg(pool);
        call
    };
    store.on_pool_queue(args.task_id, args.pool, build, decode).await
}

fn decode(reply: Reply) -> Result<Reclaimed, StoreError> {
    match reply.code()? {
        code::NOTHING => Ok(Reclaimed::Nothing),
        code::OK => Ok(Reclaimed::Requeued),
        // `{4, version, tenant}`: past the maximum, or its held question lost.
        code::FAILED => Ok(Reclaimed::Failed { tenant: reply.counted_tenant(2)? }),
        // `{3, version, tenant}`: a cancel was pending.
        code::CANCELLED => Ok(Reclaimed::Cancelled { tenant: reply.counted_tenant(2)? }),
        // `{5, tenant}`: a replay of a reclaim that ended it, or a stale index entry.
        code::ALREADY_ENDED => Ok(Reclaimed::AlreadyEnded { tenant: reply.counted_tenant(1)? }),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;

    #[test]
    fn an_uncounted_tenant_is_none() {
        let failed = decode(Reply::new(vec![Value::Int(4), Value::Int(3), Value::BulkString(vec![])])).unwrap();
        assert_eq!(failed, Reclaimed::Failed { tenant: None });
        let cancelled = decode(Reply::new(vec![Value::Int(3), Value::Int(3), Value::BulkString(b"acme".to_vec())]));
        assert_eq!(cancelled.unwrap(), Reclaimed::Cancelled { tenant: Some("acme".into()) });
        let ended = decode(Reply::new(vec![Value::Int(5), Value::BulkString(b"acme".to_vec())])).unwrap();
        assert_eq!(ended, Reclaimed::AlreadyEnded { tenant: Some("acme".into()) });
    }
}
