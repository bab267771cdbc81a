//! Errors of the storage layer.

/// A storage operation that did not happen.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("redis did not answer within {0:?}")]
    Timeout(std::time::Duration),
    #[error("unexpected reply from a script: {0}")]
    UnexpectedReply(String),
    #[error("corrupt task record field {0}")]
    Corrupt(&'static str),
    /// Where or how to reach Redis cannot work; the text never holds a secret.
    #[error("redis configuration: {0}")]
    Config(String),
}

impl StoreError {
    /// Redis answered that a stream's consumer group does not exist (its data was lost).
    pub fn is_missing_group(&self) -> bool {
        matches!(self, Self::Redis(err) if err.code() == Some("NOGROUP"))
    }
}
