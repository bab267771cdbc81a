//! Reads deliveries from this worker's pool's shard streams (never another pool's: a task is
//! only ever queued on its own pool's stream), as many as there are free slots, and claims them.
//!
//! A reader holds the slots it reads for while it blocks, so it never takes work this worker
//! cannot start at once. On a standalone Redis one reader blocks on every shard stream with one
//! `XREADGROUP`, holding every free slot. A Cluster (and a single-endpoint proxy in front of one,
//! `--redis-single-slot`) refuses a read across hash tags, so there each shard gets a reader of its own that holds one slot and blocks briefly ([`CLUSTER_BLOCK`]); the
//! semaphore is fair, so with fewer free slots than shards the readers take turns, and a task on
//! any shard waits at most about `shards / free slots × CLUSTER_BLOCK` for a reader.
//!
//! Deliveries that some consumer read but never claimed (it died between the read and the
//! claim, its claim failed, it drained with surplus deliveries) are taken over by the readers
//! themselves, with the slots they already hold, at most every half lease: so the takeover runs
//! on an idle worker, and never depends on a slot happening to be free at the right moment.
//!
//! On drain, nothing more is claimed: a delivery read but not yet started stays pending under
//! this consumer, and another worker's reader takes it over.

use std::sync::Arc;
use std::time::{Duration, Instant};

use taskgate_shared::backoff::Backoff;
use taskgate_shared::store::{Delivery, MAX_BLOCK};
use taskgate_shared::telemetry::metrics::TASKS;
use tokio::sync::OwnedSemaphorePermit;

use super::resend::Resend;
use super::{Shared, execution};
use crate::metrics::METRICS;

/// How long one `XREADGROUP` over every shard blocks; also how quickly a drain is noticed.
const BLOCK: Duration = MAX_BLOCK;

/// How long a Cluster shard reader blocks before it lets another reader have its slot.
const CLUSTER_BLOCK: Duration = Duration::from_millis(200);

pub(super) async fn run(shared: Arc<Shared>) {
    let shards: Vec<u8> = (0..shared.config.redis.queue_shards.min(256)).map(|s| s as u8).collect();
    if !shared.store.one_slot_per_command() {
        shared.store.reserve_blocking(1);
        return read(shared, shards, Reader { greedy: true, block: BLOCK }).await;
    }
    let reader = Reader { greedy: false, block: CLUSTER_BLOCK };
    shared.store.reserve_blocking(shards.len());
    let readers: Vec<_> =
        shards.into_iter().map(|shard| tokio::spawn(read(shared.clone(), vec![shard], reader))).collect();
    for reader in readers {
        let _ = reader.await;
    }
}

#[derive(Clone, Copy)]
struct Reader {
    /// Take every free slot (one reader over all shards) rather than one.
    greedy: bool,
    block: Duration,
}

async fn read(shared: Arc<Shared>, shards: Vec<u8>, reader: Reader) {
    let mut conn = None;
    let mut backoff = Backoff::redis();
    let stale_every = shared.config.lease / 2;
    let mut stale_checked: Option<Instant> = None;
    while !shared.stop_claiming.is_cancelled() {
        let first = tokio::select! {
            permit = shared.slots.clone().acquire_owned() => match permit { Ok(p) => p, Err(_) => return },
            () = shared.stop_claiming.cancelled() => return,
        };
        let mut permits = vec![first];
        if reader.greedy {
            while let Ok(p) = shared.slots.clone().try_acquire_owned() {
                permits.push(p);
            }
        }
        if stale_checked.is_none_or(|at| at.elapsed() >= stale_every) {
            stale_checked = Some(Instant::now());
            take_stale(&shared, &shards, &mut permits).await;
            if permits.is_empty() {
                continue;
            }
        }
        if conn.is_none() {
            match shared.store.blocking_connection().await {
                Ok(c) => conn = Some(c),
                Err(err) => {
                    tracing::warn!(error = %err, "cannot get a delivery connection");
                    backoff.wait().await;
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        // COUNT applies per stream: ask each shard for its share of the free slots, so a read
        // brings about as many deliveries as there are slots. Any delivery claims the fairest
        // task of its shard, so one per shard per read also takes turns over the shards, and a
        // task another tenant just queued waits for at most about one delivery per shard.
        let count = permits.len().div_ceil(shards.len()).max(1);
        match shared
            .store
            .read_deliveries(c, &shards, &shared.config.pool, &shared.worker_id, count, reader.block)
            .await
        {
            Ok(deliveries) => {
                backoff.reset();
                // A read over several shards may still deliver more than there were free slots
                // (up to one per shard more). The surplus is ours now (pending under this
                // consumer): it waits for slots rather than for the stale-delivery takeover,
                // unless the worker drains meanwhile.
                for delivery in deliveries {
                    let permit = match permits.pop() {
                        Some(permit) => permit,
                        None => tokio::select! {
                            permit = shared.slots.clone().acquire_owned() => match permit {
                                Ok(permit) => permit,
                                Err(_) => return,
                            },
                            () = shared.stop_claiming.cancelled() => return,
                        },
                    };
                    if shared.stop_claiming.is_cancelled() {
                        return;
                    }
                    spawn_claim(&shared, delivery, permit);
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "reading deliveries failed");
                if err.is_missing_group() {
                    // Redis lost its data (a restart without persistence): recreate the groups
                    // and the catalogue rather than fail forever.
                    if let Err(err) =
                        shared.store.ensure_groups(shared.config.redis.queue_shards, &shared.config.pool).await
                    {
                        tracing::warn!(error = %err, "recreating the consumer groups failed");
                    }
                    let _ = super::publish(&shared).await;
                }
                // Handed back, the connection is checked before it is lent again: a broken
                // one is replaced, a sound one (the error was Redis's answer) kept.
                conn = None;
                backoff.wait().await;
            }
        }
    }
}

/// Takes over deliveries idle for longer than a lease on these shards, one per held permit,
/// and starts claiming them; the permits used are taken out of `permits`.
async fn take_stale(shared: &Arc<Shared>, shards: &[u8], permits: &mut Vec<OwnedSemaphorePermit>) {
    let lease = shared.config.lease;
    for shard in shards {
        if permits.is_empty() || shared.stop_claiming.is_cancelled() {
            return;
        }
        match shared
            .store
            .take_stale_deliveries(*shard, &shared.config.pool, &shared.worker_id, lease, permits.len())
            .await
        {
            Ok(stale) => {
                for delivery in stale {
                    let Some(permit) = permits.pop() else { break };
                    tracing::info!(task_id = %delivery.task_id, "taking over an unclaimed delivery");
                    spawn_claim(shared, delivery, permit);
                }
            }
            Err(err) => tracing::warn!(shard, error = %err, "taking over stale deliveries failed"),
        }
    }
}

/// Claims one delivery and, if the claim holds, runs it on `permit`'s slot.
pub(super) fn spawn_claim(shared: &Arc<Shared>, delivery: Delivery, permit: OwnedSemaphorePermit) {
    let shared2 = shared.clone();
    shared.executions.spawn(async move {
        let sent = Instant::now();
        let mut delivery = delivery;
        if let Some(claim) = claim(&shared2, &mut delivery, sent).await {
            METRICS.leases_taken.inc();
            if let Some(queued) = claim.queued_ms {
                let waited = Duration::from_millis(taskgate_shared::task::now_ms().saturating_sub(queued));
                TASKS.left_state("queued", waited);
                METRICS.queued(&shared2.config.pool, &claim.owner_tenant, waited);
            }
            execution::run(shared2, claim, sent).await
        }
        drop(permit);
    });
}

/// Claims the fairest task on a delivery's shard. A claim whose outcome is unknown (a timeout, a
/// dropped connection, a failover under way) may have taken the lease, so it is sent again, for
/// the task the lost one was after (`delivery` follows the store's redirects): the script answers
/// the same claim to the same worker for the same entry, so the task is never left held by a
/// worker that does not run it. It is sent again for as long as a lease taken by the first send
/// would still be known valid; past that the run could not start anyway.
async fn claim(shared: &Shared, delivery: &mut Delivery, sent: Instant) -> Option<taskgate_shared::store::Claim> {
    let valid_until = sent + shared.config.lease.saturating_sub(shared.config.lease_margin());
    let mut resend = Resend::new("claim");
    loop {
        let err = match shared.store.claim(delivery, &shared.config.pool, &shared.worker_id, shared.config.lease).await
        {
            Ok(claim) => return claim,
            Err(err) => err,
        };
        if !resend.again(&delivery.task_id, &err, valid_until).await {
            // Still unknown: the entry stays pending under this consumer and is taken over after
            // a lease; a lease the lost claim took expires and is reclaimed.
            tracing::warn!(task_id = %delivery.task_id, error = %err, "claim not settled; left to the takeover");
            return None;
        }
    }
}
