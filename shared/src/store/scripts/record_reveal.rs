//! `record_reveal.lua`: an operator's reveal, written to the task's timeline before anything
//! is shown.

use crate::store::reply::{Reply, code};
use crate::store::{StoreError};

include!(concat!(env!("OUT_DIR"), "/scripts/record_reveal.rs"));

/// What the script did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::store) enum Recorded {
    /// Written at `at_ms` (Redis's clock), the task's `n`th reveal.
    Written { at_ms: i64, n: i64 },
    /// The task has no timeline: nothing was written.
    NoTimeline,
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
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn written_with_its_time_and_ordinal_or_not_at_all() {
        let written = decode(reply![1, 1_733_000_000_000_i64, 7]).unwrap();
        assert_eq!(written, Recorded::Written { at_ms: 1_733_000_000_000, n: 7 });
        assert_eq!(decode(reply![0]).unwrap(), Recorded::NoTimeline);
        assert!(decode(reply![-1]).is_err());
        assert!(decode(reply![1]).is_err(), "a write without its time");
    }
}
