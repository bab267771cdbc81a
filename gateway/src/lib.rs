//! The taskgate gateway: a stateless MCP 2026-07-28 + Tasks front end. It validates the wire,
//! writes and reads task records in Redis, and never runs tool code.

mod admin;
pub mod auth;
mod catalogue;
pub mod config;
pub(crate) mod console;
mod delivery;
mod egress;
mod error;
mod events;
#[doc(hidden)]
pub mod fuzzing;
mod http;
mod limits;
mod mcp;
mod metrics;
mod mrtr;
mod origin;
mod polls;
mod request_slices;
pub mod runtime;
mod secrets;
mod snapshots;
mod state;
mod stream_slots;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use config::Config;
pub use http::router;
pub use state::{AppState, StartError};

/// Serves until `shutdown` resolves, then drains: readiness turns off at once, new requests are
/// still served for `--shutdown-delay-ms` (while load balancers notice), then listen streams end
/// with their graceful result, the listeners close, and in-flight requests finish.
///
/// The first listener is served on the calling runtime; each further one (`--runtime
/// per-core`, see [`runtime::bind`]) on a single-threaded runtime of its own thread, with its
/// own Redis connection.
pub async fn run(
    state: AppState,
    listeners: Vec<std::net::TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut listeners = listeners.into_iter();
    let first = listeners.next().ok_or_else(|| std::io::Error::other("no listener to serve"))?;
    let mut limits = state.config.connections;
    // Each runtime counts its own connections; together they keep the replica's limit.
    limits.max_connections = limits.max_connections.div_ceil(listeners.len() + 1);
    let cores = listeners
        .enumerate()
        .map(|(index, listener)| spawn_core(index + 1, &state, listener, limits))
        .collect::<std::io::Result<Vec<_>>>()?;
    // Readiness stays off until Redis is usable; meanwhile each failed attempt says why.
    let usable = state.redis_usable.clone();
    let store = state.store.clone();
    let checker = tokio::spawn(async move {
        store.wait_until_usable(async || Ok(())).await;
        usable.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let hub = tokio::spawn(state.events.clone().run(state.store.clone(), state.config.redis.queue_shards));
    let refresher = tokio::spawn(state.catalogue.clone().refresh_forever(state.config.catalogue_refresh));
    // Keys kept in Redis are repaired if Redis loses them (derived ones need nothing).
    let secrets = state.secrets.in_redis().then(|| {
        tokio::spawn(state.secrets.clone().refresh_forever(state.store.clone(), state.config.shared_secrets.refresh))
    });
    // Webhook delivery (`--events-delivery on|only`): stopped after the listeners, so its
    // positions are written and its leases released before the process ends.
    let delivering = CancellationToken::new();
    let deliverer = state
        .config
        .webhooks
        .as_ref()
        .is_some_and(|w| w.delivery != config::DeliveryMode::Off)
        .then(|| tokio::spawn(delivery::run(state.clone(), delivering.clone())));
    let streams = state.shutdown.clone();
    let draining = state.draining.clone();
    let delay = state.config.shutdown_delay;
    // In-flight requests may take their own time to finish, the same bound as any request.
    let drain = state.config.requests.timeout;
    let app = router(state);
    let served = http::serve(TcpListener::from_std(first)?, app, limits, drain, async move {
        shutdown.await;
        draining.cancel();
        tracing::info!(delay = ?delay, "shutting down: readiness off");
        tokio::time::sleep(delay).await;
        streams.cancel();
        tracing::info!("shutting down: listen streams ended, no new connections");
    })
    .await;
    for core in cores {
        let joined = tokio::task::spawn_blocking(move || core.join()).await.map_err(std::io::Error::other)?;
        joined.map_err(|_| std::io::Error::other("a core's runtime panicked"))??;
    }
    delivering.cancel();
    if let Some(deliverer) = deliverer {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), deliverer).await;
    }
    checker.abort();
    refresher.abort();
    if let Some(secrets) = secrets {
        secrets.abort();
    }
    hub.abort();
    served
}

/// Serves `listener` on a new thread with its own single-threaded runtime, until the shared
/// shutdown ends the listen streams (the moment the first runtime stops accepting too).
fn spawn_core(
    index: usize,
    state: &AppState,
    listener: std::net::TcpListener,
    limits: config::ConnectionLimits,
) -> std::io::Result<std::thread::JoinHandle<std::io::Result<()>>> {
    let runtime = state.config.runtime.core_runtime()?;
    // The core's Redis connection is opened in its runtime: a connection's tasks (a Cluster
    // client's driver) run on the runtime that opened it.
    let state = {
        let _core = runtime.enter();
        state.on_own_redis()?
    };
    std::thread::Builder::new().name(format!("taskgate-core-{index}")).spawn(move || {
        runtime.block_on(async move {
            let stopped = state.shutdown.clone();
            let drain = state.config.requests.timeout;
            let listener = TcpListener::from_std(listener)?;
            http::serve(listener, router(state), limits, drain, async move { stopped.cancelled().await }).await
        })
    })
}
