//! Where the store's [`Transition`]s go: the lifecycle metrics of the process that made them
//! (`taskgate_task_transitions_total`, and the time spent in the state left), and a debug
//! line. Called from each typed reply that changed a status, never from a caller.
//!
//! A transition that ends a task also frees the tenant's active-task slot here, whichever
//! process or path ended it (a worker's finish, a park or release cancelled instead, the
//! reaper, a client's or an operator's cancel, an operator's fail): the store method's script
//! reads from the record whether the task counted and for which tenant, and its method calls
//! [`Store::ended`]. No caller frees a slot.
//!
//! Why a second round trip rather than a `ZREM` inside the ending script: the tenant's active
//! set sits in the tenant's hash tag (`{t…}`, one slot with its rate keys, so that admission is
//! one script), while the task's keys sit in its shard's (`{sNN}`). One script touches one
//! slot (invariant 2), so the slot is freed by one follow-up `ZREM` from the store, after the
//! script that ended the task. If that is lost, the id drops out when the task's expiry
//! passes (admission trims expired entries).

use std::time::Duration;

use super::Store;
use crate::task::{TaskId, Transition};
use crate::telemetry::metrics::TASKS;

/// The time-in-state label of a task waiting in its queue.
const QUEUED: &str = "queued";

pub(super) fn emit(task: &TaskId, transition: Transition) {
    TASKS.transition(transition.from_label(), transition.to.as_str());
    if let (Some(from), Some(spent)) = (transition.from, transition.spent) {
        TASKS.left_state(from.as_str(), spent);
    }
    tracing::debug!(
        task_id = %task,
        from = transition.from_label(),
        to = transition.to.as_str(),
        by = transition.by.as_str(),
        "task transition"
    );
}

/// A claim took a task that was waiting in its queue: the time it waited there, as the state
/// `queued` (a part of `working` that no status names, so no transition is counted). A claim
/// re-sent after its reply was lost answers the same claim again; only the one the caller gets
/// is timed.
pub(super) fn claimed(queued_for: Option<Duration>) {
    if let Some(waited) = queued_for {
        TASKS.left_state(QUEUED, waited);
    }
}

impl Store {
    /// `transition` ended the task: it is counted as [`emit`] counts, and the active-task slot
    /// it held (`slot`: its tenant, `None` when it did not count) is freed.
    pub(super) async fn ended(&self, task: &TaskId, transition: Transition, slot: Option<&str>) {
        debug_assert!(transition.to.is_terminal(), "{transition:?} does not end a task");
        emit(task, transition);
        self.free_slot(task, slot).await;
    }

    /// Frees the active-task slot of a task that is over without this call ending it: found
    /// already ended (a reply lost and the write sent again), or never created by the admission
    /// that took the slot. Idempotent. Best effort: an id left behind drops out when the task's
    /// expiry passes.
    pub(super) async fn free_slot(&self, task: &TaskId, slot: Option<&str>) {
        let Some(tenant) = slot else { return };
        let freed = redis::cmd("ZREM")
            .arg(self.keys().tenant(tenant).active)
            .arg(task.as_str())
            .query_async::<()>(&mut self.conn())
            .await;
        if let Err(err) = freed {
            tracing::warn!(task_id = %task, error = %err, "active-task count not updated; it heals at the task's expiry");
        }
    }
}
