//! `held_answer.lua`: the holder of a held question looks for its answer.

use crate::store::reply::{Reply, code};
use crate::store::{Conn, HeldAnswer, Lease, StoreError};

pub(in crate::store) struct Keys<'a> {
    pub(in crate::store) record: &'a str,
    pub(in crate::store) answers: &'a str,
}

pub(in crate::store) struct Args<'a> {
    /// The holder's lease: the task, the worker and its fencing token.
    pub(in crate::store) lease: Lease<'a>,
    pub(in crate::store) key: &'a str,
}

pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<HeldAnswer, StoreError> {
    let mut call = super::HELD_ANSWER.keys([keys.record, keys.answers]);
    call.arg(args.lease.worker).arg(args.lease.fence).arg(args.key);
    super::run(conn, &call, decode).await
}

fn decode(reply: Reply) -> Result<HeldAnswer, StoreError> {
    match reply.code()? {
        code::OK => Ok(HeldAnswer::Answered(reply.string(1)?)),
        code::NOTHING => Ok(HeldAnswer::Waiting),
        // The task ended meanwhile (cancelled, or expired).
        code::ALREADY_ENDED => Ok(HeldAnswer::Ended),
        code::LEASE_LOST => Ok(HeldAnswer::LeaseLost),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;

    #[test]
    fn answered_waiting_or_ended() {
        let answered = decode(Reply::new(vec![Value::Int(1), Value::BulkString(b"{}".to_vec())]));
        assert_eq!(answered.unwrap(), HeldAnswer::Answered("{}".into()));
        assert_eq!(decode(Reply::new(vec![Value::Int(0)])).unwrap(), HeldAnswer::Waiting);
        assert_eq!(decode(Reply::new(vec![Value::Int(5)])).unwrap(), HeldAnswer::Ended);
    }
}
