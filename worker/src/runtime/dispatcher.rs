//! Reads deliveries from this worker's pool's shard streams (never another pool's: a task is
//! only ever queued on its own pool's stream), as many as there are free slots, and claims them:
//! the deliveries one read brought in one batch (`Store::claim_batch`), which takes the front of
//! each shard's fair ready set, one task per delivery. One round trip per read (per read and
//! shard where a command keeps to one slot, on a Cluster), whatever the concurrency, and no two
//! claims of this worker race for the same task.
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
use taskgate_shared::store::{Delivery, MAX_BATCH, MAX_BLOCK};
use tokio::sync::OwnedSemaphorePermit;

use super::resend::Resend;
use super::{Shared, execution};
use crate::metrics::METRICS;

/// How long one `XREADGROUP` over every shard blocks; also how quickly a drain is noticed.
const BLOCK: Duration = MAX_BLOCK;

/// How long a Cluster shard reader blocks before it lets another reader have its slot.
const CLUSTER_BLOCK: Duration = Duration::from_millis(200);

pub(super) async fn run(shared: Arc<Shared>) {
    let shards = shared.shards.clone();
    let claiming = Arc::new(Claiming::default());
    if !shared.store.one_slot_per_command() {
        shared.store.reserve_blocking(1);
        return supervise(shared, claiming, shards, Reader { greedy: true, block: BLOCK }).await;
    }
    let reader = Reader { greedy: false, block: CLUSTER_BLOCK };
    shared.store.reserve_blocking(shards.len());
    let readers: Vec<_> = shards
        .into_iter()
        .map(|shard| tokio::spawn(supervise(shared.clone(), claiming.clone(), vec![shard], reader)))
        .collect();
    for reader in readers {
        let _ = reader.await;
    }
}

/// Runs a reader until the worker drains, and again should it panic (a bug): a reader that
/// stopped would leave its shards' tasks queued while the worker looked healthy. The runs it
/// started are tasks of their own and go on; the new reader first claims what the old one left
/// pending under this consumer.
async fn supervise(shared: Arc<Shared>, claiming: Arc<Claiming>, shards: Vec<u8>, reader: Reader) {
    let mut backoff = Backoff::redis();
    while let Err(err) = tokio::spawn(read(shared.clone(), claiming.clone(), shards.clone(), reader)).await {
        tracing::error!(error = %err, ?shards, "a delivery reader panicked; starting it again");
        backoff.wait().await;
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

/// Starts claiming the deliveries, a permit held for each. A read over several shards may
/// deliver more than there were free slots (up to one per shard more): the surplus is ours now
/// (pending under this consumer) and waits for slots rather than for the stale-delivery
/// takeover. What the permits at hand cover is claimed at once, together (`claim_batch`; on a
/// Cluster, each shard's alone), and the rest as slots free: a claim never waits for slots
/// beyond its own. `false` when the worker drains meanwhile.
async fn start_all(
    shared: &Arc<Shared>,
    claiming: &Arc<Claiming>,
    deliveries: Vec<Delivery>,
    permits: &mut Vec<OwnedSemaphorePermit>,
) -> bool {
    let mut waiting = deliveries;
    while !waiting.is_empty() {
        if permits.is_empty() {
            let permit = tokio::select! {
                permit = shared.slots.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => return false,
                },
                () = shared.stop_claiming.cancelled() => return false,
            };
            permits.push(permit);
        }
        while permits.len() < waiting.len() {
            match shared.slots.clone().try_acquire_owned() {
                Ok(permit) => permits.push(permit),
                Err(_) => break,
            }
        }
        if shared.stop_claiming.is_cancelled() {
            return false;
        }
        let rest = waiting.split_off(permits.len().min(waiting.len()));
        for batch in batches(std::mem::replace(&mut waiting, rest), shared.store.one_slot_per_command()) {
            let held = permits.split_off(permits.len() - batch.len());
            spawn_claims(shared, claiming, batch, held);
        }
    }
    true
}

/// The deliveries in batches of at most [`MAX_BATCH`], in the order read: each batch of one
/// shard when `by_shard` (a Cluster's script keeps to one slot), otherwise mixing shards, so
/// that one read is one claim call.
fn batches(deliveries: Vec<Delivery>, by_shard: bool) -> Vec<Vec<Delivery>> {
    super::batching::batches(deliveries, by_shard, MAX_BATCH, 0, |d| (d.task_id.shard(), 0))
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
                let stale: Vec<_> = stale.into_iter().take(permits.len()).collect();
                for delivery in &stale {
                    tracing::info!(task_id = %delivery.task_id, "taking over an unclaimed delivery");
                }
                for batch in batches(stale, true) {
                    let held = permits.split_off(permits.len() - batch.len());
                    spawn_claims(shared, claiming, batch, held);
                }
            }
            Err(err) => tracing::warn!(shard, error = %err, "taking over stale deliveries failed"),
        }
    }
}

/// Claims one shard's deliveries together and runs each claim that holds on one of `permits`
/// (one per delivery); the permits of deliveries that took nothing are freed at once.
fn spawn_claims(
    shared: &Arc<Shared>,
    claiming: &Arc<Claiming>,
    deliveries: Vec<Delivery>,
    mut permits: Vec<OwnedSemaphorePermit>,
) {
    let mut guards = Vec::with_capacity(deliveries.len());
    let mut batch = Vec::with_capacity(deliveries.len());
    for delivery in deliveries {
        // `None`: its claim is under way already (read again from this consumer's pending
        // entries); its permit goes back.
        if let Some(guard) = claiming.start(&delivery) {
            guards.push(guard);
            batch.push(delivery);
        }
    }
    permits.truncate(batch.len());
    if batch.is_empty() {
        return;
    }
    let shared2 = shared.clone();
    shared.executions.spawn(async move {
        let sent = Instant::now();
        let claims = claim(&shared2, &batch, sent).await;
        drop(guards);
        for claim in claims {
            let Some(permit) = permits.pop() else { break };
            METRICS.leases_taken.inc();
            // The store timed the wait as the task's time queued; this is the worker's own view
            // of it, by pool and tenant.
            if let Some(waited) = claim.queued_for {
                METRICS.queued(&shared2.config.pool, &claim.owner_tenant, waited);
            }
            let shared3 = shared2.clone();
            shared2.executions.spawn(async move {
                execution::run(shared3, claim, sent).await;
                drop(permit);
            });
        }
    });
}

/// Claims the fairest tasks on one shard for its deliveries, in one batch. A claim whose
/// outcome is unknown (a timeout, a dropped connection, a failover under way) may have taken
/// leases, so it is sent again with the same deliveries: the script answers the same claims to
/// the same worker for the same first entry, so no task is left held by a worker that does not
/// run it. It is sent again for as long as a lease taken by the first send would still be known
/// valid; past that the runs could not start anyway.
async fn claim(shared: &Shared, batch: &[Delivery], sent: Instant) -> Vec<taskgate_shared::store::Claim> {
    let valid_until = sent + shared.config.lease.saturating_sub(shared.config.lease_margin());
    let mut resend = Resend::new("claim");
    loop {
        let err =
            match shared.store.claim_batch(batch, &shared.config.pool, &shared.worker_id, shared.config.lease).await {
                Ok(claims) => return claims,
                Err(err) => err,
            };
        if !resend.again(&batch[0].task_id, &err, valid_until).await {
            // Still unknown: the entries stay pending under this consumer and are taken over
            // after a lease; leases the lost claim took expire and are reclaimed.
            tracing::warn!(task_id = %batch[0].task_id, deliveries = batch.len(), error = %err, "claim not settled; left to the takeover");
            return Vec::new();
        }
    }
}
