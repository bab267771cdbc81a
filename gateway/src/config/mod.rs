//! The gateway's configuration. Every flag has a `TASKGATE_*` environment fallback, and every
//! default is safe: loopback only, no authentication unless asked for, bounded bodies.
//!
//! `cli.rs` is the command line as clap reads it; this module turns it into the typed [`Config`]
//! the gateway runs with, reading the secrets it names and reporting every problem at once.

mod cli;
mod webhooks;

use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use taskgate_shared::config::{RedisConfigError, RedisSettings};
use taskgate_shared::credentials::KeyRing;
use taskgate_shared::store::Rate;
use taskgate_shared::telemetry::LogFormat;

use taskgate_shared::runtime::RuntimeSettings;

pub use cli::{AuthMode, Cli};
pub use webhooks::{DeliveryMode, Ports, WebhookConfigError, WebhookSettings};

/// A configuration that cannot run. [`Config::from_cli`] reports every one it finds.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--auth none is refused on the non-loopback address {0}; bind 127.0.0.1 or configure authentication")]
    AnonymousOnPublicAddress(SocketAddr),
    #[error(transparent)]
    Redis(#[from] RedisConfigError),
    #[error("--auth api-keys needs --api-keys-file")]
    NoApiKeys,
    #[error("--console-trace-url must contain {{trace_id}}")]
    TraceUrl,
    #[error("--console-scope and --console-tenant-scope must be two different, non-empty scopes")]
    ConsoleScopes,
    #[error("--auth jwt needs exactly one key source: an HS256 secret or a JWKS (file or URL)")]
    JwtKeySource,
    #[error("the HS256 secret must be at least 32 bytes")]
    ShortSecret,
    #[error("the shared secret (--shared-secret-file or TASKGATE_SHARED_SECRET) must be at least 32 bytes")]
    ShortSharedSecret,
    #[error("cannot read {path}: {source}")]
    Secret { path: String, source: std::io::Error },
    #[error(
        "--durability-timeout-ms {durability_ms} must be below --redis-timeout-ms {redis_ms}: a create's WAIT \
         would otherwise time out as a command before it can report how many replicas acknowledged"
    )]
    DurabilityTimeout { durability_ms: u128, redis_ms: u128 },
    #[error(
        "--complete-within-ms {budget_ms} must be below half of --request-timeout-ms {request_ms}: the wait must end \
         well before the request is cut"
    )]
    CompleteWithin { budget_ms: u64, request_ms: u64 },
    #[error("--poll-tolerance must be a number from 0 to 1")]
    PollTolerance,
    #[error(transparent)]
    CredentialsKey(#[from] taskgate_shared::credentials::CredentialError),
    #[error(
        "invalid request-state key {0:?}: expected ID:BASE64 with an id of [A-Za-z0-9_-] and at least 32 secret bytes"
    )]
    StateKey(String),
    #[error(transparent)]
    Webhooks(#[from] WebhookConfigError),
}

/// What an early `tasks/get` gets (`--poll-limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PollLimit {
    Hold,
    Refuse,
    Off,
}

/// The limits on connections (`http::serve`).
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    pub http2_max_streams: u32,
    /// The cap on an HTTP/1.1 connection's read buffer (and so on a request head); `None`:
    /// hyper's own.
    pub http1_max_buffer: Option<usize>,
    /// A request whose response has not begun by then is cut, whatever its route: the
    /// watchdog's backstop under every route's own deadline, so no request is busy for ever.
    pub response_deadline: Duration,
}

/// How requests are authenticated, with what the mode needs.
#[derive(Debug, Clone)]
pub enum Auth {
    /// Every caller is principal `anonymous` of tenant `default`.
    None,
    Jwt(JwtSettings),
    /// API keys listed by hash in this file.
    ApiKeys(PathBuf),
}

/// Where JWT verification keys come from. `Debug` never shows the secret.
#[derive(Clone)]
pub enum JwtKeys {
    /// A shared secret, read from its file or the environment.
    Hs256(Vec<u8>),
    JwksFile(PathBuf),
    JwksUrl(String),
}

impl std::fmt::Debug for JwtKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Hs256(_) => f.write_str("Hs256(<redacted>)"),
            Self::JwksFile(path) => f.debug_tuple("JwksFile").field(path).finish(),
            Self::JwksUrl(url) => f.debug_tuple("JwksUrl").field(url).finish(),
        }
    }
}

/// A `requestState` signing key, parsed from `ID:BASE64`. `Debug` shows the id, never the
/// secret.
#[derive(Clone)]
pub struct SigningKey {
    pub id: String,
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey({}, <redacted>)", self.id)
    }
}

impl std::str::FromStr for SigningKey {
    type Err = ConfigError;

    /// An id of `[A-Za-z0-9_-]`, a colon, and at least 32 bytes of standard base64. The error
    /// names the id only.
    fn from_str(entry: &str) -> Result<Self, ConfigError> {
        use base64::Engine as _;
        let refused = || ConfigError::StateKey(entry.split(':').next().unwrap_or_default().to_owned() + ":…");
        let (id, secret) = entry.split_once(':').ok_or_else(refused)?;
        let secret = base64::engine::general_purpose::STANDARD.decode(secret.trim()).map_err(|_| refused())?;
        let id_ok = !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !id_ok || secret.len() < 32 {
            return Err(refused());
        }
        Ok(Self { id: id.to_owned(), secret })
    }
}

/// Where the keys every replica must share come from (`--shared-secret-file`).
#[derive(Debug, Clone)]
pub struct SharedSecrets {
    /// The configured master secret they are derived from; `None`: kept in Redis.
    pub master: Option<MasterSecret>,
    /// Without a master secret, how often those kept in Redis are read again.
    pub refresh: Duration,
}

/// A configured master secret. `Debug` never shows it.
#[derive(Clone)]
pub struct MasterSecret(pub Vec<u8>);

impl std::fmt::Debug for MasterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterSecret(<redacted>)")
    }
}

/// `--auth jwt`.
#[derive(Debug, Clone)]
pub struct JwtSettings {
    pub keys: JwtKeys,
    pub jwks_refresh: Duration,
    pub issuer: Option<String>,
    pub audience: String,
    pub tenant_claim: String,
    pub leeway_s: u64,
}

/// The operator console's settings.
#[derive(Debug, Clone)]
pub struct ConsoleSettings {
    pub scope: String,
    pub tenant_scope: String,
    pub trace_url: Option<String>,
    pub max_in_flight: NonZeroUsize,
}

/// Who may manage upstream credentials through the admin API (`/admin/`), always served: the
/// same scopes as the console's, whether or not the console is on.
#[derive(Debug, Clone)]
pub struct AdminSettings {
    /// Every tenant.
    pub operator_scope: String,
    /// The token's own tenant.
    pub tenant_scope: String,
}

/// The gateway's configuration: checked, with its secrets read, once at start-up. Settings
/// that go together are grouped; a setting that can be off is an `Option`.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub redis: RedisSettings,
    pub auth: Auth,
    pub resource: Resource,
    pub requests: RequestLimits,
    pub connections: ConnectionLimits,
    pub headers: HeaderChecks,
    pub runtime: RuntimeSettings,
    pub test_routes: bool,
    /// `--console`: `None` when off.
    pub console: Option<ConsoleSettings>,
    pub admin: AdminSettings,
    /// `--credentials-key`, read: `None` when none is given (credentials cannot be sealed).
    pub credentials: Option<std::sync::Arc<KeyRing>>,
    /// `--durability-replicas`: `None` when 0 (a create is acknowledged by the primary alone).
    pub durability: Option<DurabilitySettings>,
    pub catalogue_refresh: Duration,
    pub shutdown_delay: Duration,
    pub inline_timeout: Duration,
    /// `--complete-within-ms`: how long a call made as a task waits for the task to end (zero:
    /// never), unless its tool says otherwise.
    pub complete_within: Duration,
    pub request_state: RequestState,
    pub shared_secrets: SharedSecrets,
    pub streams: StreamLimits,
    pub tenants: TenantLimits,
    pub polls: PollSettings,
    /// `--events`: `None` when off.
    pub events: Option<EventsSettings>,
    pub log_format: LogFormat,
    /// `--events-webhooks`: `None` when off.
    pub webhooks: Option<WebhookSettings>,
}

/// `--events` and its settings (docs/events.md).
#[derive(Debug, Clone)]
pub struct EventsSettings {
    /// `--events-tenants`: empty is every tenant.
    pub tenants: std::collections::HashSet<String>,
    pub outbox: taskgate_shared::store::OutboxLimits,
    pub poll_interval_ms: u64,
    pub max_poll_events: usize,
    /// `--events-heartbeat-ms`: how often an `events/stream` says where it has read up to.
    pub heartbeat: Duration,
}

impl EventsSettings {
    /// The outbox a new task of `tenant` gets, `None` when the tenant's tasks have no events.
    pub fn for_tenant(&self, tenant: &str) -> Option<taskgate_shared::store::OutboxLimits> {
        (self.tenants.is_empty() || self.tenants.contains(tenant)).then_some(self.outbox)
    }
}

/// What the gateway says of itself as an OAuth protected resource.
#[derive(Debug, Clone)]
pub struct Resource {
    /// The canonical resource URI (the expected `aud`, the subject of the metadata).
    pub url: String,
    pub authorization_servers: Vec<String>,
    /// Scopes every token must carry (also announced in challenges and the metadata).
    pub required_scopes: Vec<String>,
}

/// Bounds on one `/mcp` request.
#[derive(Debug, Clone, Copy)]
pub struct RequestLimits {
    pub max_body_bytes: usize,
    pub body_timeout: Duration,
    pub max_in_flight: NonZeroUsize,
    pub timeout: Duration,
    pub max_argument_bytes: usize,
    pub max_input_response_bytes: usize,
}

/// The transport's checks of `Origin`, `Host` and the mirrored headers.
#[derive(Debug, Clone)]
pub struct HeaderChecks {
    pub allowed_origins: Vec<String>,
    pub allowed_hosts: Vec<String>,
    /// `--strict-headers`.
    pub strict: bool,
}

/// `--durability-replicas`, when on.
#[derive(Debug, Clone, Copy)]
pub struct DurabilitySettings {
    pub replicas: NonZeroU32,
    pub timeout: Duration,
}

/// `requestState` for MRTR.
#[derive(Debug, Clone)]
pub struct RequestState {
    /// Signing key first (none: one random key for this process).
    pub keys: Vec<SigningKey>,
    pub ttl_ms: u64,
}

/// Bounds on streams: `subscriptions/listen` and the keep-alive of every SSE response.
#[derive(Debug, Clone, Copy)]
pub struct StreamLimits {
    pub max_task_ids: usize,
    pub max_streams: usize,
    /// Never zero.
    pub max_streams_per_principal: usize,
    pub keep_alive: Duration,
}

/// Fleet-wide limits per tenant, and their shares of a pool.
#[derive(Debug, Clone)]
pub struct TenantLimits {
    pub requests: Rate,
    /// `--admission-slice-ms`: how long a leased slice of `requests` is used.
    pub admission_slice: Duration,
    pub creations: Rate,
    /// Tasks not yet terminal (`None`: no cap, and tasks are not counted).
    pub max_active_tasks: Option<NonZeroU64>,
    /// `--tenant-weight`: tenant -> its weight in fair dispatch (absent: 1).
    pub weights: std::collections::HashMap<String, f64>,
}

impl TenantLimits {
    /// `tenant`'s weight in fair dispatch: what a created or an answered task is charged at.
    pub fn weight(&self, tenant: &str) -> f64 {
        self.weights.get(tenant).copied().unwrap_or(1.0)
    }
}

/// `tasks/get` pacing.
#[derive(Debug, Clone, Copy)]
pub struct PollSettings {
    /// Already `Off` when `--poll-tolerance` is 0.
    pub limit: PollLimit,
    pub tolerance: f64,
    pub max_held: usize,
    pub max_held_per_principal: usize,
    /// `--snapshot-cache-bytes` (0: off).
    pub snapshot_cache_bytes: usize,
    /// `--snapshot-cache-beacon-gap-ms`.
    pub snapshot_cache_beacon_gap: Duration,
}

/// The default per-principal listen-stream cap is this fraction (1/N) of the replica's.
const PRINCIPAL_SHARE_OF_STREAMS: usize = 4;

/// `--listen-max-streams-per-principal` when not given: a quarter of the replica's cap in
/// effect (`--listen-max-streams`, as given), at least 1.
fn default_streams_per_principal(max_streams: usize) -> usize {
    (max_streams / PRINCIPAL_SHARE_OF_STREAMS).max(1)
}

fn ms(value: u64) -> Duration {
    Duration::from_millis(value)
}

impl Config {
    /// Parses the process's command line and environment.
    pub fn from_env() -> Result<Self, Vec<ConfigError>> {
        Self::from_cli(Cli::parse())
    }

    /// Checks the command line and reads the secrets it names, reporting every problem at once.
    pub fn from_cli(cli: Cli) -> Result<Self, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let redis = cli.redis.settings(Duration::from_secs(2)).map_err(|err| errors.push(err.into())).ok();
        if cli.auth == AuthMode::None && !cli.listen.ip().is_loopback() {
            errors.push(ConfigError::AnonymousOnPublicAddress(cli.listen));
        }
        if cli.console_trace_url.as_ref().is_some_and(|url| !url.contains("{trace_id}")) {
            errors.push(ConfigError::TraceUrl);
        }
        if cli.console_scope.is_empty()
            || cli.console_tenant_scope.is_empty()
            || cli.console_scope == cli.console_tenant_scope
        {
            errors.push(ConfigError::ConsoleScopes);
        }
        let resource_url = cli.resource_url.clone().unwrap_or_else(|| format!("http://{}/mcp", cli.listen));
        let auth = match cli.auth {
            AuthMode::None => Some(Auth::None),
            AuthMode::ApiKeys => match &cli.api_keys_file {
                Some(path) => Some(Auth::ApiKeys(path.clone())),
                None => {
                    errors.push(ConfigError::NoApiKeys);
                    None
                }
            },
            AuthMode::Jwt => jwt_settings(&cli, &resource_url).map_err(|err| errors.push(err)).ok().map(Auth::Jwt),
        };
        let request_state_keys = request_state_keys(&cli).map_err(|err| errors.push(err)).ok();
        let master_secret = master_secret(&cli).map_err(|err| errors.push(err)).ok();
        let credentials = cli
            .credentials
            .load()
            .map(|ring| ring.map(std::sync::Arc::new))
            .map_err(|err| errors.push(err.into()))
            .ok();
        if cli.complete_within_ms >= cli.request_timeout_ms / 2 && cli.complete_within_ms > 0 {
            errors.push(ConfigError::CompleteWithin {
                budget_ms: cli.complete_within_ms,
                request_ms: cli.request_timeout_ms,
            });
        }
        if let Some(redis) = &redis
            && cli.durability_replicas > 0
            && ms(cli.durability_timeout_ms) >= redis.timeout
        {
            errors.push(ConfigError::DurabilityTimeout {
                durability_ms: u128::from(cli.durability_timeout_ms),
                redis_ms: redis.timeout.as_millis(),
            });
        }
        if !(0.0..=1.0).contains(&cli.poll_tolerance) {
            errors.push(ConfigError::PollTolerance);
        }
        let has_key = credentials.as_ref().is_some_and(Option::is_some);
        let webhooks = cli
            .webhooks
            .settings(has_key)
            .map_err(|errs| errors.extend(errs.into_iter().map(ConfigError::from)))
            .unwrap_or(None);
        let (Some(redis), Some(auth), Some(request_state_keys), Some(master_secret), Some(credentials), true) =
            (redis, auth, request_state_keys, master_secret, credentials, errors.is_empty())
        else {
            return Err(errors);
        };
        Ok(Self {
            listen: cli.listen,
            redis,
            auth,
            resource: Resource {
                url: resource_url,
                authorization_servers: cli.authorization_servers,
                required_scopes: cli.jwt_required_scopes,
            },
            requests: RequestLimits {
                max_body_bytes: cli.max_body_bytes.get(),
                body_timeout: ms(cli.body_timeout_ms),
                max_in_flight: cli.max_in_flight,
                timeout: ms(cli.request_timeout_ms.max(1)),
                max_argument_bytes: cli.max_argument_bytes,
                max_input_response_bytes: cli.max_input_response_bytes,
            },
            connections: ConnectionLimits {
                header_read_timeout: ms(cli.header_read_timeout_ms.max(1)),
                idle_timeout: ms(cli.idle_timeout_ms.max(1)),
                max_connections: cli.max_connections.get(),
                http2_max_streams: cli.http2_max_streams.get(),
                http1_max_buffer: cli.http1_max_buffer_bytes.map(|bytes| bytes as usize),
                // Above every route's deadline (each is at most --request-timeout-ms), so it
                // only ever cuts a request that escaped them.
                response_deadline: ms(cli.request_timeout_ms.max(1)).saturating_add(ms(cli.body_timeout_ms))
                    + Duration::from_secs(10),
            },
            headers: HeaderChecks {
                allowed_origins: cli.allowed_origins,
                allowed_hosts: cli.allowed_hosts,
                strict: cli.strict_headers,
            },
            runtime: cli.runtime.settings(),
            test_routes: cli.test_routes,
            admin: AdminSettings {
                operator_scope: cli.console_scope.clone(),
                tenant_scope: cli.console_tenant_scope.clone(),
            },
            credentials,
            console: cli.console.then_some(ConsoleSettings {
                scope: cli.console_scope,
                tenant_scope: cli.console_tenant_scope,
                trace_url: cli.console_trace_url,
                max_in_flight: cli.console_max_in_flight,
            }),
            durability: NonZeroU32::new(cli.durability_replicas)
                .map(|replicas| DurabilitySettings { replicas, timeout: ms(cli.durability_timeout_ms) }),
            catalogue_refresh: ms(cli.catalogue_refresh_ms.max(100)),
            shutdown_delay: ms(cli.shutdown_delay_ms),
            inline_timeout: ms(cli.inline_timeout_ms.max(1)),
            complete_within: ms(cli.complete_within_ms),
            request_state: RequestState { keys: request_state_keys, ttl_ms: cli.request_state_ttl_ms },
            shared_secrets: SharedSecrets { master: master_secret, refresh: ms(cli.shared_secret_refresh_ms.max(100)) },
            streams: StreamLimits {
                max_task_ids: cli.listen_max_task_ids,
                max_streams: cli.listen_max_streams,
                max_streams_per_principal: cli
                    .listen_max_streams_per_principal
                    .unwrap_or_else(|| default_streams_per_principal(cli.listen_max_streams))
                    .max(1),
                keep_alive: ms(cli.sse_keepalive_ms.max(100)),
            },
            tenants: TenantLimits {
                requests: Rate { per_second: cli.tenant_rps, burst: cli.tenant_burst },
                admission_slice: ms(cli.admission_slice_ms),
                creations: Rate { per_second: cli.tenant_create_rps, burst: cli.tenant_create_burst },
                max_active_tasks: NonZeroU64::new(cli.tenant_max_active_tasks),
                weights: cli.tenant_weights.iter().cloned().collect(),
            },
            polls: PollSettings {
                limit: if cli.poll_tolerance <= 0.0 { PollLimit::Off } else { cli.poll_limit },
                tolerance: cli.poll_tolerance,
                max_held: cli.max_held_polls,
                max_held_per_principal: cli.max_held_polls_per_principal,
                snapshot_cache_bytes: cli.snapshot_cache_bytes,
                snapshot_cache_beacon_gap: Duration::from_millis(cli.snapshot_cache_beacon_gap_ms),
            },
            events: cli.events.then(|| EventsSettings {
                tenants: cli.events_tenants.iter().filter(|t| !t.is_empty()).cloned().collect(),
                outbox: taskgate_shared::store::OutboxLimits {
                    retention_ms: cli.events_retention_ms.max(1_000),
                    cap: cli.events_max_per_stream.max(1),
                },
                poll_interval_ms: cli.events_poll_interval_ms,
                max_poll_events: cli.events_max_poll_events.max(1),
                // Bounded both ways: a heartbeat every few ms would be a busy loop, and the
                // extension asks for one at least every 30 s.
                heartbeat: ms(cli.events_heartbeat_ms.clamp(50, 30_000)),
            }),
            log_format: cli.log_format,
            webhooks,
        })
    }
}

/// `--auth jwt`: exactly one key source; a secret comes from its file or the environment
/// (never a flag, so it never shows in `ps`).
fn jwt_settings(cli: &Cli, resource_url: &str) -> Result<JwtSettings, ConfigError> {
    let secret = match &cli.jwt_hs256_secret_file {
        Some(path) => Some(read_secret(path)?.trim_end_matches(['\r', '\n']).as_bytes().to_vec()),
        None => std::env::var("TASKGATE_JWT_HS256_SECRET").ok().map(String::into_bytes),
    };
    let keys = match (secret, &cli.jwks_file, &cli.jwks_url) {
        (Some(secret), None, None) if secret.len() < 32 => return Err(ConfigError::ShortSecret),
        (Some(secret), None, None) => JwtKeys::Hs256(secret),
        (None, Some(path), None) => JwtKeys::JwksFile(path.clone()),
        (None, None, Some(url)) => JwtKeys::JwksUrl(url.clone()),
        _ => return Err(ConfigError::JwtKeySource),
    };
    Ok(JwtSettings {
        keys,
        jwks_refresh: ms(cli.jwks_refresh_ms.max(1_000)),
        issuer: cli.jwt_issuer.clone(),
        audience: cli.jwt_audience.clone().unwrap_or_else(|| resource_url.to_owned()),
        tenant_claim: cli.jwt_tenant_claim.clone(),
        leeway_s: cli.jwt_leeway_s,
    })
}

/// The `requestState` keys, from their file or the environment (never a flag), parsed.
fn request_state_keys(cli: &Cli) -> Result<Vec<SigningKey>, ConfigError> {
    let text = match &cli.request_state_keys_file {
        Some(path) => read_secret(path)?,
        None => std::env::var("TASKGATE_REQUEST_STATE_KEYS").unwrap_or_default(),
    };
    text.split([',', '\n']).map(str::trim).filter(|k| !k.is_empty()).map(str::parse).collect()
}

/// The shared master secret, from its file (any bytes) or the environment (never a flag), if
/// any; a trailing line break in the file is not part of it.
fn master_secret(cli: &Cli) -> Result<Option<MasterSecret>, ConfigError> {
    let secret = match &cli.shared_secret_file {
        Some(path) => {
            let mut bytes = std::fs::read(path)
                .map_err(|source| ConfigError::Secret { path: path.display().to_string(), source })?;
            while bytes.last().is_some_and(|b| matches!(b, b'\r' | b'\n')) {
                bytes.pop();
            }
            Some(bytes)
        }
        None => std::env::var("TASKGATE_SHARED_SECRET").ok().map(String::into_bytes),
    };
    match secret {
        Some(secret) if secret.len() < 32 => Err(ConfigError::ShortSharedSecret),
        secret => Ok(secret.map(MasterSecret)),
    }
}

fn read_secret(path: &std::path::Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Secret { path: path.display().to_string(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config, Vec<ConfigError>> {
        let mut argv = vec!["taskgate-gateway"];
        argv.extend_from_slice(args);
        Config::from_cli(Cli::try_parse_from(argv).expect("clap accepts the flags"))
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        // A request-state key too short to sign with, among the other mistakes.
        let keys = std::env::temp_dir().join(format!("taskgate-config-test-{}", std::process::id()));
        std::fs::write(&keys, "k1:c2hvcnQ=\n").unwrap();
        let errors = parse(&[
            "--request-state-keys-file",
            keys.to_str().unwrap(),
            "--auth",
            "api-keys",
            "--namespace",
            "a b",
            "--durability-replicas",
            "1",
            "--durability-timeout-ms",
            "5000",
            "--poll-tolerance",
            "2",
        ])
        .unwrap_err();
        std::fs::remove_file(&keys).unwrap();
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 4, "{text:?}");
        assert!(errors.iter().any(|e| matches!(e, ConfigError::StateKey(id) if id == "k1:…")), "{text:?}");
        assert!(text.iter().any(|t| t.contains("--namespace")));
        assert!(text.iter().any(|t| t.contains("--api-keys-file")));
        assert!(text.iter().any(|t| t.contains("--poll-tolerance")));
    }

    #[test]
    fn durations_and_defaults_are_typed() {
        let config = parse(&["--auth", "none", "--inline-timeout-ms", "1500"]).unwrap();
        assert_eq!(config.inline_timeout, Duration::from_millis(1500));
        assert_eq!(config.complete_within, Duration::from_millis(250));
        assert_eq!(parse(&["--auth", "none", "--complete-within-ms", "0"]).unwrap().complete_within, Duration::ZERO);
        let long = parse(&["--auth", "none", "--complete-within-ms", "5000", "--request-timeout-ms", "9000"]);
        assert!(matches!(long.unwrap_err()[..], [ConfigError::CompleteWithin { .. }]));
        assert_eq!(config.redis.timeout, Duration::from_secs(2));
        assert_eq!(config.resource.url, "http://127.0.0.1:8080/mcp");
        assert!(config.durability.is_none() && config.tenants.max_active_tasks.is_some(), "{config:?}");
        assert!(matches!(config.auth, Auth::None));
        let off = parse(&["--auth", "none", "--poll-tolerance", "0"]).unwrap();
        assert_eq!(off.polls.limit, PollLimit::Off);
        let durable =
            parse(&["--auth", "none", "--durability-replicas", "2", "--tenant-max-active-tasks", "0"]).unwrap();
        assert_eq!(durable.durability.map(|d| d.replicas.get()), Some(2));
        assert_eq!(durable.tenants.max_active_tasks, None, "0 is no cap");
    }

    #[test]
    fn one_principal_gets_a_quarter_of_the_listen_streams_unless_told() {
        let config = parse(&["--auth", "none"]).unwrap();
        assert_eq!((config.streams.max_streams, config.streams.max_streams_per_principal), (10_000, 2_500));
        let small = parse(&["--auth", "none", "--listen-max-streams", "2"]).unwrap();
        assert_eq!(small.streams.max_streams_per_principal, 1, "never zero");
        // What the black-box test of the default runs with (tests/it/listen.rs).
        let forty = parse(&["--auth", "none", "--listen-max-streams", "40"]).unwrap();
        assert_eq!((forty.streams.max_streams, forty.streams.max_streams_per_principal), (40, 10));
        let set = parse(&["--auth", "none", "--listen-max-streams-per-principal", "9000"]).unwrap();
        assert_eq!(set.streams.max_streams_per_principal, 9_000);
        let zero = parse(&["--auth", "none", "--listen-max-streams-per-principal", "0"]).unwrap();
        assert_eq!(zero.streams.max_streams_per_principal, 1, "never zero, even when told");
    }

    #[test]
    fn the_default_share_is_a_quarter_rounded_down_and_never_zero() {
        let cases = [(0, 1), (1, 1), (3, 1), (4, 1), (7, 1), (8, 2), (40, 10), (41, 10), (10_000, 2_500)];
        for (max_streams, share) in cases {
            assert_eq!(default_streams_per_principal(max_streams), share, "of {max_streams}");
        }
    }

    #[test]
    fn secrets_never_show_in_debug_output() {
        let key: SigningKey = "k1:c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA==".parse().unwrap();
        let hs = JwtKeys::Hs256(b"0123456789abcdef0123456789abcdef-secret".to_vec());
        let shown = format!("{key:?} {hs:?}");
        assert!(!shown.contains("c2Vj") && !shown.contains("secret"), "{shown}");
        assert_eq!(shown, "SigningKey(k1, <redacted>) Hs256(<redacted>)");
    }

    #[test]
    fn a_shared_secret_file_is_read_whole_and_must_be_long_enough() {
        let file = std::env::temp_dir().join(format!("taskgate-shared-secret-test-{}", std::process::id()));
        std::fs::write(&file, b"\xff0123456789abcdef0123456789abcdef\n").unwrap();
        let path = file.to_str().unwrap();
        let config = parse(&["--auth", "none", "--shared-secret-file", path]).unwrap();
        let master = config.shared_secrets.master.expect("configured");
        assert_eq!(master.0, b"\xff0123456789abcdef0123456789abcdef", "any bytes; the line break is not part of it");
        assert_eq!(format!("{master:?}"), "MasterSecret(<redacted>)");
        std::fs::write(&file, "too short\n").unwrap();
        let short = parse(&["--auth", "none", "--shared-secret-file", path]).unwrap_err();
        std::fs::remove_file(&file).unwrap();
        assert!(matches!(short[..], [ConfigError::ShortSharedSecret]));
        let default = parse(&["--auth", "none"]).unwrap().shared_secrets;
        assert!(default.master.is_none() && default.refresh == Duration::from_secs(30), "{default:?}");
    }

    #[test]
    fn anonymous_is_loopback_only_and_jwt_needs_one_key_source() {
        let public = parse(&["--auth", "none", "--listen", "0.0.0.0:8080"]).unwrap_err();
        assert!(matches!(public[..], [ConfigError::AnonymousOnPublicAddress(_)]));
        let both = parse(&["--auth", "jwt", "--jwks-file", "/x", "--jwks-url", "https://x"]).unwrap_err();
        assert!(matches!(both[..], [ConfigError::JwtKeySource]));
        let jwks = parse(&["--auth", "jwt", "--jwks-url", "https://issuer/jwks", "--jwt-audience", "aud"]).unwrap();
        let Auth::Jwt(settings) = jwks.auth else { panic!("jwt") };
        assert!(matches!(settings.keys, JwtKeys::JwksUrl(_)));
        assert_eq!(settings.audience, "aud");
    }
}
