//! Sending a claim or an outcome again while its outcome is unknown: a timeout, a dropped
//! connection, no primary while Sentinel fails over, a primary that refuses writes for want of
//! replicas. Both scripts answer a replay by the same worker (and entry, or token) as the first
//! send would have, so sending again is safe (rule 14).
//!
//! It goes on for as long as the lease is known to be valid (rule 12), not for a fixed number
//! of tries: a failover takes seconds (Sentinel's `down-after-milliseconds` plus an election),
//! and a result given up within it was dropped, leaving the task to wait for its lease to
//! expire and to run again.

use std::time::{Duration, Instant};

use taskgate_shared::store::StoreError;
use taskgate_shared::task::TaskId;

/// The first wait; it doubles up to [`LONGEST`].
const FIRST: Duration = Duration::from_millis(100);

/// The longest wait between two sends: how late after Redis is back a write goes through.
const LONGEST: Duration = Duration::from_secs(1);

/// The pacing of one claim's or one outcome's sends.
pub(super) struct Resend {
    what: &'static str,
    wait: Duration,
    attempt: u32,
}

impl Resend {
    pub(super) fn new(what: &'static str) -> Self {
        Self { what, wait: FIRST, attempt: 1 }
    }

    /// After a send that failed with `err`: `true`, once it has waited, when sending again may
    /// settle it before `deadline` (an outcome that is unknown, or a Redis that cannot take it
    /// now); `false` at once otherwise.
    pub(super) async fn again(&mut self, task_id: &TaskId, err: &StoreError, deadline: Instant) -> bool {
        let left = deadline.saturating_duration_since(Instant::now());
        if !err.is_unavailable() || left.is_zero() {
            return false;
        }
        let (what, attempt) = (self.what, self.attempt);
        tracing::warn!(task_id = %task_id, what, attempt, error = %err, "outcome unknown; sending it again");
        tokio::time::sleep(self.wait.min(left)).await;
        self.wait = (self.wait * 2).min(LONGEST);
        self.attempt += 1;
        true
    }
}
