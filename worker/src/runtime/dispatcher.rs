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
//! A read that failed may still have delivered: Redis hands entries to a blocked read as they
//! arrive, and its reply can be lost to the read's timeout (the worker was paused past it by
//! `SIGSTOP` or a frozen VM, or the network was slow) or to a dropped connection. Those entries are pending under this very consumer, where the takeover would
//! find them only once they had idled a whole lease. So after a failed read, and once at start,
//! the reader first reads its own pending entries (`XREADGROUP … 0`) and claims them
//! (invariant 14: an uncertain outcome is re-read).
//!
//! On drain, nothing more is claimed: a delivery read but not yet started stays pending under
//! this consumer, and another worker's reader takes it over.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use taskgate_shared::backoff::Backoff;
use taskgate_shared::store::{Delivery, MAX_BLOCK};
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
    let claiming = Arc::new(Claiming::default());
    if !shared.store.one_slot_per_command() {
        shared.store.reserve_blocking(1);
        return read(shared, claiming, shards, Reader { greedy: true, block: BLOCK }).await;
    }
    let reader = Reader { greedy: false, block: CLUSTER_BLOCK };
    shared.store.reserve_blocking(shards.len());
    let readers: Vec<_> = shards
        .into_iter()
        .map(|shard| tokio::spawn(read(shared.clone(), claiming.clone(), vec![shard], reader)))
        .collect();
    for reader in readers {
        let _ = reader.await;
    }
}

/// The deliveries (shard, stream entry) whose claim this worker has sent and not yet seen
/// answered. A read of this consumer's own pending entries returns those too: they are skipped,
/// so that one delivery is never claimed twice at once here.
#[derive(Default)]
struct Claiming(Mutex<HashSet<(u8, String)>>);

impl Claiming {
    fn contains(&self, delivery: &Delivery) -> bool {
        let key = (delivery.task_id.shard(), delivery.entry_id.clone());
        self.0.lock().expect("the claiming set's lock is never poisoned").contains(&key)
    }

    /// Marks the delivery as being claimed; `None` when it already is.
    fn start(self: &Arc<Self>, delivery: &Delivery) -> Option<ClaimingGuard> {
        let key = (delivery.task_id.shard(), delivery.entry_id.clone());
        let fresh = self.0.lock().expect("the claiming set's lock is never poisoned").insert(key.clone());
        fresh.then(|| ClaimingGuard { claiming: self.clone(), key })
    }
}

/// Unmarks its delivery when the claim's answer is in (or the claim was given up).
struct ClaimingGuard {
    claiming: Arc<Claiming>,
    key: (u8, String),
}

impl Drop for ClaimingGuard {
    fn drop(&mut self) {
        self.claiming.0.lock().expect("the claiming set's lock is never poisoned").remove(&self.key);
    }
}

#[derive(Clone, Copy)]
struct Reader {
    /// Take every free slot (one reader over all shards) rather than one.
    greedy: bool,
    block: Duration,
}

async fn read(shared: Arc<Shared>, claiming: Arc<Claiming>, shards: Vec<u8>, reader: Reader) {
    let mut conn = None;
    let mut backoff = Backoff::redis();
    let stale_every = shared.config.lease / 2;
    let mut stale_checked: Option<Instant> = None;
    // Whether this consumer may have deliveries pending that no reply brought: at start (a
    // worker restarted under the same `--worker-id`) and after every failed read.
    let mut own_pending = true;
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
            take_stale(&shared, &claiming, &shards, &mut permits).await;
            if permits.is_empty() {
                continue;
            }
        }
        if own_pending {
            // More than a lost read can have delivered, beside the claims still under way.
            let most = permits.len() + shared.config.concurrency as usize;
            match shared.store.own_pending_deliveries(&shards, &shared.config.pool, &shared.worker_id, most).await {
                Ok(pending) => {
                    own_pending = false;
                    let pending: Vec<_> = pending.into_iter().filter(|d| !claiming.contains(d)).collect();
                    if !pending.is_empty() {
                        tracing::info!(deliveries = pending.len(), "claiming deliveries a lost read left pending");
                    }
                    if !start_all(&shared, &claiming, pending, &mut permits).await {
                        return;
                    }
                    if permits.is_empty() {
                        continue;
                    }
                }
                // The read below fails too, and says why (and recreates lost groups).
                Err(err) => tracing::debug!(error = %err, "reading this consumer's pending deliveries failed"),
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
                if !start_all(&shared, &claiming, deliveries, &mut permits).await {
                    return;
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "reading deliveries failed");
                // Redis may have delivered before the reply was lost.
                own_pending = true;
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

/// Starts claiming each delivery on a held permit. A read over several shards may deliver
/// more than there were free slots (up to one per shard more): the surplus is ours now
/// (pending under this consumer) and waits for slots rather than for the stale-delivery
/// takeover. `false` when the worker drains meanwhile.
async fn start_all(
    shared: &Arc<Shared>,
    claiming: &Arc<Claiming>,
    deliveries: Vec<Delivery>,
    permits: &mut Vec<OwnedSemaphorePermit>,
) -> bool {
    for delivery in deliveries {
        let permit = match permits.pop() {
            Some(permit) => permit,
            None => tokio::select! {
                permit = shared.slots.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => return false,
                },
                () = shared.stop_claiming.cancelled() => return false,
            },
        };
        if shared.stop_claiming.is_cancelled() {
            return false;
        }
        spawn_claim(shared, claiming, delivery, permit);
    }
    true
}

/// Takes over deliveries idle for longer than a lease on these shards, one per held permit,
/// and starts claiming them; the permits used are taken out of `permits`.
async fn take_stale(
    shared: &Arc<Shared>,
    claiming: &Arc<Claiming>,
    shards: &[u8],
    permits: &mut Vec<OwnedSemaphorePermit>,
) {
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
                    spawn_claim(shared, claiming, delivery, permit);
                }
            }
            Err(err) => tracing::warn!(shard, error = %err, "taking over stale deliveries failed"),
        }
    }
}

/// Claims one delivery and, if the claim holds, runs it on `permit`'s slot.
fn spawn_claim(shared: &Arc<Shared>, claiming: &Arc<Claiming>, delivery: Delivery, permit: OwnedSemaphorePermit) {
    let Some(guard) = claiming.start(&delivery) else {
        // Its claim is under way already (read again from this consumer's pending entries).
        return;
    };
    let shared2 = shared.clone();
    shared.executions.spawn(async move {
        let sent = Instant::now();
        let mut delivery = delivery;
        let claimed = claim(&shared2, &mut delivery, sent).await;
        drop(guard);
        if let Some(claim) = claimed {
            METRICS.leases_taken.inc();
            // The store timed the wait as the task's time queued; this is the worker's own view of
            // it, by pool and tenant.
            if let Some(waited) = claim.queued_for {
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
