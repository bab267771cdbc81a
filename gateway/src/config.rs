//! The gateway's command line. Every flag has a `TASKGATE_*` environment fallback, and every
//! default is safe: loopback only, no authentication unless asked for, bounded bodies.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use taskgate_shared::telemetry::LogFormat;

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

#[derive(Debug, Clone, Parser)]
#[command(name = "taskgate-gateway", version, about = "Stateless MCP 2026-07-28 + Tasks gateway")]
pub struct Config {
    /// Address to listen on.
    #[arg(long, env = "TASKGATE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Redis URL: `redis://…`, or `redis+cluster://host:port,host:port` for a Cluster.
    #[arg(long, env = "TASKGATE_REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    pub redis_url: String,

    /// Prefix of every Redis key and channel, so deployments and test runs can share a Redis.
    #[arg(long, env = "TASKGATE_NAMESPACE", default_value = "taskgate")]
    pub namespace: String,

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
    #[arg(long, env = "TASKGATE_MAX_BODY_BYTES", default_value_t = 1024 * 1024)]
    pub max_body_bytes: usize,

    /// How long a client may take to send its request body, in milliseconds.
    #[arg(long, env = "TASKGATE_BODY_TIMEOUT_MS", default_value_t = 5_000)]
    pub body_timeout_ms: u64,

    /// Requests under way on this replica past which new ones are answered 503 with
    /// `Retry-After` at once (load shedding). Held polls and inline calls count while they wait;
    /// listen streams count only until their headers are sent.
    #[arg(long, env = "TASKGATE_MAX_IN_FLIGHT", default_value = "20000")]
    pub max_in_flight: std::num::NonZeroUsize,

    /// How long a request may go unanswered before the gateway answers 504, in milliseconds. A
    /// backstop above the designed deadlines (the inline timeout, a held poll's interval); a
    /// stream is timed only until it starts.
    #[arg(long, env = "TASKGATE_REQUEST_TIMEOUT_MS", default_value_t = 300_000)]
    pub request_timeout_ms: u64,

    /// How long a connection may take to send a request's head, in milliseconds. For HTTP/1.1
    /// this is also how long an idle keep-alive connection is kept.
    #[arg(long, env = "TASKGATE_HEADER_READ_TIMEOUT_MS", default_value_t = 30_000)]
    pub header_read_timeout_ms: u64,

    /// Connections served at once by this replica; one more is answered 503 and closed. Each
    /// listen stream holds one (HTTP/1.1).
    #[arg(long, env = "TASKGATE_MAX_CONNECTIONS", default_value = "25000")]
    pub max_connections: std::num::NonZeroUsize,

    /// Concurrent requests on one HTTP/2 connection.
    #[arg(long, env = "TASKGATE_HTTP2_MAX_STREAMS", default_value = "256")]
    pub http2_max_streams: std::num::NonZeroU32,

    /// Serves `POST /test/panic`, a handler that panics. For the black-box tests only.
    #[arg(long, env = "TASKGATE_TEST_ROUTES", hide = true)]
    pub test_routes: bool,

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

    /// Timeout of each Redis command and connection attempt, in milliseconds.
    #[arg(long, env = "TASKGATE_REDIS_TIMEOUT_MS", default_value_t = 2_000)]
    pub redis_timeout_ms: u64,

    /// Number of dispatch-queue shards (1..=256). Task ids carry their shard, so this may grow
    /// later but must not shrink while tasks of the higher shards live. Workers must use the
    /// same value.
    #[arg(long, env = "TASKGATE_QUEUE_SHARDS", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub queue_shards: u16,

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

    /// Open listen streams one principal may hold on one replica. One service account often
    /// follows the tasks of many end users, so by default it may use the whole replica.
    #[arg(long, env = "TASKGATE_LISTEN_MAX_STREAMS_PER_PRINCIPAL", default_value_t = 10_000)]
    pub listen_max_streams_per_principal: usize,

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

/// A configuration that cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--auth none is refused on the non-loopback address {0}; bind 127.0.0.1 or configure authentication")]
    AnonymousOnPublicAddress(SocketAddr),
    #[error("--namespace must be non-empty and contain no '{{', '}}' or whitespace")]
    BadNamespace,
    #[error("--max-body-bytes must be at least 1")]
    ZeroBodyLimit,
    #[error("--auth api-keys needs --api-keys-file")]
    NoApiKeys,
    #[error("cannot read {path}: {source}")]
    Secret { path: String, source: std::io::Error },
    #[error(
        "--durability-timeout-ms {durability_ms} must be below --redis-timeout-ms {redis_ms}: a create's WAIT \
         would otherwise time out as a command before it can report how many replicas acknowledged"
    )]
    DurabilityTimeout { durability_ms: u64, redis_ms: u64 },
}

/// The limits on connections (`http::serve`).
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub header_read_timeout: Duration,
    pub max_connections: usize,
    pub http2_max_streams: u32,
}

/// What an early `tasks/get` gets (`--poll-limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PollLimit {
    Hold,
    Refuse,
    Off,
}

impl Config {
    /// The poll limit in force: `--poll-tolerance 0` turns it off too.
    pub fn poll_limit(&self) -> PollLimit {
        if self.poll_tolerance <= 0.0 { PollLimit::Off } else { self.poll_limit }
    }

    /// Checks what clap cannot.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.auth == AuthMode::None && !self.listen.ip().is_loopback() {
            return Err(ConfigError::AnonymousOnPublicAddress(self.listen));
        }
        if self.namespace.is_empty()
            || self.namespace.contains(['{', '}'])
            || self.namespace.contains(char::is_whitespace)
        {
            return Err(ConfigError::BadNamespace);
        }
        if self.max_body_bytes == 0 {
            return Err(ConfigError::ZeroBodyLimit);
        }
        if self.auth == AuthMode::ApiKeys && self.api_keys_file.is_none() {
            return Err(ConfigError::NoApiKeys);
        }
        if self.durability_replicas > 0 && self.durability_timeout_ms >= self.redis_timeout_ms {
            return Err(ConfigError::DurabilityTimeout {
                durability_ms: self.durability_timeout_ms,
                redis_ms: self.redis_timeout_ms,
            });
        }
        Ok(())
    }

    /// The canonical resource URI.
    pub fn resource_url(&self) -> String {
        self.resource_url.clone().unwrap_or_else(|| format!("http://{}/mcp", self.listen))
    }

    /// The `requestState` keys, from their file or the environment (never a flag).
    pub fn request_state_keys(&self) -> Result<Vec<String>, ConfigError> {
        let text = match &self.request_state_keys_file {
            Some(path) => read_secret(path)?,
            None => std::env::var("TASKGATE_REQUEST_STATE_KEYS").unwrap_or_default(),
        };
        Ok(text.split([',', '\n']).map(str::trim).filter(|k| !k.is_empty()).map(str::to_owned).collect())
    }

    /// The HS256 secret, from its file or the environment (never a flag).
    pub fn jwt_hs256_secret(&self) -> Result<Option<Vec<u8>>, ConfigError> {
        match &self.jwt_hs256_secret_file {
            Some(path) => Ok(Some(read_secret(path)?.trim_end_matches(['\r', '\n']).as_bytes().to_vec())),
            None => Ok(std::env::var("TASKGATE_JWT_HS256_SECRET").ok().map(String::into_bytes)),
        }
    }

    pub fn body_timeout(&self) -> Duration {
        Duration::from_millis(self.body_timeout_ms)
    }

    pub fn durability_timeout(&self) -> Duration {
        Duration::from_millis(self.durability_timeout_ms)
    }

    pub fn shutdown_delay(&self) -> Duration {
        Duration::from_millis(self.shutdown_delay_ms)
    }

    pub fn inline_timeout(&self) -> Duration {
        Duration::from_millis(self.inline_timeout_ms.max(1))
    }

    pub fn sse_keep_alive(&self) -> Duration {
        Duration::from_millis(self.sse_keepalive_ms.max(100))
    }

    pub fn catalogue_refresh(&self) -> Duration {
        Duration::from_millis(self.catalogue_refresh_ms.max(100))
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms.max(1))
    }

    pub fn connection_limits(&self) -> ConnectionLimits {
        ConnectionLimits {
            header_read_timeout: Duration::from_millis(self.header_read_timeout_ms.max(1)),
            max_connections: self.max_connections.get(),
            http2_max_streams: self.http2_max_streams.get(),
        }
    }

    pub fn redis_timeout(&self) -> Duration {
        Duration::from_millis(self.redis_timeout_ms)
    }
}

fn read_secret(path: &std::path::Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Secret { path: path.display().to_string(), source })
}
