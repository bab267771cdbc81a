//! Reading script replies. Every script returns an array whose first element is a code; the
//! codes are defined once here and repeated in the script headers.

use redis::Value;

use super::StoreError;

/// Script reply codes.
pub(super) mod code {
    pub(crate) const NOTHING: i64 = 0;
    pub(crate) const OK: i64 = 1;
    pub(crate) const NOT_FOUND: i64 = -1;
    pub(crate) const LEASE_LOST: i64 = -2;
    pub(crate) const KEY_REUSED: i64 = -5;
    pub(crate) const EXISTS: i64 = -6;
    pub(crate) const TOO_SOON: i64 = -9;
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
