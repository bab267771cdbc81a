//! The taskgate gateway: a stateless MCP 2026-07-28 + Tasks front end. It validates the wire,
//! writes and reads task records in Redis, and never runs tool code.

pub mod auth;
mod catalogue;
pub mod config;
pub(crate) mod console;
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
mod state;
mod stream_slots;

use tokio::net::TcpListener;

pub use config::Config;
pub use http::router;
pub use state::{AppState, StartError};

/// Serves until `shutdown` resolves, then drains: readiness turns off at once, new requests are
/// still served for `--shutdown-delay-ms` (while load balancers notice), then listen streams end
/// with their graceful result, the listener closes, and in-flight requests finish.
pub async fn run(
    state: AppState,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // Readiness stays off until Redis is usable; meanwhile each failed attempt says why.
    let usable = state.redis_usable.clone();
    let store = state.store.clone();
    let checker = tokio::spawn(async move {
        store.wait_until_usable(async || Ok(())).await;
        usable.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let hub = tokio::spawn(state.events.clone().run(state.store.clone(), state.config.redis.queue_shards));
    let refresher = tokio::spawn(state.catalogue.clone().refresh_forever(state.config.catalogue_refresh));
    let streams = state.shutdown.clone();
    let draining = state.draining.clone();
    let delay = state.config.shutdown_delay;
    let limits = state.config.connections;
    // In-flight requests may take their own time to finish, the same bound as any request.
    let drain = state.config.request_timeout;
    let app = router(state);
    let served = http::serve(listener, app, limits, drain, async move {
        shutdown.await;
        draining.cancel();
        tracing::info!(delay = ?delay, "shutting down: readiness off");
        tokio::time::sleep(delay).await;
        streams.cancel();
        tracing::info!("shutting down: listen streams ended, no new connections");
    })
    .await;
    checker.abort();
    refresher.abort();
    hub.abort();
    served
}
