//! `fail_task.lua`: an operator ends a stuck task as failed, whoever owns it.

use crate::store::reply::{Reply, code};
use crate::store::{OperatorFail, StoreError};
use crate::task::TaskStatus;

include!(concat!(env!("OUT_DIR"), "/scripts/fail_task.rs"));

/// `{1, version, tenant if counted else '', status before}` | `{0}` already terminal |
/// `{-1}` not found. With the tenant whose active-task slot the task held, when it failed and
/// counted.
fn decode(reply: Reply) -> Result<(OperatorFail, Option<String>), StoreError> {
    match reply.code()? {
        code::OK => {
            let from = TaskStatus::parse(&reply.string(3)?).ok_or_else(|| reply.unexpected_code())?;
            Ok((OperatorFail::Failed { from }, reply.counted_tenant(2)?))
        }
        code::NOTHING => Ok((OperatorFail::AlreadyTerminal, None)),
        code::NOT_FOUND => Ok((OperatorFail::NotFound, None)),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn failed_from_its_status() {
        let (failed, slot) = decode(reply![1, 4, "acme", "input_required"]).unwrap();
        assert_eq!(failed, OperatorFail::Failed { from: TaskStatus::InputRequired });
        assert_eq!(slot.as_deref(), Some("acme"));
        let uncounted = decode(reply![1, 4, "", "working"]).unwrap();
        assert_eq!(uncounted, (OperatorFail::Failed { from: TaskStatus::Working }, None));
        assert_eq!(decode(reply![-1]).unwrap(), (OperatorFail::NotFound, None));
        assert!(decode(reply![-2]).is_err(), "fail_task has no lease to lose");
    }
}
