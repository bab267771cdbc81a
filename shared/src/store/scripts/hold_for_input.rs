//! `hold_for_input.lua`: the lease holder shows its task as `input_required` while it keeps
//! the lease (a question asked on a live upstream session).

use crate::store::reply::{Reply, code};
use crate::store::{Conn, Hold, Lease, StoreError, TaskKeys};

pub(in crate::store) struct Keys<'a> {
    pub(in crate::store) record: &'a str,
    pub(in crate::store) inputs: &'a str,
    pub(in crate::store) issued: &'a str,
    pub(in crate::store) timeline: &'a str,
}

impl<'a> From<&'a TaskKeys> for Keys<'a> {
    fn from(task: &'a TaskKeys) -> Self {
        Self { record: &task.record, inputs: &task.inputs, issued: &task.issued, timeline: &task.timeline }
    }
}

pub(in crate::store) struct Args<'a> {
    /// The holder's lease: the task, the worker and its fencing token.
    pub(in crate::store) lease: Lease<'a>,
    pub(in crate::store) message: &'a str,
    pub(in crate::store) events: &'a str,
    pub(in crate::store) key: &'a str,
    /// JSON text.
    pub(in crate::store) request: &'a str,
}

/// `{2}`: a cancel is pending; nothing was written.
const CANCEL_PENDING: i64 = 2;

pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<Hold, StoreError> {
    let mut call = super::HOLD_FOR_INPUT.keys([keys.record, keys.inputs, keys.issued, keys.timeline]);
    call.arg(args.lease.task_id.as_str())
        .arg(args.lease.worker)
        .arg(args.lease.fence)
        .arg(args.message)
        .arg(args.events)
        .arg(args.key)
        .arg(args.request);
    super::run(conn, &call, decode).await
}

fn decode(reply: Reply) -> Result<Hold, StoreError> {
    match reply.code()? {
        code::OK => Ok(Hold::Held),
        CANCEL_PENDING => Ok(Hold::CancelPending),
        code::LEASE_LOST => Ok(Hold::LeaseLost),
        code::KEY_REUSED => Ok(Hold::KeyReused(reply.string(1)?)),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;

    #[test]
    fn held_pending_or_refused() {
        assert_eq!(decode(Reply::new(vec![Value::Int(1), Value::Int(3)])).unwrap(), Hold::Held);
        assert_eq!(decode(Reply::new(vec![Value::Int(2)])).unwrap(), Hold::CancelPending);
        let reused = decode(Reply::new(vec![Value::Int(-5), Value::BulkString(b"k".to_vec())]));
        assert_eq!(reused.unwrap(), Hold::KeyReused("k".into()));
        assert!(decode(Reply::new(vec![Value::Int(-5)])).is_err(), "a reused key names the key");
    }
}
