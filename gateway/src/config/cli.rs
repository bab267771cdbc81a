//! The gateway's command line, as clap reads it: every flag with its `TASKGATE_*` environment
//! fallback, its default and its help (docs/configuration.md is checked against the help).

use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use taskgate_shared::config::RedisArgs;
use taskgate_shared::telemetry::LogFormat;

use super::PollLimit;

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

    /// Caps an HTTP/1.1 connection's read buffer, in bytes (at least 8192), which also caps a
    /// request's head: a longer head is refused 431. Unset: hyper's own cap (about 400 KB). A
    /// cap of 8192 saves memory on every HTTP/1.1 listen stream and still takes a 6 KB bearer
    /// token; it refuses tokens much longer than that.
    #[arg(long, env = "TASKGATE_HTTP1_MAX_BUFFER_BYTES", value_parser = clap::value_parser!(u32).range(8192..))]
    pub http1_max_buffer_bytes: Option<u32>,

    #[command(flatten)]
    pub runtime: taskgate_shared::runtime::RuntimeArgs,

    /// Serves `POST /test/panic`, a handler that panics. For the black-box tests only.
    #[arg(long, env = "TASKGATE_TEST_ROUTES", hide = true)]
    pub test_routes: bool,

    /// Serves the operator console under `/console/` (docs/console.md). Off by default.
    #[arg(long, env = "TASKGATE_CONSOLE")]
    pub console: bool,

    /// The scope that makes a token a console operator: every tenant, and the actions. It also
    /// lets the admin API (`/admin/credentials`) act on every tenant's upstream credentials.
    #[arg(long, env = "TASKGATE_CONSOLE_SCOPE", default_value = "taskgate:operator")]
    pub console_scope: String,

    /// The scope that lets a token see its own tenant's tasks in the console, read-only, and
    /// manage its own tenant's upstream credentials through the admin API.
    #[arg(long, env = "TASKGATE_CONSOLE_TENANT_SCOPE", default_value = "taskgate:tenant-admin")]
    pub console_tenant_scope: String,

    /// Without a key, the admin API cannot set credentials (503).
    #[command(flatten)]
    pub credentials: taskgate_shared::credentials::KeyArgs,

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

    /// How long a `tools/call` made as a task waits for its task to end before it answers, in
    /// milliseconds: a task that ends in time (completed, or failed with an error) is answered
    /// with its result in this one reply, and stays readable with `tasks/get`; otherwise the
    /// reply is the task's handle. A tool's own setting overrides it. 0 always answers with the
    /// handle. Below a client's poll interval, so a caller whose task outlasts it loses less
    /// than one poll.
    #[arg(long, env = "TASKGATE_COMPLETE_WITHIN_MS", default_value_t = 250)]
    pub complete_within_ms: u64,

    /// File of the keys that sign MRTR `requestState` tokens: `ID:BASE64` (at least 32 bytes)
    /// separated by commas or newlines; the first signs, all verify. They may instead come from
    /// `TASKGATE_REQUEST_STATE_KEYS`. Every replica must share them; without any, each process
    /// makes its own, so a retry must reach the same replica.
    #[arg(long)]
    pub request_state_keys_file: Option<PathBuf>,

    /// File of a master secret (at least 32 bytes) from which the keys every replica must share
    /// are derived (HKDF-SHA256): the one idempotency keys become task ids under, and the
    /// console's CSRF key. It may instead come from `TASKGATE_SHARED_SECRET`. Without either,
    /// those keys are random ones kept in Redis (docs/security.md says what that leaves open).
    #[arg(long, env = "TASKGATE_SHARED_SECRET_FILE")]
    pub shared_secret_file: Option<PathBuf>,

    /// Without a configured shared secret: how often the keys kept in Redis are read again,
    /// and written back from this replica's copy when they are missing, in milliseconds.
    #[arg(long, env = "TASKGATE_SHARED_SECRET_REFRESH_MS", default_value_t = 30_000)]
    pub shared_secret_refresh_ms: u64,

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

    /// The size of the slices of a tenant's rate a replica leases and admits from in memory:
    /// the rate over this time, at most the burst. A slice is used until spent, or for ten times
    /// this at most. The fleet may admit up to replicas x slice more than the rate over any
    /// window; 0 asks Redis for every request.
    #[arg(long, env = "TASKGATE_ADMISSION_SLICE_MS", default_value_t = 100)]
    pub admission_slice_ms: u64,

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

    /// Bytes of `tasks/get` answers this replica keeps for their owners, least recently used
    /// evicted first (0 turns the snapshot cache off).
    #[arg(long, env = "TASKGATE_SNAPSHOT_CACHE_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub snapshot_cache_bytes: usize,

    /// Milliseconds a replica's snapshot-cache beacon waits after the previous one, at most,
    /// for more polls to share it (a lone poll and a closed loop of clients do not wait:
    /// docs/architecture.md, "The snapshot cache"). Holds the beacons of a fleet's polls to
    /// about 1000/gap a second per replica, and adds up to that much to a cached get's latency
    /// (0: the next beacon goes as soon as the last is heard back; at most 50, well within the
    /// 100 ms a get waits for its beacon before it reads Redis).
    #[arg(long, env = "TASKGATE_SNAPSHOT_CACHE_BEACON_GAP_MS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(0..=50))]
    pub snapshot_cache_beacon_gap_ms: u64,

    /// Serves task status changes as MCP Events (`io.modelcontextprotocol/events`:
    /// `events/list`, `events/poll`, `events/stream`; docs/events.md). Off by default: `events/*` answers
    /// -32601 and no outbox is written. Tasks created while it was off never have events.
    #[arg(long, env = "TASKGATE_EVENTS")]
    pub events: bool,

    /// The tenants whose tasks have events (comma separated); empty: every tenant. Another
    /// tenant's tasks write no outbox, and its callers' polls find nothing.
    #[arg(long, env = "TASKGATE_EVENTS_TENANTS", value_delimiter = ',')]
    pub events_tenants: Vec<String>,

    /// How long a task's status changes stay readable, in milliseconds: older outbox entries
    /// are trimmed, and a cursor older than twice this reads as a gap (`truncated`). Written
    /// into each task at creation, so later transitions (the worker's too) keep it.
    #[arg(long, env = "TASKGATE_EVENTS_RETENTION_MS", default_value_t = 3_600_000)]
    pub events_retention_ms: u64,

    /// Entries one outbox stream (one principal's tasks on one queue shard) keeps at most,
    /// about; older ones are trimmed (a gap for a reader behind them).
    #[arg(long, env = "TASKGATE_EVENTS_MAX_PER_STREAM", default_value_t = 10_000)]
    pub events_max_per_stream: u64,

    /// The `nextPollMs` an `events/poll` answers with, in milliseconds.
    #[arg(long, env = "TASKGATE_EVENTS_POLL_INTERVAL_MS", default_value_t = 2_000)]
    pub events_poll_interval_ms: u64,

    /// How often an `events/stream` sends `notifications/events/heartbeat` (with the cursor it
    /// has read up to) while no event goes out, in milliseconds; 50 to 30,000 (the extension
    /// asks for at least one every 30 s).
    #[arg(long, env = "TASKGATE_EVENTS_HEARTBEAT_MS", default_value_t = 15_000)]
    pub events_heartbeat_ms: u64,

    /// Events one `events/poll` returns at most: the default and the cap of `maxEvents`.
    #[arg(long, env = "TASKGATE_EVENTS_MAX_POLL_EVENTS", default_value_t = 100)]
    pub events_max_poll_events: usize,

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

    #[command(flatten)]
    pub webhooks: super::webhooks::WebhookArgs,
}

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
