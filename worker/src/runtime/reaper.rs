//! Recovery from dead workers, run by every worker (several racing reapers are safe: each step
//! re-checks the record inside its script).
//!
//! - Expired leases: requeue the task (or fail it past `--max-reclaims`), onto its own pool's
//!   queue whichever pool this worker is in: the lease index is per shard, not per pool, so a
//!   pool whose every worker died still gets its tasks requeued for when one comes back.
//! - Consumers of dead workers of this worker's pool, once nothing is pending on them (the readers take pending
//!   deliveries over; see the dispatcher).

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use taskgate_shared::store::Reclaimed;

use taskgate_shared::task::now_ms;

use super::Shared;
use crate::metrics::METRICS;

const BATCH: usize = 100;

pub(super) async fn run(shared: Arc<Shared>) {
    let lease = shared.config.lease;
    let period = (lease / 2).min(Duration::from_secs(5));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let failure = json!({
        "code": -32603,
        "message": format!("the task was abandoned: its worker lease expired more than {} times", shared.config.max_reclaims),
    })
    .to_string();
    loop {
        tick.tick().await;
        for shard in 0..shared.config.redis.queue_shards.min(256) {
            reclaim_shard(&shared, shard as u8, &failure).await;
            // A consumer idle for two leases is not reading: a live worker reads every second.
            if let Err(err) = shared.store.reap_consumers(shard as u8, &shared.config.pool, None, lease * 2).await {
                tracing::warn!(shard, error = %err, "deleting idle consumers failed");
            }
        }
    }
}

async fn reclaim_shard(shared: &Shared, shard: u8, failure: &str) {
    let due = match shared.store.due_leases(shard, now_ms(), BATCH).await {
        Ok(due) => due,
        Err(err) => return tracing::warn!(shard, error = %err, "reading the lease index failed"),
    };
    for id in due {
        let outcome = shared
            .store
            .reclaim(
                &id,
                // A first guess: the lease index is the shard's, so a lease of another pool's
                // task is found here too, and the store requeues it onto that pool's queue.
                &shared.config.pool,
                shared.config.max_reclaims,
                failure,
                "The task failed: its worker was lost too often.",
                "Cancellation was acknowledged by the worker.",
            )
            .await;
        match outcome {
            // The store freed the active-task slot of a task it ended (or found ended).
            Ok(Reclaimed::Nothing | Reclaimed::AlreadyEnded) => {}
            Ok(Reclaimed::Requeued) => {
                METRICS.leases_reclaimed.inc();
                tracing::info!(task_id = %id, "lease expired; task requeued")
            }
            Ok(Reclaimed::Failed) => {
                METRICS.leases_reclaimed.inc();
                tracing::warn!(task_id = %id, "lease expired too often; task failed");
            }
            Ok(Reclaimed::Cancelled) => {
                METRICS.leases_reclaimed.inc();
                tracing::info!(task_id = %id, "lease expired on a cancelled task; task cancelled");
            }
            Err(err) => tracing::warn!(task_id = %id, error = %err, "reclaim failed"),
        }
    }
}
