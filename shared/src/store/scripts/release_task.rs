//! `release_task.lua`: a draining worker hands a task it could not finish back to its pool's
//! queue, or ends it. Sent through [`Store::on_pool_queue`], which finds the task's pool.

use crate::store::reply::{Reply, code};
use crate::store::{Lease, QueueKeys, Released, Store, StoreError, TaskKeys};

/// The task's keys and a pool's queue on its shard (`reclaim_task` takes the same).
pub(in crate::store) struct Keys<'a> {
    pub(in crate::store) record: &'a str,
    pub(in crate::store) leases: &'a str,
    pub(in crate::store) stream: &'a str,
    pub(in crate::store) inputs: &'a str,
    pub(in crate::store) timeline: &'a str,
    pub(in crate::store) ready: &'a str,
    pub(in crate::store) fair: &'a str,
}

impl<'a> Keys<'a> {
    pub(in crate::store) fn new(task: &'a TaskKeys, queue: &'a QueueKeys) -> Self {
        Self {
            record: &task.record,
            leases: &task.leases,
            stream: &queue.stream,
            inputs: &task.inputs,
            timeline: &task.timeline,
            ready: &queue.ready,
            fair: &queue.fair,
        }
    }

    pub(in crate::store) fn list(&self) -> [&'a str; 7] {
        [self.record, self.leases, self.stream, self.inputs, self.timeline, self.ready, self.fair]
    }
}

pub(in crate::store) struct Args<'a> {
    /// The holder's lease: the task, the worker and its fencing token.
    pub(in crate::store) lease: Lease<'a>,
    pub(in crate::store) cancelled_message: &'a str,
    pub(in crate::store) events: &'a str,
    /// The outcome of a held question that cannot outlive the worker: error JSON, message.
    pub(in crate::store) held_lost: (&'a str, &'a str),
    /// The releasing worker's pool, where the task came from: the first queue tried.
    pub(in crate::store) pool: &'a str,
}

pub(in crate::store) async fn call(store: &Store, task: &TaskKeys, args: Args<'_>) -> Result<Released, StoreError> {
    let build = |queue: &QueueKeys, pool: &str| {
        let mut call = super::RELEASE_TASK.keys(Keys::new(task, queue).list());
        call.arg(args.lease.task_id.as_str())
            .arg(args.lease.worker)
            .arg(args.lease.fence)
            .arg(args.cancelled_message)
            .arg(args.events)
            .arg(args.held_lost.0)
            .arg(args.held_lost.1)
            .arg(pool);
        call
    };
    store.on_pool_queue(args.lease.task_id, args.pool, build, decode).await
}

fn decode(reply: Reply) -> Result<Released, StoreError> {
    match reply.code()? {
        code::OK => Ok(Released::Requeued),
        // A cancel was pending.
        code::CANCELLED => Ok(Released::Cancelled),
        // It held a question, which cannot outlive this worker.
        code::FAILED => Ok(Released::Failed),
        code::LEASE_LOST => Ok(Released::LeaseLost),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;

    #[test]
    fn requeued_or_ended() {
        assert_eq!(decode(Reply::new(vec![Value::Int(1)])).unwrap(), Released::Requeued);
        assert_eq!(decode(Reply::new(vec![Value::Int(3), Value::Int(5)])).unwrap(), Released::Cancelled);
        assert_eq!(decode(Reply::new(vec![Value::Int(4), Value::Int(5)])).unwrap(), Released::Failed);
        assert_eq!(decode(Reply::new(vec![Value::Int(-2)])).unwrap(), Released::LeaseLost);
    }
}
