//! The worker's command line, with `TASKGATE_*` environment fallbacks, and the typed
//! configuration it becomes once, at start-up.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use taskgate_shared::config::{RedisArgs, RedisConfigError, RedisSettings};
use taskgate_shared::telemetry::LogFormat;

/// The command line, as clap reads it; [`Config::from_cli`] checks it.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "taskgate-worker",
    version,
    about = "taskgate worker: claims tasks through fenced leases and runs the tools"
)]
pub struct Cli {
    #[command(flatten)]
    pub redis: RedisArgs,

    /// Tool packs to serve, comma separated (`demo`, `conformance`); empty for none.
    #[arg(long, env = "TASKGATE_TOOLS", value_delimiter = ',', default_value = "demo")]
    pub tools: Vec<String>,

    /// The worker pool this worker belongs to: it reads, claims and takes over only this pool's
    /// queues, and the tools it publishes route new tasks to this pool (1 to 32 characters of
    /// a-z, 0-9 and -; see docs/design.md, "Worker pools").
    #[arg(long, env = "TASKGATE_POOL", default_value = "default")]
    pub pool: String,

    /// Upstream MCP servers whose tools this worker serves: a TOML file of `[[upstream]]`
    /// tables, or a desktop client's `mcpServers` JSON (see docs/upstreams.md).
    #[arg(long, env = "TASKGATE_UPSTREAMS")]
    pub upstreams: Option<std::path::PathBuf>,

    #[command(flatten)]
    pub credentials: taskgate_shared::credentials::KeyArgs,

    /// Per-identity upstream instances (a stdio child or HTTP session per tenant or principal,
    /// for `per = "tenant"|"principal"` servers) this worker runs at once, every server together.
    /// Past it, the least recently used idle instance is stopped.
    #[arg(long, env = "TASKGATE_MAX_INSTANCES", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_instances: u32,

    /// A per-identity upstream instance with no call for this long (ms) is stopped.
    #[arg(long, env = "TASKGATE_INSTANCE_IDLE_MS", default_value_t = 600_000, value_parser = clap::value_parser!(u64).range(100..))]
    pub instance_idle_ms: u64,

    /// How long this worker's tools stay listed after its last heartbeat into the catalogue, in
    /// milliseconds; it heartbeats every third of this. A dead worker's tools leave tools/list
    /// within about this long.
    #[arg(long, env = "TASKGATE_CATALOGUE_TTL_MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(300..))]
    pub catalogue_ttl_ms: u64,

    /// Per-tool task lifetime overrides of built-in tools, `name=ms` comma separated.
    #[arg(long, env = "TASKGATE_TOOL_TTL_MS", value_delimiter = ',')]
    pub tool_ttl_ms: Vec<String>,

    /// Per-tool `pollIntervalMs` overrides of built-in tools, `name=ms` comma separated.
    #[arg(long, env = "TASKGATE_TOOL_POLL_MS", value_delimiter = ',')]
    pub tool_poll_ms: Vec<String>,

    /// Per-tool overrides of the gateway's `--complete-within-ms` for built-in tools, `name=ms`
    /// comma separated: how long a call made as a task waits for its task to end before it
    /// answers; 0 always answers with the task's handle.
    #[arg(long, env = "TASKGATE_TOOL_COMPLETE_WITHIN_MS", value_delimiter = ',')]
    pub tool_complete_within_ms: Vec<String>,

    /// Built-in tools, comma separated, whose new calls start from the durable steps of a failed
    /// or cancelled task of the same caller, tool and arguments that the call names in
    /// `_meta["io.modelcontextprotocol/relatedTaskIds"]` (see docs/wire.md).
    #[arg(long, env = "TASKGATE_REUSE_STEPS", value_delimiter = ',')]
    pub reuse_steps: Vec<String>,

    /// Tools run at once by this worker.
    #[arg(long, env = "TASKGATE_CONCURRENCY", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub concurrency: u32,

    /// Lease duration in milliseconds; renewed about every third of it.
    #[arg(long, env = "TASKGATE_LEASE_MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(300..))]
    pub lease_ms: u64,

    /// Lease expiries a task survives before it is failed.
    #[arg(long, env = "TASKGATE_MAX_RECLAIMS", default_value_t = 3)]
    pub max_reclaims: u32,

    /// Serve `/metrics`, `/healthz` and `/readyz` on this address (off when unset).
    #[arg(long, env = "TASKGATE_METRICS_LISTEN")]
    pub metrics_listen: Option<std::net::SocketAddr>,

    /// This worker's id (lease holder name). Defaults to host name, pid and a random suffix.
    #[arg(long, env = "TASKGATE_WORKER_ID")]
    pub worker_id: Option<String>,

    /// On SIGTERM, how long running tools may take to finish before their leases are released.
    #[arg(long, env = "TASKGATE_DRAIN_GRACE_MS", default_value_t = 20_000)]
    pub drain_grace_ms: u64,

    /// After a cancel is requested, how long a tool may take to reach a checkpoint before it is
    /// stopped and the task ends cancelled.
    #[arg(long, env = "TASKGATE_CANCEL_GRACE_MS", default_value_t = 2_000)]
    pub cancel_grace_ms: u64,

    /// Largest result a tool may return, in bytes (JSON). A larger one fails the task.
    #[arg(long, env = "TASKGATE_MAX_RESULT_BYTES", default_value_t = 1024 * 1024)]
    pub max_result_bytes: usize,

    /// Directory where the demo `ledger` tool appends one line per step, a side effect outside
    /// Redis that shows whether two runs of one task ever overlapped (unset: `ledger` refuses).
    #[arg(long, env = "TASKGATE_LEDGER_DIR")]
    pub ledger_dir: Option<std::path::PathBuf>,

    /// Log format: auto (JSON unless on a terminal), json or text.
    #[arg(long, env = "TASKGATE_LOG_FORMAT", default_value = "auto")]
    pub log_format: LogFormat,

    #[command(flatten)]
    pub runtime: taskgate_shared::runtime::RuntimeArgs,
}

/// A configuration the worker refuses to start with. [`Config::from_cli`] reports every one.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Redis(#[from] RedisConfigError),
    #[error(
        "--redis-timeout-ms {timeout_ms} does not fit well inside a third of --lease-ms {lease_ms}: a renewal \
         must be answered, or time out, long before the next one is due; use at most {max_ms} ms, or a longer lease"
    )]
    TimeoutTooLong { timeout_ms: u64, lease_ms: u64, max_ms: u64 },
    #[error(transparent)]
    Override(#[from] BadOverride),
    #[error("invalid --pool {0:?}: a pool name is 1 to 32 characters of a-z, 0-9 and -")]
    BadPool(String),
    #[error(transparent)]
    Credentials(taskgate_shared::credentials::CredentialError),
}

/// A `name=ms` override that does not parse or names no served tool.
#[derive(Debug, thiserror::Error)]
#[error(
    "invalid tool override {0:?}: expected NAME=MS (NAME alone for --reuse-steps) naming a served tool, with MS >= 1 \
     (MS >= 0 for --tool-complete-within-ms)"
)]
pub struct BadOverride(pub String);

/// A per-tool override of a built-in tool's spec (`--tool-ttl-ms`, `--tool-poll-ms`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOverride {
    pub tool: String,
    pub ms: u64,
}

impl std::str::FromStr for ToolOverride {
    type Err = BadOverride;

    fn from_str(entry: &str) -> Result<Self, BadOverride> {
        match Self::parse(entry) {
            Some(parsed) if parsed.ms >= 1 => Ok(parsed),
            _ => Err(BadOverride(entry.to_owned())),
        }
    }
}

impl ToolOverride {
    /// `name=ms`, any `ms` (0 included).
    fn parse(entry: &str) -> Option<Self> {
        let (tool, ms) = entry.split_once('=')?;
        let (tool, ms) = (tool.trim(), ms.trim().parse::<u64>().ok()?);
        (!tool.is_empty()).then(|| Self { tool: tool.to_owned(), ms })
    }
}

/// The worker's configuration: checked once, at start-up.
#[derive(Debug, Clone)]
pub struct Config {
    pub redis: RedisSettings,
    pub tools: Vec<String>,
    /// The worker pool (validated: [`taskgate_shared::store::is_pool_name`]).
    pub pool: String,
    pub upstreams: Option<PathBuf>,
    /// Where per-tenant upstream credentials are opened with (none: they are off).
    pub credentials_keys: Option<std::sync::Arc<taskgate_shared::credentials::KeyRing>>,
    pub max_instances: u32,
    pub instance_idle: Duration,
    pub catalogue_ttl: Duration,
    pub tool_ttl: Vec<ToolOverride>,
    pub tool_poll: Vec<ToolOverride>,
    /// `--tool-complete-within-ms` (0 allowed).
    pub tool_complete_within: Vec<ToolOverride>,
    /// Built-in tools that opt in to step reuse (`--reuse-steps`).
    pub reuse_steps: Vec<String>,
    pub concurrency: u32,
    pub lease: Duration,
    pub max_reclaims: u32,
    pub metrics_listen: Option<SocketAddr>,
    /// This worker's lease-holder name.
    pub worker_id: String,
    pub drain_grace: Duration,
    pub cancel_grace: Duration,
    pub max_result_bytes: usize,
    pub ledger_dir: Option<PathBuf>,
    pub log_format: LogFormat,
    /// `--runtime`: with `per-core`, the worker runs as lanes (`runtime::lanes`).
    pub runtime: taskgate_shared::runtime::RuntimeSettings,
}

impl Config {
    /// Parses the process's command line and environment.
    pub fn from_env() -> Result<Self, Vec<ConfigError>> {
        Self::from_cli(Cli::parse())
    }

    /// Checks the command line, reporting every problem at once.
    pub fn from_cli(cli: Cli) -> Result<Self, Vec<ConfigError>> {
        let mut errors: Vec<ConfigError> = Vec::new();
        // Renewals go out every third of the lease; each must be settled (answered or timed
        // out) within half of that, so a slow one never overlaps the next and two in a row can
        // fail before the lease's validity runs out.
        let max_timeout_ms = cli.lease_ms / 6;
        if let Some(timeout_ms) = cli.redis.redis_timeout_ms.filter(|ms| *ms > max_timeout_ms) {
            errors.push(ConfigError::TimeoutTooLong { timeout_ms, lease_ms: cli.lease_ms, max_ms: max_timeout_ms });
        }
        let default_timeout = Duration::from_millis(2_000.min(max_timeout_ms).max(1));
        let redis = cli.redis.settings(default_timeout).map_err(|err| errors.push(err.into())).ok();
        let mut overrides = |entries: &[String]| -> Vec<ToolOverride> {
            entries
                .iter()
                .filter(|e| !e.is_empty())
                .filter_map(|e| e.parse().map_err(|err: BadOverride| errors.push(err.into())).ok())
                .collect()
        };
        let tool_ttl = overrides(&cli.tool_ttl_ms);
        let tool_poll = overrides(&cli.tool_poll_ms);
        let mut tool_complete_within = Vec::new();
        for entry in cli.tool_complete_within_ms.iter().filter(|e| !e.is_empty()) {
            match ToolOverride::parse(entry) {
                Some(parsed) => tool_complete_within.push(parsed),
                None => errors.push(BadOverride(entry.clone()).into()),
            }
        }
        if !taskgate_shared::store::is_pool_name(&cli.pool) {
            errors.push(ConfigError::BadPool(cli.pool.clone()));
        }
        let credentials_keys = cli.credentials.load().map_err(|err| errors.push(ConfigError::Credentials(err))).ok();
        let (Some(redis), true) = (redis, errors.is_empty()) else {
            return Err(errors);
        };
        let worker_id = cli.worker_id.unwrap_or_else(|| {
            let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "worker".into());
            format!("{host}-{}-{:04x}", std::process::id(), rand::random::<u16>())
        });
        Ok(Self {
            redis,
            tools: cli.tools,
            pool: cli.pool,
            upstreams: cli.upstreams,
            credentials_keys: credentials_keys.flatten().map(std::sync::Arc::new),
            max_instances: cli.max_instances,
            instance_idle: Duration::from_millis(cli.instance_idle_ms),
            catalogue_ttl: Duration::from_millis(cli.catalogue_ttl_ms),
            tool_ttl,
            tool_poll,
            tool_complete_within,
            reuse_steps: cli.reuse_steps.into_iter().map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()).collect(),
            concurrency: cli.concurrency,
            lease: Duration::from_millis(cli.lease_ms),
            max_reclaims: cli.max_reclaims,
            metrics_listen: cli.metrics_listen,
            worker_id,
            drain_grace: Duration::from_millis(cli.drain_grace_ms),
            cancel_grace: Duration::from_millis(cli.cancel_grace_ms),
            max_result_bytes: cli.max_result_bytes,
            ledger_dir: cli.ledger_dir,
            log_format: cli.log_format,
            runtime: cli.runtime.settings(),
        })
    }

    /// The specs this worker publishes: each tool's own, with the overrides applied. An
    /// override naming a tool this worker does not serve is refused.
    pub fn specs(&self, tools: &crate::packs::Registry) -> Result<Vec<taskgate_shared::tools::ToolSpec>, BadOverride> {
        let mut specs: std::collections::BTreeMap<String, _> =
            tools.iter().map(|(name, tool)| (name.clone(), tool.spec())).collect();
        for (overrides, is_ttl) in [(&self.tool_ttl, true), (&self.tool_poll, false)] {
            for entry in overrides {
                let unknown = || BadOverride(format!("{}={}", entry.tool, entry.ms));
                let spec = specs.get_mut(&entry.tool).ok_or_else(unknown)?;
                if is_ttl {
                    spec.ttl_ms = entry.ms;
                } else {
                    spec.poll_interval_ms = entry.ms;
                }
            }
        }
        for entry in &self.tool_complete_within {
            let unknown = || BadOverride(format!("{}={}", entry.tool, entry.ms));
            specs.get_mut(&entry.tool).ok_or_else(unknown)?.complete_within_ms = Some(entry.ms);
        }
        for tool in &self.reuse_steps {
            specs.get_mut(tool).ok_or_else(|| BadOverride(tool.clone()))?.reuse_steps = true;
        }
        Ok(specs.into_values().collect())
    }

    pub fn pack_options(&self) -> crate::packs::PackOptions {
        crate::packs::PackOptions { ledger_dir: self.ledger_dir.clone() }
    }

    /// How long before the lease runs out (by this worker's clock, from when the last claim or
    /// renewal was sent) a run stops trusting it: a tenth of the lease, for clock-rate drift
    /// between this host and Redis and for the tool to notice.
    pub fn lease_margin(&self) -> Duration {
        self.lease / 10
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config, Vec<ConfigError>> {
        let mut argv = vec!["taskgate-worker"];
        argv.extend_from_slice(args);
        Config::from_cli(Cli::try_parse_from(argv).expect("clap accepts the flags"))
    }

    #[test]
    fn overrides_parse_name_equals_milliseconds() {
        assert_eq!("sleep=250".parse::<ToolOverride>().unwrap(), ToolOverride { tool: "sleep".into(), ms: 250 });
        assert_eq!(" sleep = 7 ".parse::<ToolOverride>().unwrap(), ToolOverride { tool: "sleep".into(), ms: 7 });
        for bad in ["sleep", "sleep=0", "sleep=abc", "=5", "sleep=-1"] {
            assert!(bad.parse::<ToolOverride>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_completion_budget_may_be_zero() {
        let config = parse(&["--tool-complete-within-ms", "sleep=0,noop=900"]).unwrap();
        let want = [ToolOverride { tool: "sleep".into(), ms: 0 }, ToolOverride { tool: "noop".into(), ms: 900 }];
        assert_eq!(config.tool_complete_within, want);
        assert_eq!(parse(&["--tool-complete-within-ms", "sleep=-1"]).unwrap_err().len(), 1);
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let errors =
            parse(&["--namespace", "", "--redis-timeout-ms", "9000", "--tool-ttl-ms", "x", "--tool-poll-ms", "y=0"])
                .unwrap_err();
        assert_eq!(errors.len(), 4, "{errors:?}");
    }

    #[test]
    fn the_redis_timeout_follows_the_lease() {
        let short = parse(&["--lease-ms", "600"]).unwrap();
        assert_eq!(short.redis.timeout, Duration::from_millis(100));
        let default = parse(&[]).unwrap();
        assert_eq!(default.redis.timeout, Duration::from_secs(2));
        assert_eq!(default.lease_margin(), Duration::from_secs(3));
        assert!(parse(&["--worker-id", "w1"]).unwrap().worker_id == "w1");
    }

    #[test]
    fn the_pool_is_default_unless_named_and_must_be_a_short_lowercase_word() {
        assert_eq!(parse(&[]).unwrap().pool, "default");
        assert_eq!(parse(&["--pool", "gpu-2"]).unwrap().pool, "gpu-2");
        for bad in ["", "GPU", "gpu pool", "{s00}", &"x".repeat(33)] {
            let errors = parse(&["--pool", bad]).unwrap_err();
            assert!(matches!(errors.as_slice(), [ConfigError::BadPool(p)] if p == bad), "{bad}: {errors:?}");
        }
    }
}
