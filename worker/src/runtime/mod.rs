//! The worker's runtime: claim deliveries, run tools, renew leases, watch cancel signals,
//! reclaim expired leases, and drain on shutdown.

mod batching;
mod dispatcher;
mod execution;
mod finisher;
mod held;
mod lanes;
mod reaper;
mod renewer;
mod resend;
mod served;
mod signals;

use std::sync::Arc;
use std::time::Duration;

use taskgate_shared::store::Store;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::metrics::METRICS;

pub(crate) use finisher::Finisher;
pub(crate) use held::Held;
pub(crate) use lanes::{Lanes, shares};
pub(crate) use served::Served;

/// What every part of the runtime shares: one per lane (`lanes`), each lane with its own Redis
/// connection, finisher, slots and shards, and the rest the worker's, shared by all lanes.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) worker_id: String,
    pub(crate) store: Store,
    /// The tools this worker serves, and the specs it publishes for them.
    pub(crate) served: Arc<Served>,
    pub(crate) held: Arc<Held>,
    /// This lane's share of `--concurrency`.
    pub(crate) slots: Arc<Semaphore>,
    /// The queue shards this lane reads (every shard when the worker has one lane).
    pub(crate) shards: Vec<u8>,
    /// Fired on SIGTERM: claim nothing more.
    pub(crate) stop_claiming: CancellationToken,
    /// Fired when the drain grace period is over: release what is still running.
    pub(crate) drain_over: CancellationToken,
    pub(crate) executions: TaskTracker,
    /// Set once Redis has proved usable and the consumer groups exist: readiness waits for it.
    pub(crate) redis_usable: Arc<std::sync::atomic::AtomicBool>,
    /// Writes the ends of tasks that finish together in one script call.
    pub(crate) finisher: Finisher,
}

/// Runs until `shutdown` resolves, then drains. `shared` is the first lane's, `lanes` the
/// others' (none unless `--runtime per-core`).
pub(crate) async fn run(shared: Arc<Shared>, mut lanes: Lanes, shutdown: impl Future<Output = ()>) {
    let mut shutdown = std::pin::pin!(shutdown);
    // A worker that never reaches Redis still stops when asked.
    tokio::select! {
        () = wait_for_redis(&shared) => {}
        () = &mut shutdown => {
            tracing::info!("worker stopped before redis was usable");
            shared.stop_claiming.cancel();
            lanes.join().await;
            return;
        }
    }
    if let Err(err) = publish(&shared).await {
        tracing::warn!(error = %err, "could not publish tools; retrying in the background");
    }
    let tasks = [
        tokio::spawn(publish_tools(shared.clone())),
        tokio::spawn(renewer::run(shared.clone())),
        tokio::spawn(signals::run(shared.clone())),
        tokio::spawn(reaper::run(shared.clone())),
    ];
    let dispatcher = tokio::spawn(dispatcher::run(shared.clone()));
    // The other lanes claim once the first does, with renewals and cancel signals running.
    lanes.go();
    tracing::info!(worker_id = %shared.worker_id, pool = %shared.config.pool, lanes = lanes.len() + 1, tools = ?shared.served.current().tools.keys().collect::<Vec<_>>(), "worker running");

    shutdown.await;
    tracing::info!(running = shared.held.len(), "draining: no more claims");
    shared.stop_claiming.cancel();
    let _ = dispatcher.await;
    lanes.readers_stopped().await;
    shared.executions.close();
    if tokio::time::timeout(shared.config.drain_grace, shared.executions.wait()).await.is_err() {
        tracing::warn!(running = shared.held.len(), "drain grace over: releasing leases");
        shared.drain_over.cancel();
        shared.executions.wait().await;
    }
    lanes.join().await;
    for task in tasks {
        task.abort();
    }
    remove_consumers(&shared).await;
    tracing::info!("worker stopped");
}

/// Waits until Redis is usable and the consumer groups exist, saying why at each failed
/// attempt; readiness turns on after.
async fn wait_for_redis(shared: &Shared) {
    let shards = shared.config.redis.queue_shards;
    shared.store.wait_until_usable(async || shared.store.ensure_groups(shards, &shared.config.pool).await).await;
    shared.redis_usable.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Publishes this worker's tool specs as a heartbeat, every third of the catalogue TTL, and at
/// once when an upstream's tool list changed. A catalogue that was wiped comes back, and the
/// tools of a worker that died leave it once their entries run out.
async fn publish_tools(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(shared.config.catalogue_ttl / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let never = Arc::new(tokio::sync::Notify::new());
    let changed = shared.served.upstreams.as_ref().map_or(never, |u| u.changed.clone());
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = changed.notified() => {
                let collisions = shared.served.rebuild();
                tracing::info!(tools = shared.served.current().specs.len(), collisions = collisions.len(), "tool list changed");
            }
        }
        if let Err(err) = publish(&shared).await {
            tracing::warn!(error = %err, "could not publish tools");
        }
    }
}

/// One heartbeat into the catalogue; warns when live workers publish different upstream
/// configurations (expected only while a rolling deploy changes it).
pub(crate) async fn publish(shared: &Shared) -> Result<(), taskgate_shared::store::StoreError> {
    let specs = shared.served.current().specs.clone();
    let own = shared.served.digest();
    let digests = shared
        .store
        .publish_tools(
            &specs,
            &shared.served.offerings(),
            shared.served.hidden(),
            own,
            (&shared.worker_id, &status(shared).to_string()),
            &shared.config.pool,
            shared.config.catalogue_ttl,
        )
        .await?;
    let differs = digests.iter().any(|d| d != own);
    if differs && METRICS.config_mismatch.get() == 0 {
        tracing::warn!(own, live = ?digests, "workers of this namespace serve different upstream configurations");
    }
    METRICS.config_mismatch.set(i64::from(differs));
    Ok(())
}

/// What the operator console shows of this worker: its slots, how many are busy, and its
/// upstream servers' connections, as of this heartbeat.
fn status(shared: &Shared) -> serde_json::Value {
    let upstreams = shared.served.upstreams.as_ref().map(|u| u.health()).unwrap_or_default();
    serde_json::json!({
        "slots": shared.config.concurrency,
        "busy": shared.held.len(),
        "tools": shared.served.current().specs.len(),
        "pool": shared.config.pool,
        "upstreams": upstreams,
        // When these figures were true: the console shows their age beside them.
        "at": taskgate_shared::task::now_ms(),
    })
}

/// On a clean exit, deletes this worker's consumer from every shard's group, unless deliveries
/// are still pending on it (another worker's reader takes those over, and the consumer goes
/// once it is empty and idle).
async fn remove_consumers(shared: &Shared) {
    for shard in 0..shared.config.redis.queue_shards.min(256) {
        if let Err(err) =
            shared.store.reap_consumers(shard as u8, &shared.config.pool, Some(&shared.worker_id), Duration::MAX).await
        {
            tracing::warn!(shard, error = %err, "could not delete this worker's consumer");
        }
    }
}
