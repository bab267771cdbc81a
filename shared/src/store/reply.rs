//! Reading script replies. Every script returns an array whose first element is a code. The
//! codes several scripts share are named here; each script's module (`scripts/<name>.rs`)
//! names its own and turns its reply into a typed value, so no caller matches raw codes.

use std::time::Duration;

use redis::Value;

use super::StoreError;

/// The reply codes several scripts share (each script's header lists the ones it returns). The
/// scripts write them through the prelude's `REPLY` table, which a test holds equal to these;
/// a code only one script returns is named in that script's module.
pub(super) mod code {
    /// Nothing to do, or nothing written.
    pub(crate) const NOTHING: i64 = 0;
    pub(crate) const OK: i64 = 1;
    /// No such task, or not the caller's.
    pub(crate) const NOT_FOUND: i64 = -1;
    /// The caller's lease (worker and fencing token) is no longer the task's.
    pub(crate) const LEASE_LOST: i64 = -2;
    /// An input key issued before (`hold_for_input`, `request_input`).
    pub(crate) const KEY_REUSED: i64 = -5;
    /// `{-10, pool}`: the task belongs to another pool's queue (the prelude's `other_pool`).
    pub(crate) const OTHER_POOL: i64 = -10;
    /// `{-11, owner}`: the record's outbox is this owner's, not the declared one (the prelude's
    /// `other_outbox`): nothing written; the store sends it again with that outbox.
    pub(crate) const OTHER_OUTBOX: i64 = -11;
    /// `{3, version, tenant, …}`: this script ended the task cancelled, as a cancel was pending
    /// (`release_task`, `reclaim_task`, `request_input`); `tenant` is the one whose active-task
    /// slot the task held, `''` when it did not count (read with [`Reply::counted_tenant`]).
    /// A worker's own run adds how long it worked (`release_task`, `request_input`).
    pub(crate) const CANCELLED: i64 = 3;
    /// `{4, version, tenant}`: this script ended the task failed (`release_task`,
    /// `reclaim_task`); `tenant` as for [`CANCELLED`].
    pub(crate) const FAILED: i64 = 4;
    /// The task had ended before this script ran: nothing of it written (`reclaim_task`,
    /// `held_answer`).
    pub(crate) const ALREADY_ENDED: i64 = 5;
}

/// A script's reply array.
pub(super) struct Reply(Vec<Value>);

impl Reply {
    pub(super) fn new(values: Vec<Value>) -> Self {
        Self(values)
    }

    /// The values as they came, for a test that nests one reply in another.
    #[cfg(test)]
    pub(super) fn into_values(self) -> Vec<Value> {
        self.0
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

    /// A batch script's replies, `{1, reply…}`: each nested reply after the code, in order, up
    /// to the first that is not an array.
    pub(super) fn batch(&self) -> Result<Vec<Reply>, StoreError> {
        if self.code()? != code::OK {
            return Err(self.unexpected_code());
        }
        Ok(self.0[1..]
            .iter()
            .map_while(|v| if let Value::Array(items) = v { Some(Reply(items.clone())) } else { None })
            .collect())
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

    /// A time in milliseconds, `None` for `-1` (or any negative): the script could not tell (the
    /// prelude's `since`).
    pub(super) fn spent(&self, i: usize) -> Result<Option<Duration>, StoreError> {
        Ok(u64::try_from(self.int(i)?).ok().map(Duration::from_millis))
    }

    /// A nested array of strings.
    pub(super) fn strings(&self, i: usize) -> Result<Vec<String>, StoreError> {
        self.array(i)?.iter().map(as_string).collect::<Option<Vec<_>>>().ok_or_else(|| unexpected(i, None))
    }

    /// Fails with `UnexpectedReply` for a code this call does not expect.
    /// A code the script's module does not expect; [`StoreError::OtherOutbox`] for the prelude's
    /// `other_outbox`, which any transition may answer and `Store::on_outbox` resends.
    pub(super) fn unexpected_code(&self) -> StoreError {
        if self.code().ok() == Some(code::OTHER_OUTBOX)
            && let Ok(owner) = self.string(1)
        {
            return StoreError::OtherOutbox(owner);
        }
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

impl Reply {
    /// The record's pool, when an enqueueing script refused the pool whose queue it was handed
    /// (`{-10, pool}`, the prelude's `other_pool`).
    pub(super) fn other_pool(&self) -> Option<String> {
        (self.code().ok()? == code::OTHER_POOL).then(|| self.string(1).ok()).flatten()
    }

    /// A tenant that counts against its active-task cap; empty means the task was not counted.
    pub(super) fn counted_tenant(&self, i: usize) -> Result<Option<String>, StoreError> {
        Ok(Some(self.string(i)?).filter(|t| !t.is_empty()))
    }
}

/// What a script that ended a worker's run tells beside its code: the tenant whose active-task
/// slot the task held (`None` when the task did not end, or did not count), and how long the run
/// worked, from its claim (`None` when the record did not say).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(in crate::store) struct RunEnd {
    pub(in crate::store) slot: Option<String>,
    pub(in crate::store) ran: Option<Duration>,
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

/// A reply as a script sends it, for the decoding tests: `reply![1, 4, "acme"]`.
#[cfg(test)]
macro_rules! reply {
    ($($item:expr),* $(,)?) => {
        $crate::store::reply::Reply::new(vec![$($crate::store::reply::TestValue::value($item)),*])
    };
}
#[cfg(test)]
pub(super) use reply;

/// What `reply!` takes: integers, text, or a value as it is.
#[cfg(test)]
pub(super) trait TestValue {
    fn value(self) -> Value;
}

#[cfg(test)]
impl TestValue for i32 {
    fn value(self) -> Value {
        Value::Int(self.into())
    }
}

#[cfg(test)]
impl TestValue for i64 {
    fn value(self) -> Value {
        Value::Int(self)
    }
}

#[cfg(test)]
impl TestValue for &str {
    fn value(self) -> Value {
        Value::BulkString(self.as_bytes().to_vec())
    }
}

#[cfg(test)]
impl TestValue for Value {
    fn value(self) -> Value {
        self
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;

    #[test]
    fn fenced_writes_and_unknown_codes() {
        let reply = |values| Reply::new(values);
        assert_eq!(Fenced::try_from(reply(vec![Value::Int(1)])).unwrap(), Fenced::Written);
        assert_eq!(Fenced::try_from(reply(vec![Value::Int(-2)])).unwrap(), Fenced::LeaseLost);
        assert!(matches!(Fenced::try_from(reply(vec![Value::Int(7)])), Err(StoreError::UnexpectedReply(_))));
        assert!(Fenced::try_from(reply(vec![])).is_err(), "an empty reply is an error, not a panic");
    }
}
