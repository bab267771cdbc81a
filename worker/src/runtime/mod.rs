//! The worker's runtime: claim deliveries, run tools, renew leases, watch cancel signals,
//! reclaim expired leases, and drain on shutdown.

mod dispatcher;
mod execution;
mod held;
mod reaper;
mod renewer;
mod signals;

use std::sync::Arc;
use std::time::Duration;

use taskgate_shared::store::Store;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::packs::Registry;

pub(crate) use held::Held;

/// What every part of the runtime shares.
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) worker_id: String,
    pub(crate) store: Store,
    pub(crate) tools: Registry,
    /// What this worker publishes (the tools' specs with configured overrides).
    pub(crate) specs: Vec<taskgate_shared::tools::ToolSpec>,
    pub(crate) held: Held,
    pub(crate) slots: Arc<Semaphore>,
    /// Fired on SIGTERM: claim nothing more.
    pub(crate) stop_claiming: CancellationToken,
    /// Fired when the drain grace period is over: release what is still running.
    pub(crate) drain_over: CancellationToken,
    pub(crate) executions: TaskTracker,
}

/// Runs until `shutdown` resolves, then drains.
pub(crate) async fn run(shared: Arc<Shared>, shutdown: impl Future<Output = ()>) {
    wait_for_redis(&shared).await;
    if let Err(err) = shared.store.publish_tools(&shared.specs).await {
        tracing::warn!(error = %err, "could not publish tools; retrying in the background");
    }
    let tasks = [
        tokio::spawn(publish_tools(shared.clone())),
        tokio::spawn(renewer::run(shared.clone())),
        tokio::spawn(signals::run(shared.clone())),
        tokio::spawn(reaper::run(shared.clone())),
    ];
    let dispatcher = tokio::spawn(dispatcher::run(shared.clone()));
    tracing::info!(worker_id = %shared.worker_id, tools = ?shared.tools.keys().collect::<Vec<_>>(), "worker running");

    shutdown.await;
    tracing::info!(running = shared.held.len(), "draining: no more claims");
    shared.stop_claiming.cancel();
    let _ = dispatcher.await;
    shared.executions.close();
    if tokio::time::timeout(shared.config.drain_grace(), shared.executions.wait()).await.is_err() {
        tracing::warn!(running = shared.held.len(), "drain grace over: releasing leases");
        shared.drain_over.cancel();
        shared.executions.wait().await;
    }
    for task in tasks {
        task.abort();
    }
    remove_consumers(&shared).await;
    tracing::info!("worker stopped");
}

/// Creates the consumer groups, retrying until Redis answers.
async fn wait_for_redis(shared: &Shared) {
    let mut delay = Duration::from_millis(100);
    loop {
        match shared.store.ensure_groups(shared.config.queue_shards).await {
            Ok(()) => break,
            Err(err) => {
                tracing::warn!(error = %err, retry_in = ?delay, "redis not ready");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
    if let Err(err) = shared.store.load_scripts().await {
        tracing::warn!(error = %err, "could not load scripts at start-up");
    }
}

/// Publishes this worker's tool specs now and then again periodically, so a catalogue that
/// was wiped comes back.
async fn publish_tools(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_secs(30));
    tick.tick().await;
    loop {
        tick.tick().await;
        if let Err(err) = shared.store.publish_tools(&shared.specs).await {
            tracing::warn!(error = %err, "could not publish tools");
        }
    }
}

/// On a clean exit, deletes this worker's consumer from every shard's group, unless deliveries
/// are still pending on it (another worker's reader takes those over, and the consumer goes
/// once it is empty and idle).
async fn remove_consumers(shared: &Shared) {
    for shard in 0..shared.config.queue_shards.min(256) {
        if let Err(err) = shared.store.reap_consumers(shard as u8, Some(&shared.worker_id), Duration::MAX).await {
            tracing::warn!(shard, error = %err, "could not delete this worker's consumer");
        }
    }
}
