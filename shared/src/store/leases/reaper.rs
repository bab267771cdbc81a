//! Leases that end without a finish: a draining worker's release, and the reaper's reclaim of
//! expired ones.

use super::Lease;
use crate::store::transitions::emit;
use crate::store::{QueueKeys, Store, StoreError, TaskKeys, scripts};
use crate::task::{Actor, TaskId, TaskStatus, Transition};

/// The outcome of a held question whose worker stopped: the upstream session it belonged to is
/// gone, so nobody can take the answer any more.
const HELD_LOST: &str = "The worker holding the upstream server's session for this question stopped, so the question can no longer be answered; call the tool again.";
static HELD_LOST_ERROR: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| serde_json::json!({ "code": -32603, "message": HELD_LOST }).to_string());

/// What [`Store::release`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    Requeued,
    /// A cancel was pending: the task ended cancelled.
    Cancelled,
    /// It held a question for its creator: the task failed.
    Failed,
    LeaseLost,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reclaimed {
    Nothing,
    Requeued,
    /// Failed past the maximum; the owner's tenant if the task counted against its cap.
    Failed {
        tenant: Option<String>,
    },
    /// A cancel was pending; the owner's tenant.
    Cancelled {
        tenant: Option<String>,
    },
    /// The task had already ended (a replay of a reclaim that ran, or a stale index entry);
    /// the owner's tenant, so that its active-task slot is released.
    AlreadyEnded {
        tenant: Option<String>,
    },
}

impl Store {
    /// Hands a held task back to its pool's queue (draining), or ends it: cancelled when a
    /// cancel was pending, failed when it holds a question that cannot outlive this worker.
    /// `pool`: the releasing worker's, where the task came from (checked by the script).
    pub async fn release(&self, lease: Lease<'_>, pool: &str, cancelled_message: &str) -> Result<Released, StoreError> {
        let keys = self.keys().task(lease.task_id);
        let reply = self
            .on_pool_queue(lease.task_id, pool, |queue: QueueKeys, pool: &str| {
                let mut call = scripts::RELEASE_TASK.keys(requeue_keys(&keys, &queue));
                call.arg(lease.task_id.as_str())
                    .arg(lease.worker)
                    .arg(lease.fence)
                    .arg(cancelled_message)
                    .arg(self.events_channel(lease.task_id))
                    .arg(HELD_LOST_ERROR.as_str())
                    .arg(HELD_LOST)
                    .arg(pool);
                call
            })
            .await?;
        let released = Released::try_from(reply)?;
        let ended = match released {
            Released::Cancelled => Some((TaskStatus::Working, TaskStatus::Cancelled)),
            // Only a task holding a question (shown as `input_required`) fails on release.
            Released::Failed => Some((TaskStatus::InputRequired, TaskStatus::Failed)),
            Released::Requeued | Released::LeaseLost => None,
        };
        if let Some((from, to)) = ended {
            emit(lease.task_id, Transition::new(Some(from), to, Actor::Worker));
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

    /// Requeues (or fails, past `max_reclaims`) a task whose lease expired, onto the queue of
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
        let keys = self.keys().task(task_id);
        let reply = self
            .on_pool_queue(task_id, pool, |queue: QueueKeys, pool: &str| {
                let mut call = scripts::RECLAIM_TASK.keys(requeue_keys(&keys, &queue));
                call.arg(task_id.as_str())
                    .arg(max_reclaims)
                    .arg(failure_error)
                    .arg(failure_message)
                    .arg(cancelled_message)
                    .arg(self.events_channel(task_id))
                    .arg(HELD_LOST_ERROR.as_str())
                    .arg(HELD_LOST)
                    .arg(pool);
                call
            })
            .await?;
        let reclaimed = Reclaimed::try_from(reply)?;
        let to = match reclaimed {
            Reclaimed::Failed { .. } => Some(TaskStatus::Failed),
            Reclaimed::Cancelled { .. } => Some(TaskStatus::Cancelled),
            Reclaimed::Nothing | Reclaimed::Requeued | Reclaimed::AlreadyEnded { .. } => None,
        };
        if let Some(to) = to {
            emit(task_id, Transition::new(Some(TaskStatus::Working), to, Actor::Reaper));
        }
        Ok(reclaimed)
    }
}

/// The keys of a script that may put a held task back on its pool's queue (`release_task`,
/// `reclaim_task`), in their headers' order.
fn requeue_keys<'a>(keys: &'a TaskKeys, queue: &'a QueueKeys) -> [&'a str; 7] {
    [&keys.record, &keys.leases, &queue.stream, &keys.inputs, &keys.timeline, &queue.ready, &queue.fair]
}
