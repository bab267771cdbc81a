//! `accept_input.lua`: a client's answers (`tasks/update`); the task resumes once nothing is
//! outstanding. Sent through [`Store::on_pool_queue`], which finds the task's pool.

use std::time::Duration;

use crate::store::reply::{Reply, code};
use crate::store::{Answered, QueueKeys, Store, StoreError, TaskKeys};
use crate::task::{Owner, TaskId};

pub(in crate::store) struct Keys<'a> {
    pub(in crate::store) record: &'a str,
    pub(in crate::store) inputs: &'a str,
    pub(in crate::store) answers: &'a str,
    /// The queue of the pool tried, on the task's shard.
    pub(in crate::store) stream: &'a str,
    pub(in crate::store) timeline: &'a str,
    pub(in crate::store) ready: &'a str,
    pub(in crate::store) fair: &'a str,
}

impl<'a> Keys<'a> {
    fn new(task: &'a TaskKeys, queue: &'a QueueKeys) -> Self {
        Self {
            record: &task.record,
            inputs: &task.inputs,
            answers: &task.answers,
            stream: &queue.stream,
            timeline: &task.timeline,
            ready: &queue.ready,
            fair: &queue.fair,
        }
    }
}

pub(in crate::store) struct Args<'a> {
    pub(in crate::store) id: &'a TaskId,
    pub(in crate::store) owner: &'a Owner,
    pub(in crate::store) events: &'a str,
    /// The status message when resumed (empty keeps it).
    pub(in crate::store) resume_message: &'a str,
    pub(in crate::store) signal_prefix: &'a str,
    /// The tenant's share of its pool: a resumed task is charged to its tenant like a new one.
    pub(in crate::store) weight: f64,
    /// Key, answer JSON.
    pub(in crate::store) answers: &'a [(String, String)],
}

/// The gateway does not know the task's pool without reading the record: it tries `default`
/// first; a task of another pool costs a second round trip (store/pools.rs).
pub(in crate::store) async fn call(store: &Store, task: &TaskKeys, args: Args<'_>) -> Result<Answered, StoreError> {
    let build = |queue: &QueueKeys, pool: &str| {
        let keys = Keys::new(task, queue);
        let mut call = super::ACCEPT_INPUT.keys([
            keys.record,
            keys.inputs,
            keys.answers,
            keys.stream,
            keys.timeline,
            keys.ready,
            keys.fair,
        ]);
        call.arg(args.id.as_str())
            .arg(&args.owner.tenant)
            .arg(&args.owner.principal)
            .arg(args.events)
            .arg(args.resume_message)
            .arg(args.signal_prefix)
            .arg(pool)
            .arg(args.weight);
        for (key, answer) in args.answers {
            call.arg(key).arg(answer);
        }
        call
    };
    store.on_pool_queue(args.id, crate::store::DEFAULT_POOL, build, decode).await
}

/// `{1, version, resumed 0|1, ms waited or -1}` applied | `{0}` nothing applied | `{-1}`.
fn decode(reply: Reply) -> Result<Answered, StoreError> {
    match reply.code()? {
        code::OK => Ok(Answered::Applied {
            version: u64::try_from(reply.int(1)?).map_err(|_| reply.unexpected_code())?,
            resumed: reply.int(2)? == 1,
            waited: u64::try_from(reply.int(3)?).ok().map(Duration::from_millis),
        }),
        code::NOTHING => Ok(Answered::Ignored),
        code::NOT_FOUND => Ok(Answered::NotFound),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;

    #[test]
    fn applied_ignored_or_not_found() {
        let applied = decode(Reply::new(vec![Value::Int(1), Value::Int(3), Value::Int(1), Value::Int(-1)])).unwrap();
        assert_eq!(applied, Answered::Applied { version: 3, resumed: true, waited: None });
        assert_eq!(decode(Reply::new(vec![Value::Int(0)])).unwrap(), Answered::Ignored);
        assert_eq!(decode(Reply::new(vec![Value::Int(-1)])).unwrap(), Answered::NotFound);
    }
}
