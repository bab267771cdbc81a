//! `claim_task.lua`: a fenced lease on the fairest queued task of a pool on a shard.

use crate::store::reply::{Reply, code};
use crate::store::{Claim, Conn, StoreError};
use crate::task::TaskId;

include!(concat!(env!("OUT_DIR"), "/scripts/claim_task.rs"));

/// One run: a claim or nothing, or the task at the front to ask for instead.
pub(in crate::store) enum ClaimStep {
    Done(Option<Box<Claim>>),
    Front(TaskId),
}

/// `{-11, task id}`: that task is at the front instead; nothing was written.
const FRONT: i64 = -11;

pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<ClaimStep, StoreError> {
    send(conn, keys, args, |reply| decode(reply, args.task_id)).await
}

pub(in crate::store) fn decode(reply: Reply, task_id: &TaskId) -> Result<ClaimStep, StoreError> {
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
                    reply.string(9)? == "1",
                ),
                tool_state: reply.string(8).ok().filter(|s| !s.is_empty()),
                steps: reply.pairs(10)?,
                queued_for: reply.string(11)?.parse().ok().map(|queued: u64| {
                    std::time::Duration::from_millis(crate::task::now_ms().saturating_sub(queued))
                }),
                owner_tenant: reply.string(12)?,
                owner_principal: reply.string(13)?,
                // Written by the gateway, checked there: ids the task's owner owns. Absent (a
                // task created before this field existed) is none.
                related_tasks: reply
                    .string(14)
                    .ok()
                    .and_then(|json| serde_json::from_str(&json).ok())
                    .unwrap_or_default(),
            }))))
        }
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn nothing_or_the_front() {
        let id = TaskId::generate(1);
        assert!(matches!(decode(reply![0], &id).unwrap(), ClaimStep::Done(None)));
        let front = TaskId::generate(1);
        let reply = reply![-11, front.as_str()];
        assert!(matches!(decode(reply, &id).unwrap(), ClaimStep::Front(named) if named == front));
        let reply = reply![-11, "not an id"];
        assert!(decode(reply, &id).is_err());
    }
}
