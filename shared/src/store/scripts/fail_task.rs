//! `fail_task.lua`: an operator ends a stuck task as failed, whoever owns it.

use crate::store::reply::{Reply, code};
use crate::store::{Conn, OperatorFail, StoreError};
use crate::task::TaskStatus;

/// The same keys as `cancel_task`'s, in the same order.
pub(in crate::store) use super::cancel_task::Keys;

pub(in crate::store) struct Args<'a> {
    pub(in crate::store) task_id: &'a str,
    /// The JSON-RPC error object, as JSON text.
    pub(in crate::store) error: &'a str,
    pub(in crate::store) message: &'a str,
    pub(in crate::store) events: &'a str,
    pub(in crate::store) signal_prefix: &'a str,
    /// The operator's `tenant/principal`, and the reason.
    pub(in crate::store) operator: (&'a str, &'a str),
}

pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<OperatorFail, StoreError> {
    let mut call = super::FAIL_TASK.keys([keys.record, keys.inputs, keys.leases, keys.timeline]);
    call.arg(args.task_id)
        .arg(args.error)
        .arg(args.message)
        .arg(args.events)
        .arg(args.signal_prefix)
        .arg(args.operator.0)
        .arg(args.operator.1);
    super::run(conn, &call, decode).await
}

/// `{1, version, tenant if counted else '', status before}` | `{0}` already terminal |
/// `{-1}` not found.
fn decode(reply: Reply) -> Result<OperatorFail, StoreError> {
    match reply.code()? {
        code::OK => Ok(OperatorFail::Failed {
            from: TaskStatus::parse(&reply.string(3)?).ok_or_else(|| reply.unexpected_code())?,
            counted_tenant: reply.counted_tenant(2)?,
        }),
        code::NOTHING => Ok(OperatorFail::AlreadyTerminal),
        code::NOT_FOUND => Ok(OperatorFail::NotFound),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;

    #[test]
    fn failed_from_its_status() {
        let s = |text: &str| Value::BulkString(text.as_bytes().to_vec());
        let failed = decode(Reply::new(vec![Value::Int(1), Value::Int(4), s("acme"), s("input_required")])).unwrap();
        assert_eq!(failed, OperatorFail::Failed { from: TaskStatus::InputRequired, counted_tenant: Some("acme".into()) });
        assert_eq!(decode(Reply::new(vec![Value::Int(-1)])).unwrap(), OperatorFail::NotFound);
        assert!(decode(Reply::new(vec![Value::Int(-2)])).is_err(), "fail_task has no lease to lose");
    }
}
