//! What admission and polling give back, below both the store methods and the scripts that
//! build them from their replies.

use crate::task::Snapshot;

/// Which limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Requests,
    Creations,
    ActiveTasks,
    Poll,
    /// Open listen streams on one replica (per principal or in all).
    ListenStreams,
}

impl Limit {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Requests => "requests",
            Self::Creations => "creations",
            Self::ActiveTasks => "active_tasks",
            Self::Poll => "poll",
            Self::ListenStreams => "listen_streams",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Admitted,
    Refused { limit: Limit, retry_after_ms: u64 },
}

/// A slice of a tenant's request rate leased by one replica (`Store::lease_requests`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leased {
    /// This many requests may be admitted (at least one, at most what was asked).
    Granted(u64),
    /// None now: the tenant is at its rate; the earliest a request would fit.
    Refused { retry_after_ms: u64 },
}

/// The outcome of a client's `tasks/get`.
#[derive(Debug, Clone)]
pub enum Polled {
    /// Unknown, expired or not the caller's.
    NotFound,
    TooSoon {
        retry_after_ms: u64,
        /// The task's `pollIntervalMs`.
        interval_ms: u64,
    },
    Found(Box<Snapshot>),
}
