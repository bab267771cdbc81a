//! `mark_started.lua`: the lease holder marks, before a side effect that must not run twice
//! unasked, that a run has begun it.

use crate::store::reply::{Reply, code};
use crate::store::{Conn, Lease, Started, StoreError};

pub(in crate::store) struct Keys<'a> {
    pub(in crate::store) record: &'a str,
}

pub(in crate::store) struct Args<'a> {
    /// The holder's lease: the task, the worker and its fencing token.
    pub(in crate::store) lease: Lease<'a>,
}

/// `{1, 0}`: no earlier run left a marker.
const NO_EARLIER_RUN: i64 = 0;

pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<Started, StoreError> {
    let mut call = super::MARK_STARTED.keys([keys.record]);
    call.arg(args.lease.worker).arg(args.lease.fence);
    super::run(conn, &call, decode).await
}

fn decode(reply: Reply) -> Result<Started, StoreError> {
    match reply.code()? {
        code::OK => Ok(match reply.int(1)? {
            NO_EARLIER_RUN => Started::First,
            fence => Started::Before { fence: u64::try_from(fence).map_err(|_| reply.unexpected_code())? },
        }),
        code::LEASE_LOST => Ok(Started::LeaseLost),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;

    #[test]
    fn first_or_after_an_earlier_run() {
        assert_eq!(decode(Reply::new(vec![Value::Int(1), Value::Int(0)])).unwrap(), Started::First);
        assert_eq!(decode(Reply::new(vec![Value::Int(1), Value::Int(4)])).unwrap(), Started::Before { fence: 4 });
        assert_eq!(decode(Reply::new(vec![Value::Int(-2)])).unwrap(), Started::LeaseLost);
        assert!(decode(Reply::new(vec![Value::Int(1), Value::Int(-3)])).is_err(), "a negative fence is a mismatch");
    }
}
