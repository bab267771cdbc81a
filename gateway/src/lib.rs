//! The taskgate gateway: a stateless MCP 2026-07-28 + Tasks front end. It validates the wire,
//! writes and reads task records in Redis, and never runs tool code.

pub mod auth;
mod catalogue;
pub mod config;
mod events;
#[doc(hidden)]
pub mod fuzzing;
mod http;
mod limits;
mod mcp;
mod metrics;
mod mrtr;
mod polls;

use std::sync::Arc;

use axum::serve::ListenerExt as _;
use taskgate_shared::store::{Store, StoreError};
use tokio::net::TcpListener;

pub use config::Config;
pub use http::router;

/// A gateway that cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    StateKey(#[from] mrtr::BadStateKey),
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    Jwt(#[from] auth::JwtSetupError),
    #[error(transparent)]
    ApiKeys(#[from] auth::ApiKeysError),
}

/// Shared by every request. Holds no task state: that lives in Redis.
#[derive(Clone)]
pub struct AppState {
    config: Arc<Config>,
    store: Store,
    catalogue: Arc<catalogue::CatalogueCache>,
    auth: Arc<auth::Authenticator>,
    /// What 401/403 answers and the protected-resource metadata say (authenticated modes).
    challenge: Option<Arc<auth::Challenge>>,
    events: Arc<events::EventHub>,
    request_state_keys: mrtr::StateKeys,
    origin_policy: Arc<http::OriginPolicy>,
    /// Fired on SIGTERM: readiness turns off while requests are still served.
    draining: tokio_util::sync::CancellationToken,
    /// Fired after `--shutdown-delay-ms`: ends every listen stream with its graceful result, so
    /// the server can drain (axum's graceful shutdown waits for open SSE bodies).
    shutdown: tokio_util::sync::CancellationToken,
    listen_streams: Arc<mcp::listen::StreamCounts>,
    /// Pacing of early `tasks/get` polls (`--poll-limit hold`).
    polls: Arc<polls::PollPacer>,
}

impl AppState {
    pub async fn new(config: Config) -> Result<Self, StartError> {
        let request_state_keys = mrtr::StateKeys::parse(&config.request_state_keys()?)?;
        let (authenticator, challenge) = auth::build(&config).await?;
        if request_state_keys.is_ephemeral() {
            tracing::warn!("no --request-state-keys: MRTR retries must reach this replica");
        }
        let store = Store::connect_lazy(&config.redis_url, &config.namespace, config.redis_timeout())?;
        metrics::init();
        let catalogue = Arc::new(catalogue::CatalogueCache::new(store.clone()));
        let origin_policy = http::OriginPolicy::new(
            config.allowed_origins.clone(),
            config.allowed_hosts.clone(),
            config.listen.ip().is_loopback(),
        );
        let polls = Arc::new(polls::PollPacer::new(config.max_held_polls, config.max_held_polls_per_principal));
        Ok(Self {
            config: Arc::new(config),
            store,
            catalogue,
            auth: Arc::new(authenticator),
            challenge: challenge.map(Arc::new),
            events: Arc::new(events::EventHub::new(polls.clone())),
            request_state_keys,
            origin_policy: Arc::new(origin_policy),
            draining: tokio_util::sync::CancellationToken::new(),
            shutdown: tokio_util::sync::CancellationToken::new(),
            listen_streams: Arc::default(),
            polls,
        })
    }

    fn shutting_down(&self) -> bool {
        self.draining.is_cancelled()
    }
}

/// Serves until `shutdown` resolves, then drains: readiness turns off at once, new requests are
/// still served for `--shutdown-delay-ms` (while load balancers notice), then listen streams end
/// with their graceful result, the listener closes, and in-flight requests finish.
pub async fn run(
    state: AppState,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if let Err(err) = state.store.load_scripts().await {
        // Not fatal: Redis may come up later, and EVALSHA falls back to EVAL.
        tracing::warn!(error = %err, "could not load scripts at start-up");
    }
    let hub = tokio::spawn(state.events.clone().run(state.store.clone()));
    let refresher = tokio::spawn(state.catalogue.clone().refresh_forever(state.config.catalogue_refresh()));
    let streams = state.shutdown.clone();
    let draining = state.draining.clone();
    let delay = state.config.shutdown_delay();
    let app = router(state);
    // Small SSE writes must not wait on Nagle's algorithm and the peer's delayed ACK (~40 ms).
    let listener = listener.tap_io(|stream| {
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(error = %err, "could not set TCP_NODELAY");
        }
    });
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            draining.cancel();
            tracing::info!(delay = ?delay, "shutting down: readiness off");
            tokio::time::sleep(delay).await;
            streams.cancel();
            tracing::info!("shutting down: listen streams ended, no new connections");
        })
        .await;
    refresher.abort();
    hub.abort();
    served
}
