//! Recovery from dead workers, run by every worker (several racing reapers are safe: each step
//! re-checks the record inside its script).
//!
//! - Expired leases: requeue the task (or fail it past `--max-reclaims`).
//! - Deliveries a dead consumer read but never claimed: take them over and claim them.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use taskgate_shared::store::Reclaimed;

use taskgate_shared::telemetry::metrics::TASKS;

use taskgate_shared::task::now_ms;

use super::{Shared, dispatcher};
use crate::metrics::METRICS;

const BATCH: usize = 100;

pub(super) async fn run(shared: Arc<Shared>) {
    let lease = shared.config.lease();
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
        for shard in 0..shared.config.queue_shards.min(256) {
            reclaim_shard(&shared, shard as u8, &failure).await;
            if !shared.stop_claiming.is_cancelled() {
                take_stale(&shared, shard as u8, lease).await;
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
                shared.config.max_reclaims,
                failure,
                "The task failed: its worker was lost too often.",
                "Cancellation was acknowledged by the worker.",
            )
            .await;
        match outcome {
            Ok(Reclaimed::Nothing) => {}
            Ok(Reclaimed::AlreadyEnded { tenant }) => release_active(shared, &tenant, &id).await,
            Ok(Reclaimed::Requeued) => {
                METRICS.leases_reclaimed.inc();
                tracing::info!(task_id = %id, "lease expired; task requeued")
            }
            Ok(Reclaimed::Failed { tenant }) => {
                METRICS.leases_reclaimed.inc();
                TASKS.transition("working", "failed");
                tracing::warn!(task_id = %id, "lease expired too often; task failed");
                release_active(shared, &tenant, &id).await;
            }
            Ok(Reclaimed::Cancelled { tenant }) => {
                METRICS.leases_reclaimed.inc();
                TASKS.transition("working", "cancelled");
                tracing::info!(task_id = %id, "lease expired on a cancelled task; task cancelled");
                release_active(shared, &tenant, &id).await;
            }
            Err(err) => tracing::warn!(task_id = %id, error = %err, "reclaim failed"),
        }
    }
}

/// The task ended: it no longer counts against its tenant's active-task cap.
pub(super) async fn release_active(shared: &Shared, tenant: &str, id: &taskgate_shared::task::TaskId) {
    if tenant.is_empty() {
        return; // never counted: the cap was off when it was created
    }
    if let Err(err) = shared.store.release_active(tenant, id).await {
        tracing::warn!(task_id = %id, error = %err, "active-task count not updated; it heals at the task's expiry");
    }
}

/// Takes over unclaimed deliveries idle for longer than a lease, up to the free slots.
async fn take_stale(shared: &Arc<Shared>, shard: u8, min_idle: Duration) {
    let mut permits = Vec::new();
    while permits.len() < BATCH {
        match shared.slots.clone().try_acquire_owned() {
            Ok(p) => permits.push(p),
            Err(_) => break,
        }
    }
    if permits.is_empty() {
        return;
    }
    match shared.store.take_stale_deliveries(shard, &shared.worker_id, min_idle, permits.len()).await {
        Ok(stale) => {
            for delivery in stale {
                let Some(permit) = permits.pop() else { break };
                tracing::info!(task_id = %delivery.task_id, "taking over an unclaimed delivery");
                dispatcher::spawn_claim(shared, delivery, permit);
            }
        }
        Err(err) => tracing::warn!(shard, error = %err, "taking stale deliveries failed"),
    }
}
