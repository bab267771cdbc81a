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
}
