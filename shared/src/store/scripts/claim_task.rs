//! `claim_task.lua`: a fenced lease on the fairest queued task of a pool on a shard.

use crate::store::reply::{Reply, code};
use crate::store::{Claim, Conn, QueueKeys, StoreError, TaskKeys};
use crate::task::TaskId;

/// The candidate's keys and its pool's queue on the shard.
pub(in crate::store) struct Keys<'a> {
    pub(in crate::store) record: &'a str,
    /// The stream the entry was delivered from.
    pub(in crate::store) stream: &'a str,
    pub(in crate::store) leases: &'a str,
    pub(in crate::store) answers: &'a str,
    pub(in crate::store) timeline: &'a str,
    pub(in crate::store) steps: &'a str,
    pub(in crate::store) ready: &'a str,
    pub(in crate::store) fair: &'a str,
    /// Where long arguments are set aside.
    pub(in crate::store) args: &'a str,
}

impl<'a> Keys<'a> {
    pub(in crate::store) fn new(task: &'a TaskKeys, queue: &'a QueueKeys) -> Self {
        Self {
            record: &task.record,
            stream: &queue.stream,
            leases: &task.leases,
            answers: &task.answers,
            timeline: &task.timeline,
            steps: &task.steps,
            ready: &queue.ready,
            fair: &queue.fair,
            args: &task.args,
        }
    }
}

pub(in crate::store) struct Args<'a> {
    pub(in crate::store) entry_id: &'a str,
    pub(in crate::store) task_id: &'a TaskId,
    pub(in crate::store) worker: &'a str,
    pub(in crate::store) lease_ms: u64,
    pub(in crate::store) group: &'a str,
}

/// One run: a claim or nothing, or the task at the front to ask for instead.
pub(in crate::store) enum ClaimStep {
    Done(Option<Box<Claim>>),
    Front(TaskId),
}

/// `{-11, task id}`: that task is at the front instead; nothing was written.
const FRONT: i64 = -11;

pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<ClaimStep, StoreError> {
    let mut call = super::CLAIM_TASK.keys([
        keys.record,
        keys.stream,
        keys.leases,
        keys.answers,
        keys.timeline,
        keys.steps,
        keys.ready,
        keys.fair,
        keys.args,
    ]);
    call.arg(args.entry_id).arg(args.task_id.as_str()).arg(args.worker).arg(args.lease_ms).arg(args.group);
    super::run(conn, &call, |reply| decode(reply, args.task_id)).await
}

fn decode(reply: Reply, task_id: &TaskId) -> Result<ClaimStep, StoreError> {
    match reply.code()? {
        code::NOTHING => Ok(ClaimStep::Done(None)),
        FRONT => {
            let front = reply.string(1)?;
            TaskId::parse(&front)
                .map(ClaimStep::Front)
                .ok_or_else(|| StoreError::UnexpectedReply(format!("queued id {front:?}")))
        }
        code::OK => {
            let traceparent = reply.string(4)?;
            Ok(ClaimStep::Done(Some(Box::new(Claim {
                task_id: task_id.clone(),
                fence: u64::try_from(reply.int(1)?).map_err(|_| reply.unexpected_code())?,
                tool: reply.string(2)?,
                arguments: reply.string(3)?,
                traceparent: (!traceparent.is_empty()).then_some(traceparent),
                cancel_requested: reply.int(5)? == 1,
                answers: reply.pairs(6)?,
                client_capabilities: crate::store::compact::restored_capabilities(
                    reply.string(7)?,
                    reply.string(10)? == "1",
                ),
                tenant: reply.counted_tenant(8)?,
                tool_state: reply.string(9).ok().filter(|s| !s.is_empty()),
                steps: reply.pairs(11)?,
                queued_ms: reply.string(12)?.parse().ok(),
                owner_tenant: reply.string(13)?,
            }))))
        }
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;

    #[test]
    fn nothing_or_the_front() {
        let id = TaskId::generate(1);
        assert!(matches!(decode(Reply::new(vec![Value::Int(0)]), &id).unwrap(), ClaimStep::Done(None)));
        let front = TaskId::generate(1);
        let reply = Reply::new(vec![Value::Int(-11), Value::BulkString(front.as_str().as_bytes().to_vec())]);
        assert!(matches!(decode(reply, &id).unwrap(), ClaimStep::Front(named) if named == front));
        let reply = Reply::new(vec![Value::Int(-11), Value::BulkString(b"not an id".to_vec())]);
        assert!(decode(reply, &id).is_err());
    }
}
