//! `cancel_task.lua`: `tasks/cancel`, or an operator's cancel.

use std::time::Duration;

use crate::store::reply::{Reply, code};
use crate::store::{CancelOutcome, Conn, StoreError, TaskKeys};
use crate::task::TaskStatus;

/// The task's keys; `leases` is its shard's lease index.
pub(in crate::store) struct Keys<'a> {
    pub(in crate::store) record: &'a str,
    pub(in crate::store) inputs: &'a str,
    pub(in crate::store) leases: &'a str,
    pub(in crate::store) timeline: &'a str,
}

impl<'a> From<&'a TaskKeys> for Keys<'a> {
    fn from(task: &'a TaskKeys) -> Self {
        Self { record: &task.record, inputs: &task.inputs, leases: &task.leases, timeline: &task.timeline }
    }
}

pub(in crate::store) struct Args<'a> {
    pub(in crate::store) task_id: &'a str,
    /// The owner, for a client's cancel (checked in the script); empty for an operator's.
    pub(in crate::store) tenant: &'a str,
    pub(in crate::store) principal: &'a str,
    pub(in crate::store) message: &'a str,
    pub(in crate::store) events: &'a str,
    pub(in crate::store) signal_prefix: &'a str,
    /// An operator's `tenant/principal` and reason; empty for the owner's own cancel.
    pub(in crate::store) operator: (&'a str, &'a str),
}

/// `{2}`: running; flagged, and its holder signalled.
const SIGNALLED: i64 = 2;

pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<CancelOutcome, StoreError> {
    let mut call = super::CANCEL_TASK.keys([keys.record, keys.inputs, keys.leases, keys.timeline]);
    call.arg(args.task_id)
        .arg(args.tenant)
        .arg(args.principal)
        .arg(args.message)
        .arg(args.events)
        .arg(args.signal_prefix)
        .arg(args.operator.0)
        .arg(args.operator.1);
    super::run(conn, &call, decode).await
}

/// `{1, version, status before, ms parked or -1}` cancelled | `{2}` | `{0}` already terminal
/// | `{-1}` not found.
fn decode(reply: Reply) -> Result<CancelOutcome, StoreError> {
    match reply.code()? {
        code::OK => Ok(CancelOutcome::Cancelled {
            from: TaskStatus::parse(&reply.string(2)?).ok_or_else(|| reply.unexpected_code())?,
            waited: u64::try_from(reply.int(3)?).ok().map(Duration::from_millis),
        }),
        SIGNALLED => Ok(CancelOutcome::Signalled),
        code::NOTHING => Ok(CancelOutcome::AlreadyTerminal),
        code::NOT_FOUND => Ok(CancelOutcome::NotFound),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;

    fn cancelled(from: &str) -> Reply {
        Reply::new(vec![Value::Int(1), Value::Int(2), Value::BulkString(from.as_bytes().to_vec()), Value::Int(5)])
    }

    #[test]
    fn cancelled_from_a_status_it_knows() {
        let outcome = decode(cancelled("working")).unwrap();
        assert_eq!(outcome, CancelOutcome::Cancelled { from: TaskStatus::Working, waited: Some(Duration::from_millis(5)) });
        assert!(decode(cancelled("nonsense")).is_err());
        assert_eq!(decode(Reply::new(vec![Value::Int(2)])).unwrap(), CancelOutcome::Signalled);
    }
}
