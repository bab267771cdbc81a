//! `create_task.lua`: a new task's record, written and queued on its pool in one script.

use crate::store::reply::{Reply, code};
use crate::store::{Conn, Created, NewTask, QueueKeys, StoreError, TaskKeys};

include!(concat!(env!("OUT_DIR"), "/scripts/create_task.rs"));

impl<'a> Keys<'a> {
    /// `indexes`: the shard's, then its tenant's.
    pub(in crate::store) fn new(task: &'a TaskKeys, queue: &'a QueueKeys, indexes: (&'a str, &'a str)) -> Self {
        Self {
            record: &task.record,
            stream: &queue.stream,
            answers: &task.answers,
            timeline: &task.timeline,
            index: indexes.0,
            tenant_index: indexes.1,
            ready: &queue.ready,
            fair: &queue.fair,
            args: &task.args,
            steps: &task.steps,
            outbox: &task.outbox,
        }
    }
}

pub(in crate::store) struct Args<'a> {
    pub(in crate::store) task: &'a NewTask<'a>,
    pub(in crate::store) events: &'a str,
    /// The record's `obx` ('' = the tenant has events off).
    pub(in crate::store) outbox: &'a str,
}

/// `{2, createdAtMs}`: the owner made this task with this id before; nothing was written.
const REPLAYED: i64 = 2;
/// `{-6}`: the id exists for another owner or tool.
const EXISTS: i64 = -6;
/// `{-7}`: a keyed create whose key made this task for another tool or other arguments.
const IDEMPOTENCY_CONFLICT: i64 = -7;

/// The task's `createdAt` (ms, Redis time), and whether this call made it.
pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<(Created, bool), StoreError> {
    super::run(conn, &invocation(keys, args), decode).await
}

/// The call alone, for a pipeline that sends `WAIT` after it on the same connection.
pub(in crate::store) fn invocation(keys: Keys<'_>, args: Args<'_>) -> redis::ScriptInvocation<'static> {
    let task = args.task;
    let mut call = super::CREATE_TASK.keys(keys.list());
    call.arg(task.id.as_str())
        .arg(task.owner)
        .arg(task.tool)
        .arg(task.arguments)
        .arg(task.ttl_ms)
        .arg(task.poll_interval_ms)
        .arg(task.status_message.unwrap_or(""))
        .arg(task.traceparent.unwrap_or(""))
        .arg(args.events)
        .arg(task.client_capabilities)
        .arg(if task.counted { "1" } else { "0" })
        .arg(task.tool_state.unwrap_or(""))
        .arg(if task.declares_tasks { "1" } else { "0" })
        .arg(if task.history { "1" } else { "0" })
        .arg(task.pool)
        .arg(task.fingerprint.unwrap_or(""))
        .arg(task.weight)
        .arg(args.outbox)
        .arg(if task.related { "1" } else { "0" })
        .arg(task.steps.len())
        .arg(task.steps)
        .arg(task.answers);
    call
}

/// `{1, createdAtMs}`, `{2, createdAtMs, '1' | '0'}`, or a refusal; with whether a replay
/// found its task ended.
pub(in crate::store) fn decode(reply: Reply) -> Result<(Created, bool), StoreError> {
    match reply.code()? {
        code::OK => Ok((Created::New { created_at_ms: reply.int(1)? }, false)),
        REPLAYED => Ok((Created::Replayed { created_at_ms: reply.int(1)? }, reply.string(2)? == "1")),
        // Another owner's task has this id (128 random bits collided, or a forged replay):
        // report it rather than overwrite it.
        EXISTS => Err(StoreError::UnexpectedReply("task id already exists".into())),
        IDEMPOTENCY_CONFLICT => Err(StoreError::KeyReused),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn created_or_refused() {
        let new = decode(reply![1, 42]).unwrap();
        assert_eq!(new, (Created::New { created_at_ms: 42 }, false));
        let replayed = decode(reply![2, 42, "1"]).unwrap();
        assert_eq!(replayed, (Created::Replayed { created_at_ms: 42 }, true));
        assert!(matches!(decode(reply![-6]), Err(StoreError::UnexpectedReply(_))));
        assert!(matches!(decode(reply![-7]), Err(StoreError::KeyReused)));
    }
}
