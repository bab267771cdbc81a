//! The taskgate worker: claims tasks through fenced leases, runs the tools, parks tasks for
//! input, writes outcomes. Tool code runs only here.

pub mod config;
mod metrics;
pub mod packs;
mod runtime;
pub mod tool;
pub mod upstream;

use std::sync::Arc;

use taskgate_shared::store::{Store, StoreError};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use config::Config;

/// A worker that cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Pack(#[from] packs::UnknownPack),
    #[error(transparent)]
    Override(#[from] config::BadOverride),
    #[error(transparent)]
    Config(#[from] config::TimeoutTooLong),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Upstreams(#[from] upstream::ConfigError),
    #[error("tool names collide: {0:?}; give the upstream servers distinct prefixes")]
    Collision(Vec<String>),
    #[error("cannot listen for metrics on {addr}: {source}")]
    MetricsListen { addr: std::net::SocketAddr, source: std::io::Error },
}

/// Runs the worker until `shutdown` resolves, then drains (see the README's operations notes).
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), StartError> {
    config.validate()?;
    let tools = packs::registry(&config.tools, &config.pack_options())?;
    let specs = config.specs(&tools)?;
    let upstreams_stop = CancellationToken::new();
    let upstreams = match &config.upstreams {
        Some(path) => {
            let configs = upstream::config::load(path)?;
            tracing::info!(file = %path.display(), servers = configs.len(), "starting upstream servers");
            let upstreams = upstream::Upstreams::start(configs, config.cancel_grace(), upstreams_stop.clone());
            upstreams.first_listings().await;
            Some(upstreams)
        }
        None => None,
    };
    let served = runtime::Served::new(tools, specs, upstreams);
    let collisions = served.rebuild();
    if !collisions.is_empty() {
        upstreams_stop.cancel();
        return Err(StartError::Collision(collisions));
    }
    let store = Store::connect_lazy(&config.redis_url, &config.namespace, config.redis_timeout())?;
    let metrics_listener = match config.metrics_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr).await.map_err(|source| StartError::MetricsListen { addr, source })?,
        ),
        None => None,
    };
    let shared = Arc::new(runtime::Shared {
        worker_id: config.worker_id(),
        slots: Arc::new(Semaphore::new(config.concurrency as usize)),
        config,
        store,
        served,
        held: runtime::Held::default(),
        stop_claiming: CancellationToken::new(),
        drain_over: CancellationToken::new(),
        executions: TaskTracker::new(),
    });
    if let Some(listener) = metrics_listener {
        tracing::info!(listen = ?listener.local_addr().ok(), "serving /metrics, /healthz and /readyz");
        tokio::spawn(metrics::serve(shared.clone(), listener));
    }
    runtime::run(shared, shutdown).await;
    // Stdio children get their shutdown sequence (stdin closed, then SIGTERM, then kill).
    upstreams_stop.cancel();
    Ok(())
}
