//! The load tester's command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// `tasks/get` on existing tasks.
    Get,
    /// `tools/call` that creates tasks.
    Create,
    /// Create, wait (listen or poll), answer input, reach a terminal state; some cancelled.
    Lifecycle,
    /// Many concurrent subscriptions; lag from a state change to its SSE event.
    Listen,
    /// Inline `tools/call` (no Tasks extension).
    Sync,
    /// The noisy-neighbour figure: tenant A (`--token`) queues `--backlog` tasks, then tenant B
    /// (`--neighbour-token`) runs one; B's create-to-terminal time, over `--rounds` rounds.
    Neighbour,
    /// A backlog drain: `--tasks` tasks queued while the worker (`--worker-pid`) is stopped,
    /// then it is resumed; tasks per second from the resume to the last terminal state, and
    /// Redis's CPU and commands per task (needs `--redis-url`).
    Drain,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Wait {
    /// `subscriptions/listen` on the new task.
    Listen,
    /// `tasks/get`, honouring `pollIntervalMs`.
    Poll,
}

#[derive(Debug, Clone, Parser)]
#[command(
    name = "taskgate-loadtest",
    version,
    about = "Drives MCP Tasks traffic at taskgate and reports what it measured"
)]
pub struct Config {
    /// Gateway MCP endpoints, used round-robin (comma separated).
    #[arg(long = "url", value_delimiter = ',', required = true)]
    pub urls: Vec<String>,

    #[arg(long, value_enum)]
    pub scenario: Scenario,

    /// Concurrent clients (closed loop), or the bound on requests in flight (open loop).
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,

    /// Arrivals per second: an open loop, whose latencies count from each request's intended
    /// start, so that coordinated omission cannot hide the tail. Without it, a closed loop.
    #[arg(long)]
    pub rate: Option<f64>,

    /// Measured seconds (after the warm-up).
    #[arg(long, default_value_t = 10.0)]
    pub duration_s: f64,

    /// Seconds run before measuring.
    #[arg(long, default_value_t = 1.0)]
    pub warmup_s: f64,

    /// Bearer token sent on every request.
    #[arg(long, env = "TASKGATE_LOADTEST_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    /// The tool to call (`noop`, `generate_report`, `sleep`, …).
    #[arg(long, default_value = "noop")]
    pub tool: String,

    /// The arguments of every tool call, as a JSON object (`{"bytes": 1024}` sizes `noop`'s
    /// result).
    #[arg(long, default_value = "{}", value_parser = json_object)]
    pub arguments: serde_json::Value,

    /// `clientCapabilities` of the requests that create tasks, as a JSON object. Default: the
    /// Tasks extension and elicitation.
    #[arg(long, value_parser = json_object)]
    pub client_capabilities: Option<serde_json::Value>,

    /// HTTP/2 over cleartext with prior knowledge (h2c), as proxies in front of a gateway speak
    /// it, instead of HTTP/1.1: each HTTP client multiplexes its requests on one connection.
    #[arg(long)]
    pub http2: bool,

    /// HTTP clients, used round-robin (with `--http2`, one connection each). Default: 64 for
    /// `listen`, else 1 (with HTTP/1.1 a client opens a connection per concurrent request).
    #[arg(long)]
    pub connections: Option<usize>,

    /// Local addresses the HTTP clients connect from, round-robin over the clients (on
    /// loopback: 127.0.0.2,127.0.0.3,…). Each address has its own range of ephemeral ports, about
    /// 28,000 connections to one gateway address; more concurrent streams need more addresses.
    #[arg(long, value_delimiter = ',')]
    pub source_ips: Vec<std::net::IpAddr>,

    /// How a lifecycle waits for its task.
    #[arg(long, value_enum, default_value = "listen")]
    pub wait: Wait,

    /// Share of lifecycle tasks cancelled right after creation (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub cancel_ratio: f64,

    /// Tasks created up front for `get`, and queued for `drain`.
    #[arg(long, default_value_t = 256)]
    pub tasks: usize,

    /// Bearer tokens, one per line, instead of `--token`: each `create`, `sync` or `lifecycle` operation
    /// takes the next, so the load comes from as many tenants as the file names; `get` shares
    /// its tasks out among them and has each read by its owner, in a fixed cycle.
    #[arg(long)]
    pub tokens_file: Option<PathBuf>,

    /// Send a fresh `Idempotency-Key` header with every `tools/call` (what a keyed create
    /// costs).
    #[arg(long)]
    pub idempotency_keys: bool,

    /// Tasks tenant A queues in each `neighbour` round.
    #[arg(long, default_value_t = 1_000)]
    pub backlog: usize,

    /// Rounds of `neighbour`.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,

    /// Tenant B's bearer token in `neighbour` (`--token` is tenant A's).
    #[arg(long, env = "TASKGATE_LOADTEST_NEIGHBOUR_TOKEN", hide_env_values = true)]
    pub neighbour_token: Option<String>,

    /// The worker `drain` stops while it queues, and resumes (its one worker process).
    #[arg(long)]
    pub worker_pid: Option<u32>,

    /// The deployment's namespace (`--namespace`), for `drain` to see its queues.
    #[arg(long, env = "TASKGATE_NAMESPACE", default_value = "taskgate")]
    pub namespace: String,

    /// The deployment's queue shards (`--queue-shards`), for `drain` to see every queue.
    #[arg(long, env = "TASKGATE_QUEUE_SHARDS", default_value_t = 16)]
    pub queue_shards: u16,

    /// Concurrent subscriptions for `listen`.
    #[arg(long, default_value_t = 1_000)]
    pub subscriptions: usize,

    /// Redis to read `INFO commandstats` from (commands per operation) and to benchmark.
    #[arg(long)]
    pub redis_url: Option<String>,

    /// Also run `redis-benchmark` against that Redis, in this run, and print every ratio.
    #[arg(long)]
    pub compare_redis: bool,

    /// A process whose CPU time per operation is reported, as ROLE=PID (`gateway=1234`);
    /// repeat it, and pids under one role are summed. Redis is added on its own when it runs on
    /// this machine, and the load tester always is.
    #[arg(long = "cpu-pid", value_parser = crate::cpu::parse_watched)]
    pub cpu_pids: Vec<crate::cpu::Watched>,

    /// Write the report as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,

    /// Exit non-zero if any operation failed (for CI smoke runs).
    #[arg(long)]
    pub fail_on_error: bool,
}

fn json_object(text: &str) -> Result<serde_json::Value, String> {
    match serde_json::from_str(text) {
        Ok(value @ serde_json::Value::Object(_)) => Ok(value),
        Ok(_) => Err("not a JSON object".into()),
        Err(err) => Err(err.to_string()),
    }
}

impl Config {
    pub fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.duration_s.max(0.1))
    }

    pub fn warmup(&self) -> Duration {
        Duration::from_secs_f64(self.warmup_s.max(0.0))
    }
}
