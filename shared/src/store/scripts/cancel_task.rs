//! `cancel_task.lua`: `tasks/cancel`, or an operator's cancel.


use crate::store::reply::{Reply, code};
use crate::store::{CancelOutcome, StoreError};
use crate::task::TaskStatus;

include!(concat!(env!("OUT_DIR"), "/scripts/cancel_task.rs"));

/// `{2}`: running; flagged, and its holder signalled.
const SIGNALLED: i64 = 2;

/// `{1, version, status before, ms parked or -1, tenant}` cancelled | `{2}` | `{0, tenant}`
/// already terminal | `{-1}` not found.
fn decode(reply: Reply) -> Result<(CancelOutcome, Option<String>), StoreError> {
    match reply.code()? {
        code::OK => Ok((
            CancelOutcome::Cancelled {
                from: TaskStatus::parse(&reply.string(2)?).ok_or_else(|| reply.unexpected_code())?,
                waited: reply.spent(3)?,
            },
            reply.counted_tenant(4)?,
        )),
        SIGNALLED => Ok((CancelOutcome::Signalled, None)),
        code::NOTHING => Ok((CancelOutcome::AlreadyTerminal, reply.counted_tenant(1)?)),
        code::NOT_FOUND => Ok((CancelOutcome::NotFound, None)),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    fn cancelled(from: &str) -> Reply {
        reply![1, 2, from, 5, "acme"]
    }

    #[test]
    fn cancelled_from_a_status_it_knows() {
        let (outcome, slot) = decode(cancelled("working")).unwrap();
        assert_eq!(outcome, CancelOutcome::Cancelled { from: TaskStatus::Working, waited: Some(std::time::Duration::from_millis(5)) });
        assert_eq!(slot.as_deref(), Some("acme"));
        assert!(decode(cancelled("nonsense")).is_err());
        assert_eq!(decode(reply![2]).unwrap(), (CancelOutcome::Signalled, None));
        let uncounted = reply![0, ""];
        assert_eq!(decode(uncounted).unwrap(), (CancelOutcome::AlreadyTerminal, None));
    }
}
