//! What every request shares. No task state lives here: that is in Redis.

use std::sync::Arc;

use taskgate_shared::store::{Store, StoreError};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::origin::OriginPolicy;
use crate::{auth, catalogue, egress, events, metrics, mrtr, polls, request_slices, secrets, snapshots, stream_slots};

/// A gateway that cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Auth(#[from] auth::AuthSetupError),
    /// The webhook egress client (its CA file) cannot be built.
    #[error("{0}")]
    Egress(String),
}

/// Shared by every request. One `Arc`: the router hands each request a clone, which is then a
/// single reference count rather than one per part (and a cancellation token's clone takes a
/// lock).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What [`AppState`] holds.
#[derive(Clone)]
pub struct Shared {
    pub(crate) config: Arc<Config>,
    pub(crate) store: Store,
    pub(crate) catalogue: Arc<catalogue::CatalogueCache>,
    pub(crate) auth: Arc<auth::Authenticator>,
    /// What 401/403 answers and the protected-resource metadata say (authenticated modes).
    pub(crate) challenge: Option<Arc<auth::Challenge>>,
    pub(crate) events: Arc<events::EventHub>,
    pub(crate) request_state_keys: mrtr::StateKeys,
    pub(crate) origin_policy: Arc<OriginPolicy>,
    /// Fired on SIGTERM: readiness turns off while requests are still served.
    pub(crate) draining: CancellationToken,
    /// Fired after `--shutdown-delay-ms`: ends every listen stream with its graceful result, so
    /// the server can drain (graceful shutdown waits for open SSE bodies).
    pub(crate) shutdown: CancellationToken,
    pub(crate) listen_streams: Arc<stream_slots::StreamCounts>,
    /// Pacing of early `tasks/get` polls (`--poll-limit hold`).
    pub(crate) polls: Arc<polls::PollPacer>,
    /// `tasks/get` answers kept for their owners (`--snapshot-cache-bytes`).
    pub(crate) snapshots: Arc<snapshots::SnapshotCache>,
    /// This replica's leased slices of its tenants' request rates.
    pub(crate) request_slices: Arc<request_slices::Slices>,
    /// Set once Redis has proved usable (login, scripts, a read in the namespace): readiness
    /// waits for it, so a replica with a wrong password or ACL never takes traffic.
    pub(crate) redis_usable: Arc<std::sync::atomic::AtomicBool>,
    /// The keys every replica shares (idempotency, console CSRF), one set for every runtime.
    pub(crate) secrets: Arc<secrets::Secrets>,
    /// `--credentials-key`: what seals and opens upstream credentials (`None`: they cannot be
    /// set here).
    pub(crate) credential_keys: Option<Arc<taskgate_shared::credentials::KeyRing>>,
    /// `--events-webhooks`: the hardened client that reaches callback URLs.
    pub(crate) egress: Option<Arc<egress::Egress>>,
}

impl AppState {
    pub async fn new(config: Config) -> Result<Self, StartError> {
        let request_state_keys = mrtr::StateKeys::new(&config.request_state.keys);
        let (authenticator, challenge) = auth::build(&config).await?;
        if request_state_keys.is_ephemeral() {
            tracing::warn!(
                "no TASKGATE_REQUEST_STATE_KEYS (or --request-state-keys-file): MRTR retries must reach this replica"
            );
        }
        let store = Store::connect_lazy(&config.redis.endpoint, &config.redis.namespace, config.redis.timeout)?;
        metrics::init();
        let catalogue = Arc::new(catalogue::CatalogueCache::new(store.clone()));
        let origin_policy = OriginPolicy::new(
            config.headers.allowed_origins.clone(),
            config.headers.allowed_hosts.clone(),
            config.listen.ip().is_loopback(),
        );
        let secrets = secrets::Secrets::new(&config);
        let polls = Arc::new(polls::PollPacer::new(config.polls.max_held, config.polls.max_held_per_principal));
        let snapshots = Arc::new(snapshots::SnapshotCache::new(
            config.polls.snapshot_cache_bytes,
            config.polls.snapshot_cache_beacon_gap,
        ));
        let config_slice = config.tenants.admission_slice;
        let credential_keys = config.credentials.clone();
        let egress = config
            .webhooks
            .as_ref()
            .map(egress::Egress::new)
            .transpose()
            .map_err(|err| StartError::Egress(err.to_string()))?
            .map(Arc::new);
        if let Some(keys) = &credential_keys {
            tracing::info!(keys = ?keys.ids(), sealing = keys.current(), "credentials keys loaded");
        }
        Ok(Self(Arc::new(Shared {
            credential_keys,
            config: Arc::new(config),
            store,
            catalogue,
            auth: Arc::new(authenticator),
            challenge: challenge.map(Arc::new),
            events: Arc::new(events::EventHub::new(polls.clone(), snapshots.clone())),
            request_state_keys,
            origin_policy: Arc::new(origin_policy),
            draining: CancellationToken::new(),
            shutdown: CancellationToken::new(),
            listen_streams: Arc::default(),
            polls,
            snapshots,
            request_slices: Arc::new(request_slices::Slices::new(config_slice)),
            redis_usable: Arc::default(),
            secrets,
            egress,
        })))
    }

    /// The same state with a Redis connection of its own, for another runtime (`--runtime
    /// per-core`): a connection's reader runs on the runtime that opened it.
    pub(crate) fn on_own_redis(&self) -> std::io::Result<Self> {
        let redis = &self.config.redis;
        let store =
            Store::connect_lazy(&redis.endpoint, &redis.namespace, redis.timeout).map_err(std::io::Error::other)?;
        Ok(Self(Arc::new(Shared { store, ..Shared::clone(&self.0) })))
    }

    pub(crate) fn shutting_down(&self) -> bool {
        self.draining.is_cancelled()
    }

    /// Ready for traffic: not stopping, Redis proved usable once and answering now.
    pub(crate) async fn ready(&self) -> Result<(), &'static str> {
        if self.shutting_down() {
            return Err("shutting down");
        }
        if !self.redis_usable.load(std::sync::atomic::Ordering::Relaxed) {
            return Err("redis not usable yet");
        }
        self.store.ping().await.map_err(|_| "redis unavailable")
    }
}
