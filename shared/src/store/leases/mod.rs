//! The worker's operations: read deliveries, claim with a fenced lease, renew, report status,
//! park for input, finish, release, and reap expired leases. One file per concern.

use std::time::Duration;

use crate::task::TaskId;

mod claims;
mod fenced;
mod held;
mod queue;
mod reaper;

pub use claims::MAX_REDIRECTS;
pub use fenced::Finish;
pub use queue::{Backlog, Delivery, entry_ms};

/// The identity every fenced write carries.
#[derive(Debug, Clone, Copy)]
pub struct Lease<'a> {
    pub task_id: &'a TaskId,
    pub worker: &'a str,
    pub fence: u64,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
