//! `record_reveal.lua`: an operator's reveal, written to the task's timeline before anything
//! is shown.

use crate::store::reply::{Reply, code};
use crate::store::{Conn, StoreError};

pub(in crate::store) struct Keys<'a> {
    pub(in crate::store) timeline: &'a str,
}

pub(in crate::store) struct Args<'a> {
    /// The operator's `tenant/principal`.
    pub(in crate::store) by: &'a str,
    /// The most reveal entries a timeline keeps.
    pub(in crate::store) kept: usize,
}

/// What the script did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::store) enum Recorded {
    /// Written at `at_ms` (Redis's clock), the task's `n`th reveal.
    Written { at_ms: i64, n: i64 },
    /// The task has no timeline: nothing was written.
    NoTimeline,
}

pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<Recorded, StoreError> {
    let mut call = super::RECORD_REVEAL.keys([keys.timeline]);
    call.arg(args.by).arg(args.kept.max(1));
    super::run(conn, &call, decode).await
}

/// `{1, at, n}` | `{0}`.
fn decode(reply: Reply) -> Result<Recorded, StoreError> {
    match reply.code()? {
        code::OK => Ok(Recorded::Written { at_ms: reply.int(1)?, n: reply.int(2)? }),
        code::NOTHING => Ok(Recorded::NoTimeline),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;

    #[test]
    fn written_with_its_time_and_ordinal_or_not_at_all() {
        let written = decode(Reply::new(vec![Value::Int(1), Value::Int(1_733_000_000_000), Value::Int(7)])).unwrap();
        assert_eq!(written, Recorded::Written { at_ms: 1_733_000_000_000, n: 7 });
        assert_eq!(decode(Reply::new(vec![Value::Int(0)])).unwrap(), Recorded::NoTimeline);
        assert!(decode(Reply::new(vec![Value::Int(-1)])).is_err());
        assert!(decode(Reply::new(vec![Value::Int(1)])).is_err(), "a write without its time");
    }
}
