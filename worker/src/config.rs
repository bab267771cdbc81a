//! The worker's command line, with `TASKGATE_*` environment fallbacks.

use std::time::Duration;

use clap::Parser;
use taskgate_shared::telemetry::LogFormat;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "taskgate-worker",
    version,
    about = "taskgate worker: claims tasks through fenced leases and runs the tools"
)]
pub struct Config {
    /// Redis URL.
    #[arg(long, env = "TASKGATE_REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    pub redis_url: String,

    /// Prefix of every Redis key and channel (must match the gateways').
    #[arg(long, env = "TASKGATE_NAMESPACE", default_value = "taskgate")]
    pub namespace: String,

    /// Tool packs to serve, comma separated (`demo`, `conformance`); empty for none.
    #[arg(long, env = "TASKGATE_TOOLS", value_delimiter = ',', default_value = "demo")]
    pub tools: Vec<String>,

    /// Upstream MCP servers whose tools this worker serves: a TOML file of `[[upstream]]`
    /// tables, or a desktop client's `mcpServers` JSON (see docs/upstreams.md).
    #[arg(long, env = "TASKGATE_UPSTREAMS")]
    pub upstreams: Option<std::path::PathBuf>,

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

    /// Tools run at once by this worker.
    #[arg(long, env = "TASKGATE_CONCURRENCY", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub concurrency: u32,

    /// Lease duration in milliseconds; renewed about every third of it.
    #[arg(long, env = "TASKGATE_LEASE_MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(300..))]
    pub lease_ms: u64,

    /// Number of dispatch-queue shards (must match the gateways').
    #[arg(long, env = "TASKGATE_QUEUE_SHARDS", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub queue_shards: u16,

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

    /// Timeout of each Redis command and connection attempt, in milliseconds. Must fit well
    /// inside a third of the lease (at most lease/6); by default 2000, or lease/6 when smaller.
    #[arg(long, env = "TASKGATE_REDIS_TIMEOUT_MS")]
    pub redis_timeout_ms: Option<u64>,

    /// Directory where the demo `ledger` tool appends one line per step, a side effect outside
    /// Redis that shows whether two runs of one task ever overlapped (unset: `ledger` refuses).
    #[arg(long, env = "TASKGATE_LEDGER_DIR")]
    pub ledger_dir: Option<std::path::PathBuf>,

    /// Log format: auto (JSON unless on a terminal), json or text.
    #[arg(long, env = "TASKGATE_LOG_FORMAT", default_value = "auto")]
    pub log_format: LogFormat,
}

/// A configuration the worker refuses to start with.
#[derive(Debug, thiserror::Error)]
#[error(
    "--redis-timeout-ms {timeout_ms} does not fit well inside a third of --lease-ms {lease_ms}: a renewal \
     must be answered, or time out, long before the next one is due; use at most {max_ms} ms, or a longer lease"
)]
pub struct TimeoutTooLong {
    pub timeout_ms: u64,
    pub lease_ms: u64,
    pub max_ms: u64,
}

/// A `name=ms` override that does not parse or names no served tool.
#[derive(Debug, thiserror::Error)]
#[error("invalid tool override {0:?}: expected NAME=MS naming a served tool, with MS >= 1")]
pub struct BadOverride(pub String);

impl Config {
    /// The specs this worker publishes: each tool's own, with the overrides applied.
    pub fn specs(&self, tools: &crate::packs::Registry) -> Result<Vec<taskgate_shared::tools::ToolSpec>, BadOverride> {
        let mut specs: std::collections::BTreeMap<String, _> =
            tools.iter().map(|(name, tool)| (name.clone(), tool.spec())).collect();
        for (overrides, is_ttl) in [(&self.tool_ttl_ms, true), (&self.tool_poll_ms, false)] {
            for entry in overrides.iter().filter(|e| !e.is_empty()) {
                let parsed = entry.split_once('=').and_then(|(n, ms)| Some((n.trim(), ms.trim().parse::<u64>().ok()?)));
                let Some((name, ms)) = parsed.filter(|(_, ms)| *ms >= 1) else {
                    return Err(BadOverride(entry.clone()));
                };
                let spec = specs.get_mut(name).ok_or_else(|| BadOverride(entry.clone()))?;
                if is_ttl {
                    spec.ttl_ms = ms;
                } else {
                    spec.poll_interval_ms = ms;
                }
            }
        }
        Ok(specs.into_values().collect())
    }

    pub fn pack_options(&self) -> crate::packs::PackOptions {
        crate::packs::PackOptions { ledger_dir: self.ledger_dir.clone() }
    }

    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    pub fn catalogue_ttl(&self) -> Duration {
        Duration::from_millis(self.catalogue_ttl_ms)
    }

    pub fn drain_grace(&self) -> Duration {
        Duration::from_millis(self.drain_grace_ms)
    }

    pub fn cancel_grace(&self) -> Duration {
        Duration::from_millis(self.cancel_grace_ms)
    }

    /// The Redis command timeout: as given, or 2 s, or a sixth of the lease when that is less.
    pub fn redis_timeout(&self) -> Duration {
        Duration::from_millis(self.redis_timeout_ms.unwrap_or(2_000).min(self.max_redis_timeout_ms()).max(1))
    }

    /// Renewals go out every third of the lease; each must be settled (answered or timed out)
    /// within half of that, so a slow one never overlaps the next and two in a row can fail
    /// before the lease's validity runs out.
    fn max_redis_timeout_ms(&self) -> u64 {
        self.lease_ms / 6
    }

    /// Checks what clap cannot: how the flags fit together.
    pub fn validate(&self) -> Result<(), TimeoutTooLong> {
        match self.redis_timeout_ms {
            Some(timeout_ms) if timeout_ms > self.max_redis_timeout_ms() => {
                Err(TimeoutTooLong { timeout_ms, lease_ms: self.lease_ms, max_ms: self.max_redis_timeout_ms() })
            }
            _ => Ok(()),
        }
    }

    /// How long before the lease runs out (by this worker's clock, from when the last claim or
    /// renewal was sent) a run stops trusting it: a tenth of the lease, for clock-rate drift
    /// between this host and Redis and for the tool to notice.
    pub fn lease_margin(&self) -> Duration {
        self.lease() / 10
    }

    pub fn worker_id(&self) -> String {
        self.worker_id.clone().unwrap_or_else(|| {
            let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "worker".into());
            format!("{host}-{}-{:04x}", std::process::id(), rand::random::<u16>())
        })
    }
}
