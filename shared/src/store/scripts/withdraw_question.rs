//! `withdraw_question.lua`: the holder of a held question takes it back.

use crate::store::reply::{Reply, code};
use crate::store::{Conn, Lease, StoreError};

pub(in crate::store) struct Keys<'a> {
    pub(in crate::store) record: &'a str,
    pub(in crate::store) inputs: &'a str,
    pub(in crate::store) timeline: &'a str,
}

pub(in crate::store) struct Args<'a> {
    /// The holder's lease: the task, the worker and its fencing token.
    pub(in crate::store) lease: Lease<'a>,
    pub(in crate::store) message: &'a str,
    pub(in crate::store) events: &'a str,
}

/// Taken back, answered meanwhile (the task is working again either way), or the lease was
/// lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::store) enum Withdrawn {
    TakenBack,
    AlreadyAnswered,
    LeaseLost,
}

pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<Withdrawn, StoreError> {
    let mut call = super::WITHDRAW_QUESTION.keys([keys.record, keys.inputs, keys.timeline]);
    call.arg(args.lease.task_id.as_str()).arg(args.lease.worker).arg(args.lease.fence).arg(args.message).arg(args.events);
    super::run(conn, &call, decode).await
}

fn decode(reply: Reply) -> Result<Withdrawn, StoreError> {
    match reply.code()? {
        code::OK => Ok(Withdrawn::TakenBack),
        code::NOTHING => Ok(Withdrawn::AlreadyAnswered),
        code::LEASE_LOST => Ok(Withdrawn::LeaseLost),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;

    #[test]
    fn taken_back_or_answered_meanwhile() {
        assert_eq!(decode(Reply::new(vec![Value::Int(1), Value::Int(4)])).unwrap(), Withdrawn::TakenBack);
        assert_eq!(decode(Reply::new(vec![Value::Int(0)])).unwrap(), Withdrawn::AlreadyAnswered);
        assert_eq!(decode(Reply::new(vec![Value::Int(-2)])).unwrap(), Withdrawn::LeaseLost);
    }
}
