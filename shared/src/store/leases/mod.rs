//! The worker's operations: read deliveries, claim with a fenced lease, renew, report status,
//! park for input, finish, release, and reap expired leases. One file per concern.

use std::time::Duration;

use crate::task::TaskId;

mod claims;
mod fenced;
mod held;
mod queue;
mod reaper;

pub use claims::{MAX_BATCH, MAX_REDIRECTS};
pub use fenced::{Ending, Finish};
pub use queue::{Backlog, Delivery, entry_ms};

/// The identity every fenced write carries.
#[derive(Debug, Clone, Copy)]
pub struct Lease<'a> {
    pub task_id: &'a TaskId,
    pub worker: &'a str,
    pub fence: u64,
    /// The owner's [`owner_digest`](crate::store::owner_digest), when the lease holder knows it
    /// (from its claim): a transition then names the owner's outbox at once; `None` costs a
    /// task with an outbox one more round trip (docs/events.md, 2.3).
    pub outbox: Option<&'a str>,
}

impl<'a> Lease<'a> {
    /// The worker and its fencing token: what a fenced write that names no task in its events
    /// passes.
    pub(in crate::store) fn holder(self) -> (&'a str, u64) {
        (self.worker, self.fence)
    }
}

/// A script's three lease arguments, in the order every script's header lists them: task id,
/// worker id, fencing token.
impl redis::ToRedisArgs for Lease<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        (self.task_id.as_str(), self.worker, self.fence).write_redis_args(out);
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
