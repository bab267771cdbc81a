//! Leases that end without a finish: a draining worker's release, and the reaper's reclaim of
//! expired ones.

use super::Lease;
use crate::store::outcomes::{Reclaimed, Released};
use crate::store::scripts::{reclaim_task, release_task};
use crate::store::{Store, StoreError};
use crate::task::{Actor, TaskId, TaskStatus, Transition};

/// The outcome of a held question whose worker stopped: the upstream session it belonged to is
/// gone, so nobody can take the answer any more.
const HELD_LOST: &str = "The worker holding the upstream server's session for this question stopped, so the question can no longer be answered; call the tool again.";
static HELD_LOST_ERROR: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| serde_json::json!({ "code": -32603, "message": HELD_LOST }).to_string());

impl Store {
    /// Hands a held task back to its pool's queue (draining), or ends it: cancelled when a
    /// cancel was pending, failed when it holds a question that cannot outlive this worker.
    /// `pool`: the releasing worker's, where the task came from (checked by the script).
    pub async fn release(&self, lease: Lease<'_>, pool: &str, cancelled_message: &str) -> Result<Released, StoreError> {
        let events = self.events_channel(lease.task_id);
        let args = release_task::Args {
            lease,
            cancelled_message,
            events: &events,
            held_lost: (&HELD_LOST_ERROR, HELD_LOST),
            pool,
        };
        let (released, run) = self
            .on_outbox(lease.task_id, lease.outbox, |keys| async move { release_task::call(self, &keys, args).await })
            .await?;
        let ended = match released {
            Released::Cancelled => Some((TaskStatus::Working, TaskStatus::Cancelled)),
            // Only a task holding a question (shown as `input_required`) fails on release.
            Released::Failed => Some((TaskStatus::InputRequired, TaskStatus::Failed)),
            Released::Requeued | Released::LeaseLost => None,
        };
        if let Some((from, to)) = ended {
            let transition = Transition::new(Some(from), to, Actor::Worker).after(run.ran);
            self.ended(lease.task_id, transition, run.slot.as_deref()).await;
        }
        Ok(released)
    }

    /// Task ids in a shard's lease index whose lease is due by the caller's clock. A hint:
    /// `reclaim` re-checks against Redis time.
    pub async fn due_leases(&self, shard: u8, now_ms: u64, limit: usize) -> Result<Vec<TaskId>, StoreError> {
        let ids: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(self.keys().shard(shard).leases)
            .arg("-inf")
            .arg(now_ms)
            .arg("LIMIT")
            .arg(0)
            .arg(limit)
            .query_async(&mut self.conn())
            .await?;
        Ok(ids.iter().filter_map(|id| TaskId::parse(id)).collect())
    }

    /// Requeues (or fails, past `max_reclaims`) a task whose lease expired (a task it ends gives
    /// back its active-task slot), onto the queue of
    /// the task's own pool (the record's), whichever pool the reaping worker is in: `pool` is
    /// only the first guess (the reaper's own, right for most of what it finds).
    pub async fn reclaim(
        &self,
        task_id: &TaskId,
        pool: &str,
        max_reclaims: u32,
        failure_error: &str,
        failure_message: &str,
        cancelled_message: &str,
    ) -> Result<Reclaimed, StoreError> {
        let events = self.events_channel(task_id);
        let args = reclaim_task::Args {
            task_id,
            max_reclaims,
            failure: (failure_error, failure_message),
            cancelled_message,
            events: &events,
            held_lost: (&HELD_LOST_ERROR, HELD_LOST),
            pool,
        };
        // The reaper does not know the owner: a task with an outbox costs one more round trip.
        let (reclaimed, slot) =
            self.on_outbox(task_id, None, |keys| async move { reclaim_task::call(self, &keys, args).await }).await?;
        let ended = match reclaimed {
            Reclaimed::Failed => Some(TaskStatus::Failed),
            Reclaimed::Cancelled => Some(TaskStatus::Cancelled),
            // A replay of a reclaim that ended it, whose reply was lost: the slot is freed again.
            Reclaimed::AlreadyEnded => {
                self.free_slot(task_id, slot.as_deref()).await;
                None
            }
            Reclaimed::Nothing | Reclaimed::Requeued => None,
        };
        if let Some(to) = ended {
            let transition = Transition::new(Some(TaskStatus::Working), to, Actor::Reaper);
            self.ended(task_id, transition, slot.as_deref()).await;
        }
        Ok(reclaimed)
    }
}
