//! `request_input.lua`: park a working task in `input_required` and release its lease.

use crate::store::reply::{Reply, code};
use crate::store::{Conn, Lease, Parked, StoreError, TaskKeys};

pub(in crate::store) struct Keys<'a> {
    pub(in crate::store) record: &'a str,
    pub(in crate::store) leases: &'a str,
    pub(in crate::store) inputs: &'a str,
    pub(in crate::store) issued: &'a str,
    pub(in crate::store) timeline: &'a str,
}

impl<'a> From<&'a TaskKeys> for Keys<'a> {
    fn from(task: &'a TaskKeys) -> Self {
        Self {
            record: &task.record,
            leases: &task.leases,
            inputs: &task.inputs,
            issued: &task.issued,
            timeline: &task.timeline,
        }
    }
}

pub(in crate::store) struct Args<'a> {
    /// The holder's lease: the task, the worker and its fencing token.
    pub(in crate::store) lease: Lease<'a>,
    /// Empty keeps the message.
    pub(in crate::store) message: &'a str,
    pub(in crate::store) events: &'a str,
    pub(in crate::store) cancelled_message: &'a str,
    /// Empty: none.
    pub(in crate::store) tool_state: &'a str,
    /// Key, request JSON.
    pub(in crate::store) requests: &'a [(String, String)],
}

pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<Parked, StoreError> {
    let mut call = super::REQUEST_INPUT.keys([keys.record, keys.leases, keys.inputs, keys.issued, keys.timeline]);
    call.arg(args.lease.task_id.as_str())
        .arg(args.lease.worker)
        .arg(args.lease.fence)
        .arg(args.message)
        .arg(args.events)
        .arg(args.cancelled_message)
        .arg(args.tool_state);
    for (key, request) in args.requests {
        call.arg(key).arg(request);
    }
    super::run(conn, &call, decode).await
}

fn decode(reply: Reply) -> Result<Parked, StoreError> {
    match reply.code()? {
        code::OK => Ok(Parked::Parked),
        // `{3, version}`: a cancel was requested meanwhile; the task ended cancelled.
        code::CANCELLED => Ok(Parked::CancelledInstead),
        code::LEASE_LOST => Ok(Parked::LeaseLost),
        code::KEY_REUSED => Ok(Parked::KeyReused(reply.string(1)?)),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;

    #[test]
    fn parked_or_cancelled_instead() {
        assert_eq!(decode(Reply::new(vec![Value::Int(1), Value::Int(2)])).unwrap(), Parked::Parked);
        assert_eq!(decode(Reply::new(vec![Value::Int(3), Value::Int(2)])).unwrap(), Parked::CancelledInstead);
        assert_eq!(decode(Reply::new(vec![Value::Int(-2)])).unwrap(), Parked::LeaseLost);
    }
}
