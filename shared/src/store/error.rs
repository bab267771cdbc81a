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
    /// Every connection of a bounded pool stayed lent for the whole wait.
    #[error("every {pool} connection is in use (at most {max})")]
    PoolExhausted { pool: &'static str, max: usize },
    /// Where or how to reach Redis cannot work; the text never holds a secret.
    #[error("redis configuration: {0}")]
    Config(String),
    /// Behind Sentinel: no sentinel named a primary that could be reached (a failover under way,
    /// an unknown master name, or no sentinel answering).
    #[error("no redis primary: {0}")]
    NoPrimary(String),
    /// An idempotency key that made a task for another tool or other arguments.
    #[error("the idempotency key was used for another call")]
    KeyReused,
    /// A transition found its record's outbox is this owner's, not the one declared; nothing
    /// was written. `Store::on_outbox` sends it again with that key: it never leaves the store.
    #[error("the task's outbox belongs to another owner")]
    OtherOutbox(String),
}

impl StoreError {
    /// Redis could not be reached, or answered as a node that cannot take writes now (a
    /// replica, one still loading, a failover in progress, a primary with too few replicas in
    /// sync for its `min-replicas-to-write`): the operation did not happen, or its outcome is
    /// unknown, and a retry shortly may succeed.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Self::Timeout(_) | Self::PoolExhausted { .. } | Self::NoPrimary(_) => true,
            Self::Redis(err) => {
                err.is_io_error()
                    || err.is_connection_dropped()
                    || err.is_connection_refusal()
                    || err.is_timeout()
                    || matches!(
                        err.code(),
                        Some("READONLY" | "LOADING" | "MASTERDOWN" | "TRYAGAIN" | "CLUSTERDOWN" | "NOREPLICAS")
                    )
            }
            _ => false,
        }
    }

    /// Redis answered that a stream's consumer group does not exist (its data was lost).
    pub fn is_missing_group(&self) -> bool {
        matches!(self, Self::Redis(err) if err.code() == Some("NOGROUP"))
    }
}
