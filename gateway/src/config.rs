//! The gateway's command line. Every flag has a `TASKGATE_*` environment fallback, and every
//! default is safe: loopback only, no authentication unless asked for, bounded bodies.

use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use taskgate_shared::config::{RedisArgs, RedisConfigError, RedisSettings};
use taskgate_shared::telemetry::LogFormat;

use crate::runtime::{RuntimeSettings, RuntimeShape};

/// How requests are authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuthMode {
    /// No authentication: every caller is principal `anonymous` of tenant `default`.
    /// Refused on a non-loopback listen address.
    None,
    /// Bearer JWTs (HS256 secret, or RS256/ES256 through a JWKS).
    Jwt,
    /// Bearer API keys, listed by SHA-256 hash in `--api-keys-file`.
    ApiKeys,
}

/// The command line, as clap reads it. [`Config::from_cli`] turns it into the typed
/// configuration the gateway runs with; nothing else reads it.
#[derive(Debug, Clone, Parser)]
#[command(name = "taskgate-gateway", version, about = "Stateless MCP 2026-07-28 + Tasks gateway")]
pub struct Cli {
    /// Address to listen on.
    #[arg(long, env = "TASKGATE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    #[command(flatten)]
    pub redis: RedisArgs,

    /// Authentication mode. There is no default: `none` must be asked for explicitly.
    #[arg(long, env = "TASKGATE_AUTH", value_enum)]
    pub auth: AuthMode,

    /// HS256 secret file (at least 32 bytes). The secret may instead come from the
    /// `TASKGATE_JWT_HS256_SECRET` environment variable; it is never a flag, so it never shows
    /// in `ps`.
    #[arg(long)]
    pub jwt_hs256_secret_file: Option<PathBuf>,

    /// JWKS file (RS256/ES256 keys by `kid`).
    #[arg(long, env = "TASKGATE_JWKS_FILE")]
    pub jwks_file: Option<PathBuf>,

    /// JWKS URL (RS256/ES256 keys by `kid`).
    #[arg(long, env = "TASKGATE_JWKS_URL")]
    pub jwks_url: Option<String>,

    /// How often the JWKS is re-read, in milliseconds (also re-read once on an unknown `kid`).
    #[arg(long, env = "TASKGATE_JWKS_REFRESH_MS", default_value_t = 300_000)]
    pub jwks_refresh_ms: u64,

    /// Required `iss` of tokens.
    #[arg(long, env = "TASKGATE_JWT_ISSUER")]
    pub jwt_issuer: Option<String>,

    /// Required `aud` of tokens. Defaults to `--resource-url`.
    #[arg(long, env = "TASKGATE_JWT_AUDIENCE")]
    pub jwt_audience: Option<String>,

    /// The claim that names the caller's tenant.
    #[arg(long, env = "TASKGATE_JWT_TENANT_CLAIM", default_value = "tenant")]
    pub jwt_tenant_claim: String,

    /// Scopes every token must carry (comma separated).
    #[arg(long, env = "TASKGATE_JWT_REQUIRED_SCOPES", value_delimiter = ',')]
    pub jwt_required_scopes: Vec<String>,

    /// Clock leeway for `exp` and `nbf`, in seconds.
    #[arg(long, env = "TASKGATE_JWT_LEEWAY_S", default_value_t = 30)]
    pub jwt_leeway_s: u64,

    /// API-key file: `<sha256 hex> <tenant> <principal>` per line.
    #[arg(long, env = "TASKGATE_API_KEYS_FILE")]
    pub api_keys_file: Option<PathBuf>,

    /// This server's canonical resource URI (the expected `aud`, and the subject of the
    /// protected-resource metadata). Defaults to `http://<listen>/mcp`.
    #[arg(long, env = "TASKGATE_RESOURCE_URL")]
    pub resource_url: Option<String>,

    /// Authorization servers named in the protected-resource metadata (comma separated).
    #[arg(long, env = "TASKGATE_AUTHORIZATION_SERVERS", value_delimiter = ',')]
    pub authorization_servers: Vec<String>,

    /// Largest accepted request body, in bytes.
    #[arg(long, env = "TASKGATE_MAX_BODY_BYTES", default_value = "1048576")]
    pub max_body_bytes: NonZeroUsize,

    /// How long a client may take to send its request body, in milliseconds.
    #[arg(long, env = "TASKGATE_BODY_TIMEOUT_MS", default_value_t = 5_000)]
    pub body_timeout_ms: u64,

    /// Requests under way on this replica past which new ones are answered 503 with
    /// `Retry-After` at once (load shedding). Held polls and inline calls count while they wait;
    /// listen streams count only until their headers are sent.
    #[arg(long, env = "TASKGATE_MAX_IN_FLIGHT", default_value = "20000")]
    pub max_in_flight: NonZeroUsize,

    /// How long a request may go unanswered before the gateway answers 504, in milliseconds. A
    /// backstop above the designed deadlines: keep it above `--inline-timeout-ms` (a warning is
    /// logged at start-up otherwise). A stream is timed only until it starts. Also how long a
    /// stopping gateway lets requests under way finish.
    #[arg(long, env = "TASKGATE_REQUEST_TIMEOUT_MS", default_value_t = 300_000)]
    pub request_timeout_ms: u64,

    /// How long a request head may take to arrive, from its first byte (or, on a new
    /// connection, from the accept), in milliseconds. A connection that sends nothing or half a
    /// head is closed.
    #[arg(long, env = "TASKGATE_HEADER_READ_TIMEOUT_MS", default_value_t = 10_000)]
    pub header_read_timeout_ms: u64,

    /// How long a connection with nothing under way is kept, in milliseconds. Keep it above the
    /// idle timeout of any proxy or load balancer in front (60 s is common), so that they never
    /// reuse a connection the gateway is closing.
    #[arg(long, env = "TASKGATE_IDLE_TIMEOUT_MS", default_value_t = 75_000)]
    pub idle_timeout_ms: u64,

    /// Connections served at once by this replica; one more is answered 503 and closed. Each
    /// listen stream holds one (HTTP/1.1).
    #[arg(long, env = "TASKGATE_MAX_CONNECTIONS", default_value = "25000")]
    pub max_connections: NonZeroUsize,

    /// Concurrent requests on one HTTP/2 connection.
    #[arg(long, env = "TASKGATE_HTTP2_MAX_STREAMS", default_value = "256")]
    pub http2_max_streams: NonZeroU32,

    /// The runtime: `work-stealing` (one multi-threaded runtime) or `per-core` (one
    /// single-threaded runtime per core, each with its own listening socket and Redis
    /// connection; `--max-connections` is shared out among them). See docs/performance.md.
    #[arg(long, env = "TASKGATE_RUNTIME", default_value = "work-stealing")]
    pub runtime: RuntimeShape,

    /// Runtime threads (work-stealing) or runtimes (per-core); default: the cores this process
    /// may use (for work-stealing, tokio's choice, which reads `TOKIO_WORKER_THREADS`).
    #[arg(long, env = "TASKGATE_RUNTIME_THREADS")]
    pub runtime_threads: Option<NonZeroUsize>,

    /// Scheduler ticks between polls for I/O and timers (tokio's default when unset: 61).
    #[arg(long, env = "TASKGATE_RUNTIME_EVENT_INTERVAL")]
    pub runtime_event_interval: Option<NonZeroU32>,

    /// Scheduler ticks between looks at the shared run queue, work-stealing only (tokio's
    /// default when unset adapts to how long tasks run).
    #[arg(long, env = "TASKGATE_RUNTIME_GLOBAL_QUEUE_INTERVAL")]
    pub runtime_global_queue_interval: Option<NonZeroU32>,

    /// Serves `POST /test/panic`, a handler that panics. For the black-box tests only.
    #[arg(long, env = "TASKGATE_TEST_ROUTES", hide = true)]
    pub test_routes: bool,

    /// Serves the operator console under `/console/` (docs/console.md). Off by default.
    #[arg(long, env = "TASKGATE_CONSOLE")]
    pub console: bool,

    /// The scope that makes a token a console operator: every tenant, and the actions.
    #[arg(long, env = "TASKGATE_CONSOLE_SCOPE", default_value = "taskgate:operator")]
    pub console_scope: String,

    /// The scope that lets a token see its own tenant's tasks in the console, read-only.
    #[arg(long, env = "TASKGATE_CONSOLE_TENANT_SCOPE", default_value = "taskgate:tenant-admin")]
    pub console_tenant_scope: String,

    /// A trace viewer's URL with `{trace_id}` in it (Jaeger, Tempo, …): the console links each
    /// task to its trace.
    #[arg(long, env = "TASKGATE_CONSOLE_TRACE_URL")]
    pub console_trace_url: Option<String>,

    /// Console requests under way on this replica past which new ones are answered 503 with
    /// `Retry-After` at once. The console reads many keys per page; this keeps a loop of
    /// page loads from taking Redis away from `/mcp`.
    #[arg(long, env = "TASKGATE_CONSOLE_MAX_IN_FLIGHT", default_value = "16")]
    pub console_max_in_flight: NonZeroUsize,

    /// Browser origins allowed to call `/mcp` (exact match, comma separated). Without it, only
    /// loopback origins are accepted on a loopback listener and none on any other.
    #[arg(long, env = "TASKGATE_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub allowed_origins: Vec<String>,

    /// `Host` names accepted on `/mcp` (comma separated, port ignored). Without it, a loopback
    /// listener accepts only loopback names (DNS-rebinding protection) and any other accepts all.
    #[arg(long, env = "TASKGATE_ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,

    /// Require `Mcp-Name` on `tasks/get|update|cancel` too (it is validated whenever present).
    #[arg(long, env = "TASKGATE_STRICT_HEADERS")]
    pub strict_headers: bool,

    /// Replicas that must acknowledge a task's creation (`WAIT`) before its handle is returned.
    #[arg(long, env = "TASKGATE_DURABILITY_REPLICAS", default_value_t = 0)]
    pub durability_replicas: u32,

    /// How long to wait for those acknowledgements, in milliseconds.
    #[arg(long, env = "TASKGATE_DURABILITY_TIMEOUT_MS", default_value_t = 1_000)]
    pub durability_timeout_ms: u64,

    /// How often the tool catalogue is re-read from Redis, in milliseconds.
    #[arg(long, env = "TASKGATE_CATALOGUE_REFRESH_MS", default_value_t = 2_000)]
    pub catalogue_refresh_ms: u64,

    /// On SIGTERM, how long to keep serving with readiness off before closing the listener, in
    /// milliseconds: the time load balancers take to stop routing here (Kubernetes: a few
    /// seconds, below `terminationGracePeriodSeconds`).
    #[arg(long, env = "TASKGATE_SHUTDOWN_DELAY_MS", default_value_t = 0)]
    pub shutdown_delay_ms: u64,

    /// How long an inline `tools/call` waits for the worker's result, in milliseconds.
    #[arg(long, env = "TASKGATE_INLINE_TIMEOUT_MS", default_value_t = 60_000)]
    pub inline_timeout_ms: u64,

    /// File of the keys that sign MRTR `requestState` tokens: `ID:BASE64` (at least 32 bytes)
    /// separated by commas or newlines; the first signs, all verify. They may instead come from
    /// `TASKGATE_REQUEST_STATE_KEYS`. Every replica must share them; without any, each process
    /// makes its own, so a retry must reach the same replica.
    #[arg(long)]
    pub request_state_keys_file: Option<PathBuf>,

    /// How long a `requestState` stays valid, in milliseconds.
    #[arg(long, env = "TASKGATE_REQUEST_STATE_TTL_MS", default_value_t = 300_000)]
    pub request_state_ttl_ms: u64,

    /// Task ids one `subscriptions/listen` may name.
    #[arg(long, env = "TASKGATE_LISTEN_MAX_TASK_IDS", default_value_t = 100)]
    pub listen_max_task_ids: usize,

    /// Open listen streams one principal may hold on one replica. Default: a quarter of
    /// `--listen-max-streams` (at least 1), so no one caller can take every stream.
    #[arg(long, env = "TASKGATE_LISTEN_MAX_STREAMS_PER_PRINCIPAL")]
    pub listen_max_streams_per_principal: Option<usize>,

    /// Open listen streams on this replica, all principals together: the memory bound (about
    /// 25 KB each). Beyond it, or the per-principal bound, a listen is refused with 429.
    #[arg(long, env = "TASKGATE_LISTEN_MAX_STREAMS", default_value_t = 10_000)]
    pub listen_max_streams: usize,

    /// Interval of SSE keep-alive comments, in milliseconds.
    #[arg(long, env = "TASKGATE_SSE_KEEPALIVE_MS", default_value_t = 15_000)]
    pub sse_keepalive_ms: u64,

    /// Per-tenant request rate, per second, across all replicas (0 = unlimited).
    #[arg(long, env = "TASKGATE_TENANT_RPS", default_value_t = 500.0)]
    pub tenant_rps: f64,

    /// Requests a tenant may make at once (the bucket size of its rate).
    #[arg(long, env = "TASKGATE_TENANT_BURST", default_value_t = 1_000)]
    pub tenant_burst: u32,

    /// Per-tenant task-creation rate, per second, across all replicas (0 = unlimited).
    #[arg(long, env = "TASKGATE_TENANT_CREATE_RPS", default_value_t = 100.0)]
    pub tenant_create_rps: f64,

    /// Task creations a tenant may make at once (the bucket size of its rate).
    #[arg(long, env = "TASKGATE_TENANT_CREATE_BURST", default_value_t = 200)]
    pub tenant_create_burst: u32,

    /// Tasks a tenant may have that are not yet terminal (0 = unlimited).
    #[arg(long, env = "TASKGATE_TENANT_MAX_ACTIVE_TASKS", default_value_t = 10_000)]
    pub tenant_max_active_tasks: u64,

    /// A tenant's share of a pool's workers while several tenants have tasks queued,
    /// `TENANT=WEIGHT` (repeat, or comma-separate in the variable); a weight from 0.01 to 100.
    /// Unnamed tenants weigh 1: a tenant of weight 2 gets two claims to their one.
    #[arg(long = "tenant-weight", env = "TASKGATE_TENANT_WEIGHTS", value_delimiter = ',', value_parser = parse_weight)]
    pub tenant_weights: Vec<(String, f64)>,

    /// What an early `tasks/get` gets: `hold` (answered at the task's next change, or once its
    /// `pollIntervalMs` since the previous poll has passed), `refuse` (429 with Retry-After) or
    /// `off` (every poll is read).
    #[arg(long, env = "TASKGATE_POLL_LIMIT", value_enum, default_value_t = PollLimit::Hold)]
    pub poll_limit: PollLimit,

    /// A `tasks/get` sooner than this fraction of the task's `pollIntervalMs` after the same
    /// principal's previous one is early (0 also turns the limit off).
    #[arg(long, env = "TASKGATE_POLL_TOLERANCE", default_value_t = 0.5)]
    pub poll_tolerance: f64,

    /// Early polls held at once on this replica; beyond, they are refused with 429.
    #[arg(long, env = "TASKGATE_MAX_HELD_POLLS", default_value_t = 10_000)]
    pub max_held_polls: usize,

    /// Early polls one principal may have held at once on this replica.
    #[arg(long, env = "TASKGATE_MAX_HELD_POLLS_PER_PRINCIPAL", default_value_t = 1_000)]
    pub max_held_polls_per_principal: usize,

    /// Largest `tools/call` arguments, in bytes of JSON.
    #[arg(long, env = "TASKGATE_MAX_ARGUMENT_BYTES", default_value_t = 256 * 1024)]
    pub max_argument_bytes: usize,

    /// Largest set of input responses in one request, in bytes of JSON.
    #[arg(long, env = "TASKGATE_MAX_INPUT_RESPONSE_BYTES", default_value_t = 64 * 1024)]
    pub max_input_response_bytes: usize,

    /// Log format: auto (JSON unless on a terminal), json or text.
    #[arg(long, env = "TASKGATE_LOG_FORMAT", default_value = "auto")]
    pub log_format: LogFormat,
}

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
    #[error("cannot read {path}: {source}")]
    Secret { path: String, source: std::io::Error },
    #[error(
        "--durability-timeout-ms {durability_ms} must be below --redis-timeout-ms {redis_ms}: a create's WAIT \
         would otherwise time out as a command before it can report how many replicas acknowledged"
    )]
    DurabilityTimeout { durability_ms: u128, redis_ms: u128 },
    #[error("--poll-tolerance must be a number from 0 to 1")]
    PollTolerance,
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

/// Signing keys (`requestState`); `Debug` shows how many, never what.
#[derive(Clone, Default)]
pub struct SecretKeys(pub Vec<String>);

impl std::fmt::Debug for SecretKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretKeys(<{} redacted>)", self.0.len())
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

/// The gateway's configuration: checked, with its secrets read, once at start-up.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub redis: RedisSettings,
    pub auth: Auth,
    /// The canonical resource URI (the expected `aud`, the subject of the metadata).
    pub resource_url: String,
    pub authorization_servers: Vec<String>,
    /// Scopes every token must carry (also announced in challenges and the metadata).
    pub required_scopes: Vec<String>,
    pub max_body_bytes: usize,
    pub body_timeout: Duration,
    pub max_in_flight: NonZeroUsize,
    pub request_timeout: Duration,
    pub connections: ConnectionLimits,
    pub runtime: RuntimeSettings,
    pub test_routes: bool,
    /// `--console`: `None` when off.
    pub console: Option<ConsoleSettings>,
    pub allowed_origins: Vec<String>,
    pub allowed_hosts: Vec<String>,
    pub strict_headers: bool,
    pub durability_replicas: u32,
    pub durability_timeout: Duration,
    pub catalogue_refresh: Duration,
    pub shutdown_delay: Duration,
    pub inline_timeout: Duration,
    /// `ID:BASE64` entries from the keys file or `TASKGATE_REQUEST_STATE_KEYS` (empty: each
    /// process makes its own).
    pub request_state_keys: SecretKeys,
    pub request_state_ttl_ms: u64,
    pub listen_max_task_ids: usize,
    pub listen_max_streams_per_principal: usize,
    pub listen_max_streams: usize,
    pub sse_keep_alive: Duration,
    pub tenant_rps: f64,
    pub tenant_burst: u32,
    pub tenant_create_rps: f64,
    pub tenant_create_burst: u32,
    pub tenant_max_active_tasks: u64,
    /// `--tenant-weight`: tenant -> its weight in fair dispatch (absent: 1).
    pub tenant_weights: std::collections::HashMap<String, f64>,
    /// `--poll-limit`, already `Off` when `--poll-tolerance` is 0.
    pub poll_limit: PollLimit,
    pub poll_tolerance: f64,
    pub max_held_polls: usize,
    pub max_held_polls_per_principal: usize,
    pub max_argument_bytes: usize,
    pub max_input_response_bytes: usize,
    pub log_format: LogFormat,
}

/// The default per-principal listen-stream cap is this fraction (1/N) of the replica's.
const PRINCIPAL_SHARE_OF_STREAMS: usize = 4;

/// The lightest and heaviest `--tenant-weight`: within them a tag step (1/weight) stays exact
/// enough in a double for as long as a pool runs.
const WEIGHTS: std::ops::RangeInclusive<f64> = 0.01..=100.0;

fn parse_weight(value: &str) -> Result<(String, f64), String> {
    let (tenant, weight) = value.rsplit_once('=').ok_or_else(|| format!("{value:?} is not TENANT=WEIGHT"))?;
    let weight: f64 = weight.trim().parse().map_err(|_| format!("{weight:?} is not a number"))?;
    if tenant.is_empty() || !WEIGHTS.contains(&weight) {
        return Err(format!("a weight is from {} to {}, for a named tenant", WEIGHTS.start(), WEIGHTS.end()));
    }
    Ok((tenant.to_owned(), weight))
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
        let (Some(redis), Some(auth), Some(request_state_keys), true) =
            (redis, auth, request_state_keys, errors.is_empty())
        else {
            return Err(errors);
        };
        Ok(Self {
            listen: cli.listen,
            redis,
            auth,
            resource_url,
            authorization_servers: cli.authorization_servers,
            required_scopes: cli.jwt_required_scopes,
            max_body_bytes: cli.max_body_bytes.get(),
            body_timeout: ms(cli.body_timeout_ms),
            max_in_flight: cli.max_in_flight,
            request_timeout: ms(cli.request_timeout_ms.max(1)),
            connections: ConnectionLimits {
                header_read_timeout: ms(cli.header_read_timeout_ms.max(1)),
                idle_timeout: ms(cli.idle_timeout_ms.max(1)),
                max_connections: cli.max_connections.get(),
                http2_max_streams: cli.http2_max_streams.get(),
                // Above every route's deadline (each is at most --request-timeout-ms), so it
                // only ever cuts a request that escaped them.
                response_deadline: ms(cli.request_timeout_ms.max(1)).saturating_add(ms(cli.body_timeout_ms))
                    + Duration::from_secs(10),
            },
            runtime: RuntimeSettings {
                shape: cli.runtime,
                threads: cli.runtime_threads,
                event_interval: cli.runtime_event_interval,
                global_queue_interval: cli.runtime_global_queue_interval,
            },
            test_routes: cli.test_routes,
            console: cli.console.then_some(ConsoleSettings {
                scope: cli.console_scope,
                tenant_scope: cli.console_tenant_scope,
                trace_url: cli.console_trace_url,
                max_in_flight: cli.console_max_in_flight,
            }),
            allowed_origins: cli.allowed_origins,
            allowed_hosts: cli.allowed_hosts,
            strict_headers: cli.strict_headers,
            durability_replicas: cli.durability_replicas,
            durability_timeout: ms(cli.durability_timeout_ms),
            catalogue_refresh: ms(cli.catalogue_refresh_ms.max(100)),
            shutdown_delay: ms(cli.shutdown_delay_ms),
            inline_timeout: ms(cli.inline_timeout_ms.max(1)),
            request_state_keys: SecretKeys(request_state_keys),
            request_state_ttl_ms: cli.request_state_ttl_ms,
            listen_max_task_ids: cli.listen_max_task_ids,
            listen_max_streams_per_principal: cli
                .listen_max_streams_per_principal
                .unwrap_or(cli.listen_max_streams / PRINCIPAL_SHARE_OF_STREAMS)
                .max(1),
            listen_max_streams: cli.listen_max_streams,
            sse_keep_alive: ms(cli.sse_keepalive_ms.max(100)),
            tenant_rps: cli.tenant_rps,
            tenant_burst: cli.tenant_burst,
            tenant_create_rps: cli.tenant_create_rps,
            tenant_create_burst: cli.tenant_create_burst,
            tenant_max_active_tasks: cli.tenant_max_active_tasks,
            tenant_weights: cli.tenant_weights.iter().cloned().collect(),
            poll_limit: if cli.poll_tolerance <= 0.0 { PollLimit::Off } else { cli.poll_limit },
            poll_tolerance: cli.poll_tolerance,
            max_held_polls: cli.max_held_polls,
            max_held_polls_per_principal: cli.max_held_polls_per_principal,
            max_argument_bytes: cli.max_argument_bytes,
            max_input_response_bytes: cli.max_input_response_bytes,
            log_format: cli.log_format,
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

/// The `requestState` keys, from their file or the environment (never a flag).
fn request_state_keys(cli: &Cli) -> Result<Vec<String>, ConfigError> {
    let text = match &cli.request_state_keys_file {
        Some(path) => read_secret(path)?,
        None => std::env::var("TASKGATE_REQUEST_STATE_KEYS").unwrap_or_default(),
    };
    Ok(text.split([',', '\n']).map(str::trim).filter(|k| !k.is_empty()).map(str::to_owned).collect())
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
        let errors = parse(&[
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
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 3, "{text:?}");
        assert!(text.iter().any(|t| t.contains("--namespace")));
        assert!(text.iter().any(|t| t.contains("--api-keys-file")));
        assert!(text.iter().any(|t| t.contains("--poll-tolerance")));
    }

    #[test]
    fn durations_and_defaults_are_typed() {
        let config = parse(&["--auth", "none", "--inline-timeout-ms", "1500"]).unwrap();
        assert_eq!(config.inline_timeout, Duration::from_millis(1500));
        assert_eq!(config.redis.timeout, Duration::from_secs(2));
        assert_eq!(config.resource_url, "http://127.0.0.1:8080/mcp");
        assert!(matches!(config.auth, Auth::None));
        let off = parse(&["--auth", "none", "--poll-tolerance", "0"]).unwrap();
        assert_eq!(off.poll_limit, PollLimit::Off);
    }

    #[test]
    fn one_principal_gets_a_quarter_of_the_listen_streams_unless_told() {
        let config = parse(&["--auth", "none"]).unwrap();
        assert_eq!((config.listen_max_streams, config.listen_max_streams_per_principal), (10_000, 2_500));
        let small = parse(&["--auth", "none", "--listen-max-streams", "2"]).unwrap();
        assert_eq!(small.listen_max_streams_per_principal, 1, "never zero");
        let set = parse(&["--auth", "none", "--listen-max-streams-per-principal", "9000"]).unwrap();
        assert_eq!(set.listen_max_streams_per_principal, 9_000);
    }

    #[test]
    fn secrets_never_show_in_debug_output() {
        let keys = SecretKeys(vec!["k1:c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA==".into()]);
        let hs = JwtKeys::Hs256(b"0123456789abcdef0123456789abcdef-secret".to_vec());
        let shown = format!("{keys:?} {hs:?}");
        assert!(!shown.contains("c2Vj") && !shown.contains("secret"), "{shown}");
        assert_eq!(shown, "SecretKeys(<1 redacted>) Hs256(<redacted>)");
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
