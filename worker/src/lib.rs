//! The taskgate worker: claims tasks through fenced leases, runs the tools, parks tasks for
//! input, writes outcomes. Tool code runs only here.
//!
//! It is also a library: a team that writes tools in Rust implements [`tool::Tool`] and builds
//! its own worker binary with [`Worker`], keeping every flag of this one (`--tools`,
//! `--upstreams`, leases, metrics). `examples/custom-worker` is such a binary, in a few lines.

pub mod config;
mod metrics;
pub mod packs;
mod probes;
pub mod provide;
mod runtime;
pub mod tool;
pub mod upstream;

use std::sync::Arc;

use taskgate_shared::store::{Store, StoreError};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use config::{Cli, Config, ConfigError};

/// A worker that cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Pack(#[from] packs::UnknownPack),
    #[error(transparent)]
    Override(#[from] config::BadOverride),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Upstreams(#[from] upstream::ConfigError),
    #[error(
        "tool names collide: {0:?}; give the upstream servers distinct prefixes, and your own tools names of their own"
    )]
    Collision(Vec<String>),
    #[error("cannot start the lanes' runtimes: {0}")]
    Runtime(std::io::Error),
    #[error("cannot listen for metrics on {addr}: {source}")]
    MetricsListen { addr: std::net::SocketAddr, source: std::io::Error },
}

/// Runs the worker until `shutdown` resolves, then drains (docs/configuration.md, "Operations").
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), StartError> {
    Worker::new(config).run(shutdown).await
}

/// A worker with tools of its own beside the packs and upstream servers its configuration names.
pub struct Worker {
    config: Config,
    tools: Vec<Arc<dyn tool::Tool>>,
}

impl Worker {
    pub fn new(config: Config) -> Self {
        Self { config, tools: Vec::new() }
    }

    /// Serves `tool` too. A name that a pack, an upstream or another tool also has refuses the
    /// start.
    pub fn tool(mut self, tool: impl tool::Tool) -> Self {
        self.tools.push(Arc::new(tool));
        self
    }

    /// Runs until `shutdown` resolves, then drains. Runs on the caller's runtime, which is the
    /// first lane's under `--runtime per-core` (the others get threads of their own): build it
    /// with `config.runtime.main_runtime()`, as `taskgate-worker` does, for the runtime the
    /// flags ask for.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), StartError> {
        start(self.config, self.tools, shutdown).await
    }
}

/// Ctrl-C or SIGTERM: the usual `shutdown` of a worker binary.
pub use taskgate_shared::shutdown::signal as shutdown_signal;

async fn start(
    config: Config,
    own_tools: Vec<Arc<dyn tool::Tool>>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StartError> {
    let mut tools = packs::registry(&config.tools, &config.pack_options())?;
    let mut collisions = Vec::new();
    for tool in own_tools {
        let name = tool.spec().descriptor.name.clone();
        if tools.insert(name.clone(), tool).is_some() {
            collisions.push(name);
        }
    }
    if !collisions.is_empty() {
        return Err(StartError::Collision(collisions));
    }
    let specs = config.specs(&tools)?;
    let upstreams_stop = CancellationToken::new();
    let store = Store::connect_lazy(&config.redis.endpoint, &config.redis.namespace, config.redis.timeout)?;
    let upstreams = match &config.upstreams {
        Some(path) => {
            let configs = upstream::config::load(path)?;
            tracing::info!(file = %path.display(), servers = configs.len(), "starting upstream servers");
            let identity = upstream::IdentitySettings {
                store: store.clone(),
                keys: config.credentials_keys.clone(),
                max_instances: config.max_instances as usize,
                instance_idle: config.instance_idle,
            };
            let upstreams = upstream::Upstreams::start(configs, config.cancel_grace, identity, upstreams_stop.clone());
            upstreams.first_listings().await;
            Some(upstreams)
        }
        None => None,
    };
    // Built-in providers first, then each server's, in file order: the first to publish a
    // prompt name or resource URI keeps it.
    let mut providers = packs::providers(&config.tools);
    providers.extend(upstreams.iter().flat_map(upstream::Upstreams::providers));
    // Added after the specs: the providers' hidden tools are served, never listed.
    for tool in provide::hidden_tools(&providers) {
        tools.insert(tool.spec().descriptor.name.clone(), tool);
    }
    let served = Arc::new(runtime::Served::new(tools, specs, providers, upstreams));
    let collisions = served.rebuild();
    if !collisions.is_empty() {
        upstreams_stop.cancel();
        return Err(StartError::Collision(collisions));
    }
    let metrics_listener = match config.metrics_listen {
        Some(addr) => match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => Some(listener),
            Err(source) => {
                upstreams_stop.cancel();
                return Err(StartError::MetricsListen { addr, source });
            }
        },
        None => None,
    };
    let mut shares = runtime::shares(&config).into_iter();
    let first = shares.next().expect("a worker has at least one lane");
    let shared = Arc::new(runtime::Shared {
        worker_id: config.worker_id.clone(),
        finisher: runtime::Finisher::start(store.clone(), config.worker_id.clone()),
        slots: Arc::new(Semaphore::new(first.slots)),
        shards: first.shards,
        config,
        store,
        served,
        held: Arc::default(),
        stop_claiming: CancellationToken::new(),
        drain_over: CancellationToken::new(),
        executions: TaskTracker::new(),
        redis_usable: Arc::default(),
    });
    let lanes = match runtime::Lanes::start(&shared, shares.collect()) {
        Ok(lanes) => lanes,
        Err(err) => {
            upstreams_stop.cancel();
            return Err(StartError::Runtime(err));
        }
    };
    if let Some(listener) = metrics_listener {
        tracing::info!(listen = ?listener.local_addr().ok(), "serving /metrics, /healthz and /readyz");
        tokio::spawn(probes::serve(shared.clone(), listener));
    }
    runtime::run(shared, lanes, shutdown).await;
    // Stdio children get their shutdown sequence (stdin closed, then SIGTERM, then kill).
    upstreams_stop.cancel();
    Ok(())
}
