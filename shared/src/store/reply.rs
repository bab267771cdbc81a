//! Reading script replies. Every script returns an array whose first element is a code; the
//! codes are defined once here and repeated in the script headers. Each script's reply becomes
//! a typed value here (a `TryFrom<Reply>`), so no caller matches raw codes.

use std::time::Duration;

use redis::Value;

use super::leases::ClaimStep;
use super::tasks::snapshot_from;
use super::{
    Admission, Answered, CancelOutcome, Claim, HeldAnswer, Hold, Limit, OperatorFail, Parked, Polled, Reclaimed,
    Released, Renewal, Started, StoreError,
};
use crate::task::{Snapshot, TaskId, TaskStatus};

/// Script reply codes.
mod code {
    pub(crate) const NOTHING: i64 = 0;
    pub(crate) const OK: i64 = 1;
    pub(crate) const NOT_FOUND: i64 = -1;
    pub(crate) const LEASE_LOST: i64 = -2;
    pub(crate) const KEY_REUSED: i64 = -5;
    pub(crate) const EXISTS: i64 = -6;
    pub(crate) const TOO_SOON: i64 = -9;
    pub(crate) const OTHER_POOL: i64 = -10;
    pub(crate) const IDEMPOTENCY_CONFLICT: i64 = -7;
    pub(crate) const FRONT: i64 = -11;
}

/// A script's reply array.
pub(super) struct Reply(Vec<Value>);

impl Reply {
    pub(super) fn new(values: Vec<Value>) -> Self {
        Self(values)
    }

    pub(super) fn code(&self) -> Result<i64, StoreError> {
        self.int(0)
    }

    pub(super) fn int(&self, i: usize) -> Result<i64, StoreError> {
        match self.0.get(i) {
            Some(Value::Int(n)) => Ok(*n),
            other => Err(unexpected(i, other)),
        }
    }

    pub(super) fn string(&self, i: usize) -> Result<String, StoreError> {
        match self.0.get(i) {
            Some(Value::BulkString(b)) => String::from_utf8(b.clone()).map_err(|_| unexpected(i, None)),
            Some(Value::SimpleString(s)) => Ok(s.clone()),
            other => Err(unexpected(i, other)),
        }
    }

    /// A nested array.
    pub(super) fn array(&self, i: usize) -> Result<&[Value], StoreError> {
        match self.0.get(i) {
            Some(Value::Array(items)) => Ok(items),
            other => Err(unexpected(i, other)),
        }
    }

    /// A flat `k1, v1, k2, v2…` array (HGETALL) as pairs.
    pub(super) fn pairs(&self, i: usize) -> Result<Vec<(String, String)>, StoreError> {
        match self.0.get(i) {
            Some(Value::Array(items)) => {
                let strings =
                    items.iter().map(as_string).collect::<Option<Vec<_>>>().ok_or_else(|| unexpected(i, None))?;
                Ok(strings.chunks_exact(2).map(|kv| (kv[0].clone(), kv[1].clone())).collect())
            }
            Some(Value::Map(items)) => items
                .iter()
                .map(|(k, v)| Some((as_string(k)?, as_string(v)?)))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| unexpected(i, None)),
            other => Err(unexpected(i, other)),
        }
    }

    /// A nested array of strings.
    pub(super) fn strings(&self, i: usize) -> Result<Vec<String>, StoreError> {
        self.array(i)?.iter().map(as_string).collect::<Option<Vec<_>>>().ok_or_else(|| unexpected(i, None))
    }

    /// Fails with `UnexpectedReply` for a code this call does not expect.
    pub(super) fn unexpected_code(&self) -> StoreError {
        StoreError::UnexpectedReply(format!("{:?}", self.0))
    }
}

/// A fenced write that either happened or was refused for a lost lease (`set_status`,
/// `save_state`, `finish_task`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fenced {
    Written,
    LeaseLost,
}

impl Fenced {
    pub(super) fn written(self) -> bool {
        self == Self::Written
    }
}

impl TryFrom<Reply> for Fenced {
    type Error = StoreError;

    fn try_from(reply: Reply) -> Result<Self, StoreError> {
        match reply.code()? {
            code::OK => Ok(Self::Written),
            code::LEASE_LOST => Ok(Self::LeaseLost),
            _ => Err(reply.unexpected_code()),
        }
    }
}

/// `withdraw_question`: taken back, answered meanwhile (the task is working again either
/// way), or the lease was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Withdrawn {
    TakenBack,
    AlreadyAnswered,
    LeaseLost,
}

impl TryFrom<Reply> for Withdrawn {
    type Error = StoreError;

    fn try_from(reply: Reply) -> Result<Self, StoreError> {
        match reply.code()? {
            code::OK => Ok(Self::TakenBack),
            code::NOTHING => Ok(Self::AlreadyAnswered),
            code::LEASE_LOST => Ok(Self::LeaseLost),
            _ => Err(reply.unexpected_code()),
        }
    }
}

impl TryFrom<Reply> for Renewal {
    type Error = StoreError;

    fn try_from(reply: Reply) -> Result<Self, StoreError> {
        match reply.code()? {
            code::OK => Ok(Self::Held { cancel_requested: reply.int(1)? == 1 }),
            code::LEASE_LOST => Ok(Self::Lost),
            _ => Err(reply.unexpected_code()),
        }
    }
}

impl TryFrom<Reply> for Started {
    type Error = StoreError;

    fn try_from(reply: Reply) -> Result<Self, StoreError> {
        match reply.code()? {
            code::OK => Ok(match reply.int(1)? {
                0 => Self::First,
                fence => Self::Before { fence: u64::try_from(fence).unwrap_or_default() },
            }),
            code::LEASE_LOST => Ok(Self::LeaseLost),
            _ => Err(reply.unexpected_code()),
        }
    }
}

impl TryFrom<Reply> for Hold {
    type Error = StoreError;

    fn try_from(reply: Reply) -> Result<Self, StoreError> {
        match reply.code()? {
            code::OK => Ok(Self::Held),
            2 => Ok(Self::CancelPending),
            code::LEASE_LOST => Ok(Self::LeaseLost),
            code::KEY_REUSED => Ok(Self::KeyReused(reply.string(1)?)),
            _ => Err(reply.unexpected_code()),
        }
    }
}

impl TryFrom<Reply> for HeldAnswer {
    type Error = StoreError;

    fn try_from(reply: Reply) -> Result<Self, StoreError> {
        match reply.code()? {
            code::OK => Ok(Self::Answered(reply.string(1)?)),
            code::NOTHING => Ok(Self::Waiting),
            3 => Ok(Self::Ended),
            code::LEASE_LOST => Ok(Self::LeaseLost),
            _ => Err(reply.unexpected_code()),
        }
    }
}

impl TryFrom<Reply> for Parked {
    type Error = StoreError;

    fn try_from(reply: Reply) -> Result<Self, StoreError> {
        match reply.code()? {
            code::OK => Ok(Self::Parked),
            2 => Ok(Self::CancelledInstead),
            code::LEASE_LOST => Ok(Self::LeaseLost),
            code::KEY_REUSED => Ok(Self::KeyReused(reply.string(1)?)),
            _ => Err(reply.unexpected_code()),
        }
    }
}

impl TryFrom<Reply> for Released {
    type Error = StoreError;

    fn try_from(reply: Reply) -> Result<Self, StoreError> {
        match reply.code()? {
            code::OK => Ok(Self::Requeued),
            3 => Ok(Self::Cancelled),
            4 => Ok(Self::Failed),
            code::LEASE_LOST => Ok(Self::LeaseLost),
            _ => Err(reply.unexpected_code()),
        }
    }
}

impl TryFrom<Reply> for Reclaimed {
    type Error = StoreError;

    fn try_from(reply: Reply) -> Result<Self, StoreError> {
        match reply.code()? {
            code::NOTHING => Ok(Self::Nothing),
            code::OK => Ok(Self::Requeued),
            2 => Ok(Self::Failed { tenant: reply.counted_tenant(2)? }),
            3 => Ok(Self::Cancelled { tenant: reply.counted_tenant(2)? }),
            4 => Ok(Self::AlreadyEnded { tenant: reply.counted_tenant(1)? }),
            _ => Err(reply.unexpected_code()),
        }
    }
}

impl TryFrom<Reply> for Answered {
    type Error = StoreError;

    fn try_from(reply: Reply) -> Result<Self, StoreError> {
        match reply.code()? {
            code::OK => Ok(Self::Applied {
                version: reply.int(1)? as u64,
                resumed: reply.int(2)? == 1,
                waited: u64::try_from(reply.int(3)?).ok().map(Duration::from_millis),
            }),
            code::NOTHING => Ok(Self::Ignored),
            code::NOT_FOUND => Ok(Self::NotFound),
            _ => Err(reply.unexpected_code()),
        }
    }
}

impl TryFrom<Reply> for CancelOutcome {
    type Error = StoreError;

    fn try_from(reply: Reply) -> Result<Self, StoreError> {
        match reply.code()? {
            code::OK => Ok(Self::Cancelled {
                from: TaskStatus::parse(&reply.string(2)?).ok_or_else(|| reply.unexpected_code())?,
                waited: u64::try_from(reply.int(3)?).ok().map(Duration::from_millis),
            }),
            2 => Ok(Self::Signalled),
            code::NOTHING => Ok(Self::AlreadyTerminal),
            code::NOT_FOUND => Ok(Self::NotFound),
            _ => Err(reply.unexpected_code()),
        }
    }
}

impl TryFrom<Reply> for OperatorFail {
    type Error = StoreError;

    fn try_from(reply: Reply) -> Result<Self, StoreError> {
        match reply.code()? {
            code::OK => Ok(Self::Failed {
                from: TaskStatus::parse(&reply.string(3)?).ok_or_else(|| reply.unexpected_code())?,
                counted_tenant: Some(reply.string(2)?).filter(|t| !t.is_empty()),
            }),
            code::NOTHING => Ok(Self::AlreadyTerminal),
            code::NOT_FOUND => Ok(Self::NotFound),
            _ => Err(reply.unexpected_code()),
        }
    }
}

impl TryFrom<Reply> for Admission {
    type Error = StoreError;

    fn try_from(reply: Reply) -> Result<Self, StoreError> {
        match reply.code()? {
            code::OK => Ok(Self::Admitted),
            code::NOTHING => {
                let limit = match reply.string(2)?.as_str() {
                    "requests" => Limit::Requests,
                    "creations" => Limit::Creations,
                    "active_tasks" => Limit::ActiveTasks,
                    other => return Err(StoreError::UnexpectedReply(format!("an unknown limit: {other:?}"))),
                };
                Ok(Self::Refused { limit, retry_after_ms: reply.int(1)?.max(1) as u64 })
            }
            _ => Err(reply.unexpected_code()),
        }
    }
}

/// Replies that need the task they are about.
impl Reply {
    /// `claim_task`: the claim, or `None` when the delivery was stale.
    pub(super) fn claim(self, task_id: &TaskId) -> Result<ClaimStep, StoreError> {
        match self.code()? {
            code::NOTHING => Ok(ClaimStep::Done(None)),
            code::FRONT => {
                let front = self.string(1)?;
                TaskId::parse(&front)
                    .map(ClaimStep::Front)
                    .ok_or_else(|| StoreError::UnexpectedReply(format!("queued id {front:?}")))
            }
            code::OK => {
                let traceparent = self.string(4)?;
                Ok(ClaimStep::Done(Some(Box::new(Claim {
                    task_id: task_id.clone(),
                    fence: self.int(1)? as u64,
                    tool: self.string(2)?,
                    arguments: self.string(3)?,
                    traceparent: (!traceparent.is_empty()).then_some(traceparent),
                    cancel_requested: self.int(5)? == 1,
                    answers: self.pairs(6)?,
                    client_capabilities: super::compact::restored_capabilities(
                        self.string(7)?,
                        self.string(10)? == "1",
                    ),
                    tenant: self.counted_tenant(8)?,
                    tool_state: self.string(9).ok().filter(|s| !s.is_empty()),
                    steps: self.pairs(11)?,
                    queued_ms: self.string(12)?.parse().ok(),
                    owner_tenant: self.string(13)?,
                }))))
            }
            _ => Err(self.unexpected_code()),
        }
    }

    /// `poll_task`: the snapshot, not found, or too soon.
    /// `read_task`: the snapshot, or `None` for an unknown task (or, for a client's read, one
    /// it does not own).
    pub(super) fn read(self, id: &TaskId) -> Result<Option<Snapshot>, StoreError> {
        match self.code()? {
            code::NOT_FOUND => Ok(None),
            code::OK => {
                let fields: Vec<Option<String>> = self.array(1)?.iter().map(as_string).collect();
                snapshot_from(id, &fields, self.pairs(2)?).map(Some).map_err(|e| StoreError::Corrupt(e.field))
            }
            _ => Err(self.unexpected_code()),
        }
    }

    pub(super) fn polled(self, id: &TaskId) -> Result<Polled, StoreError> {
        match self.code()? {
            code::NOT_FOUND => Ok(Polled::NotFound),
            code::TOO_SOON => Ok(Polled::TooSoon {
                retry_after_ms: self.int(1)?.max(1) as u64,
                interval_ms: self.int(2)?.max(0) as u64,
            }),
            code::OK => {
                let fields: Vec<Option<String>> = self.array(1)?.iter().map(as_string).collect();
                snapshot_from(id, &fields, self.pairs(2)?)
                    .map(|s| Polled::Found(Box::new(s)))
                    .map_err(|e| StoreError::Corrupt(e.field))
            }
            _ => Err(self.unexpected_code()),
        }
    }

    /// `create_task`: the creation time.
    pub(super) fn created_at(&self) -> Result<i64, StoreError> {
        match self.code()? {
            code::OK => self.int(1),
            // Another owner's task has this id (128 random bits collided, or a forged replay):
            // report it rather than overwrite it.
            code::EXISTS => Err(StoreError::UnexpectedReply("task id already exists".into())),
            code::IDEMPOTENCY_CONFLICT => Err(StoreError::KeyReused),
            _ => Err(self.unexpected_code()),
        }
    }

    /// The record's pool, when an enqueueing script refused the pool whose queue it was handed
    /// (`{-10, pool}`, the prelude's `other_pool`).
    pub(super) fn other_pool(&self) -> Option<String> {
        (self.code().ok()? == code::OTHER_POOL).then(|| self.string(1).ok()).flatten()
    }

    /// A tenant that counts against its active-task cap; empty means the task was not counted.
    fn counted_tenant(&self, i: usize) -> Result<Option<String>, StoreError> {
        Ok(Some(self.string(i)?).filter(|t| !t.is_empty()))
    }
}

pub(super) fn as_string(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

fn unexpected(i: usize, v: Option<&Value>) -> StoreError {
    StoreError::UnexpectedReply(format!("element {i}: {v:?}"))
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;

    fn reply(values: Vec<Value>) -> Reply {
        Reply::new(values)
    }

    fn s(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn fenced_writes_and_unknown_codes() {
        assert_eq!(Fenced::try_from(reply(vec![Value::Int(1)])).unwrap(), Fenced::Written);
        assert_eq!(Fenced::try_from(reply(vec![Value::Int(-2)])).unwrap(), Fenced::LeaseLost);
        assert!(matches!(Fenced::try_from(reply(vec![Value::Int(7)])), Err(StoreError::UnexpectedReply(_))));
        assert!(Fenced::try_from(reply(vec![])).is_err(), "an empty reply is an error, not a panic");
        assert_eq!(Withdrawn::try_from(reply(vec![Value::Int(1), Value::Int(4)])).unwrap(), Withdrawn::TakenBack);
        assert_eq!(Withdrawn::try_from(reply(vec![Value::Int(0)])).unwrap(), Withdrawn::AlreadyAnswered);
    }

    #[test]
    fn lease_replies() {
        let held = Renewal::try_from(reply(vec![Value::Int(1), Value::Int(1)])).unwrap();
        assert_eq!(held, Renewal::Held { cancel_requested: true });
        assert_eq!(Renewal::try_from(reply(vec![Value::Int(-2)])).unwrap(), Renewal::Lost);
        assert_eq!(Started::try_from(reply(vec![Value::Int(1), Value::Int(0)])).unwrap(), Started::First);
        assert_eq!(Started::try_from(reply(vec![Value::Int(1), Value::Int(4)])).unwrap(), Started::Before { fence: 4 });
        assert_eq!(Hold::try_from(reply(vec![Value::Int(2)])).unwrap(), Hold::CancelPending);
        assert_eq!(Hold::try_from(reply(vec![Value::Int(-5), s("k")])).unwrap(), Hold::KeyReused("k".into()));
        assert_eq!(HeldAnswer::try_from(reply(vec![Value::Int(3)])).unwrap(), HeldAnswer::Ended);
        assert_eq!(
            HeldAnswer::try_from(reply(vec![Value::Int(1), s("{}")])).unwrap(),
            HeldAnswer::Answered("{}".into())
        );
        assert_eq!(Parked::try_from(reply(vec![Value::Int(2)])).unwrap(), Parked::CancelledInstead);
        assert_eq!(Released::try_from(reply(vec![Value::Int(4)])).unwrap(), Released::Failed);
        assert_eq!(Released::try_from(reply(vec![Value::Int(-2)])).unwrap(), Released::LeaseLost);
    }

    #[test]
    fn an_uncounted_tenant_is_none() {
        let failed = Reclaimed::try_from(reply(vec![Value::Int(2), s("x"), s("")])).unwrap();
        assert_eq!(failed, Reclaimed::Failed { tenant: None });
        let ended = Reclaimed::try_from(reply(vec![Value::Int(4), s("acme")])).unwrap();
        assert_eq!(ended, Reclaimed::AlreadyEnded { tenant: Some("acme".into()) });
    }

    #[test]
    fn task_replies() {
        let applied =
            Answered::try_from(reply(vec![Value::Int(1), Value::Int(3), Value::Int(1), Value::Int(-1)])).unwrap();
        assert_eq!(applied, Answered::Applied { version: 3, resumed: true, waited: None });
        let cancelled = CancelOutcome::try_from(reply(vec![Value::Int(1), Value::Int(2), s("working"), Value::Int(5)]));
        assert_eq!(
            cancelled.unwrap(),
            CancelOutcome::Cancelled { from: TaskStatus::Working, waited: Some(Duration::from_millis(5)) }
        );
        assert!(
            CancelOutcome::try_from(reply(vec![Value::Int(1), Value::Int(2), s("nonsense"), Value::Int(5)])).is_err()
        );
        let refused = Admission::try_from(reply(vec![Value::Int(0), Value::Int(0), s("creations")])).unwrap();
        assert_eq!(refused, Admission::Refused { limit: Limit::Creations, retry_after_ms: 1 });
        let active = Admission::try_from(reply(vec![Value::Int(0), Value::Int(1000), s("active_tasks")])).unwrap();
        assert_eq!(active, Admission::Refused { limit: Limit::ActiveTasks, retry_after_ms: 1000 });
        let failed = OperatorFail::try_from(reply(vec![Value::Int(1), Value::Int(4), s("acme"), s("input_required")]));
        assert_eq!(
            failed.unwrap(),
            OperatorFail::Failed { from: TaskStatus::InputRequired, counted_tenant: Some("acme".into()) }
        );
        assert_eq!(OperatorFail::try_from(reply(vec![Value::Int(-1)])).unwrap(), OperatorFail::NotFound);
        assert!(OperatorFail::try_from(reply(vec![Value::Int(-2)])).is_err());
        // A name this side does not know is a mismatch with the script, not a limit to guess.
        assert!(Admission::try_from(reply(vec![Value::Int(0), Value::Int(1), s("active")])).is_err());
        assert!(reply(vec![Value::Int(-6)]).created_at().is_err());
        assert_eq!(reply(vec![Value::Int(1), Value::Int(42)]).created_at().unwrap(), 42);
        assert!(matches!(reply(vec![Value::Int(0)]).claim(&TaskId::generate(1)).unwrap(), ClaimStep::Done(None)));
    }
}
