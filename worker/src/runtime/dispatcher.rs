//! Reads deliveries from the shard streams, as many as there are free slots, and claims them.
//!
//! On a standalone Redis one reader blocks on every shard stream at once, holding the free
//! slots it reads for. A Cluster refuses a read across hash tags, so there each shard gets a
//! reader of its own; those readers must not hold slots while they block (with more shards than
//! slots, idle readers would starve busy shards), so each waits until a slot is free, reads at
//! most one delivery, then takes a slot for it. Several readers may pass that check together:
//! the surplus waits for a slot (at most one delivery per shard), pending under this consumer.

use std::sync::Arc;
use std::time::Duration;

use taskgate_shared::store::{Delivery, entry_ms};
use taskgate_shared::telemetry::metrics::TASKS;
use tokio::sync::OwnedSemaphorePermit;

use super::{Shared, execution};
use crate::metrics::METRICS;

/// How long one `XREADGROUP` blocks; also how quickly a drain is noticed.
const BLOCK: Duration = Duration::from_millis(1_000);

pub(super) async fn run(shared: Arc<Shared>) {
    let shards: Vec<u8> = (0..shared.config.queue_shards.min(256)).map(|s| s as u8).collect();
    if !shared.store.is_cluster() {
        return read(shared, shards, true).await;
    }
    let readers: Vec<_> =
        shards.into_iter().map(|shard| tokio::spawn(read(shared.clone(), vec![shard], false))).collect();
    for reader in readers {
        let _ = reader.await;
    }
}

/// One reader over `shards`. With `hold_slots`, it holds the free slots while it blocks.
async fn read(shared: Arc<Shared>, shards: Vec<u8>, hold_slots: bool) {
    let mut conn = None;
    let mut backoff = Duration::from_millis(100);
    while !shared.stop_claiming.is_cancelled() {
        let first = tokio::select! {
            permit = shared.slots.clone().acquire_owned() => match permit { Ok(p) => p, Err(_) => return },
            () = shared.stop_claiming.cancelled() => return,
        };
        let mut permits = vec![first];
        if hold_slots {
            while let Ok(p) = shared.slots.clone().try_acquire_owned() {
                permits.push(p);
            }
        }
        let count = permits.len();
        if !hold_slots {
            permits.clear();
        }
        if conn.is_none() {
            match shared.store.blocking_connection(BLOCK).await {
                Ok(c) => conn = Some(c),
                Err(err) => {
                    tracing::warn!(error = %err, "cannot open the delivery connection");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        match shared.store.read_deliveries(c, &shards, &shared.worker_id, count, BLOCK).await {
            Ok(deliveries) => {
                backoff = Duration::from_millis(100);
                // COUNT applies per stream, so a read over several shards may deliver more
                // than there were free slots. The surplus is ours now (pending under this
                // consumer): it waits for slots rather than for the stale-delivery takeover.
                for delivery in deliveries {
                    let permit = match permits.pop() {
                        Some(permit) => permit,
                        None => match shared.slots.clone().acquire_owned().await {
                            Ok(permit) => permit,
                            Err(_) => return,
                        },
                    };
                    spawn_claim(&shared, delivery, permit);
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "reading deliveries failed");
                if err.is_missing_group() {
                    // Redis lost its data (a restart without persistence): recreate the groups
                    // and the catalogue rather than fail forever.
                    if let Err(err) = shared.store.ensure_groups(shared.config.queue_shards).await {
                        tracing::warn!(error = %err, "recreating the consumer groups failed");
                    }
                    let _ = shared.store.publish_tools(&shared.specs).await;
                }
                conn = None;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// Claims one delivery and, if the claim holds, runs it on `permit`'s slot.
pub(super) fn spawn_claim(shared: &Arc<Shared>, delivery: Delivery, permit: OwnedSemaphorePermit) {
    let shared2 = shared.clone();
    shared.executions.spawn(async move {
        match shared2.store.claim(&delivery, &shared2.worker_id, shared2.config.lease()).await {
            Ok(Some(claim)) => {
                METRICS.leases_taken.inc();
                if let Some(enqueued) = entry_ms(&delivery.entry_id) {
                    let waited = super::now_ms().saturating_sub(enqueued);
                    TASKS.left_state("queued", Duration::from_millis(waited));
                }
                execution::run(shared2, claim).await
            }
            Ok(None) => {}
            // The entry stays pending under this consumer; the reaper hands it on later.
            Err(err) => tracing::warn!(task_id = %delivery.task_id, error = %err, "claim failed"),
        }
        drop(permit);
    });
}
