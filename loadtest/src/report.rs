//! The report: a table on stdout and, with `--json`, the same figures as JSON.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Percentiles {
    pub count: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Option<Self> {
        (!h.is_empty()).then(|| {
            let ms = |q: f64| h.value_at_quantile(q) as f64 / 1_000.0;
            Self {
                count: h.len(),
                p50: ms(0.5),
                p90: ms(0.9),
                p99: ms(0.99),
                p999: ms(0.999),
                max: h.max() as f64 / 1_000.0,
            }
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub scenario: String,
    pub mode: String,
    /// `HTTP/1.1`, or `HTTP/2` (cleartext, prior knowledge).
    pub http: String,
    /// HTTP clients the load was spread over.
    pub connections: usize,
    pub concurrency: usize,
    pub rate: Option<f64>,
    pub duration_s: f64,
    pub ok: u64,
    pub errors: BTreeMap<String, u64>,
    pub throughput_per_s: f64,
    pub latency_ms: Option<Percentiles>,
    pub time_to_terminal_ms: Option<Percentiles>,
    pub notification_lag_ms: Option<Percentiles>,
    /// Redis commands executed per successful operation (top-level and inside scripts).
    pub redis_commands_per_op: Option<f64>,
    pub redis_commands: BTreeMap<String, u64>,
    /// CPU microseconds per successful operation, by process role (`gateway`, `worker`,
    /// `redis`, `loadtest`…), over the measured window.
    pub cpu_us_per_op: BTreeMap<String, f64>,
    /// Cores each role kept busy over the measured window.
    pub cpu_cores: BTreeMap<String, f64>,
    /// `redis-benchmark` requests per second, same server, same run.
    pub redis_benchmark: BTreeMap<String, f64>,
    /// Redis's own CPU microseconds per request under each `redis-benchmark` test (when Redis
    /// runs on this machine): the yardstick that makes `cpu_us_per_op` comparable across
    /// machines.
    pub redis_benchmark_cpu_us_per_op: BTreeMap<String, f64>,
    /// This run's throughput over each `redis-benchmark` figure, and the gateway's CPU per
    /// operation over Redis's per request.
    pub ratios: BTreeMap<String, f64>,
}

impl Report {
    pub fn print(&self) {
        println!(
            "scenario            {} ({}, {} over {} client(s), concurrency {}{})",
            self.scenario,
            self.mode,
            self.http,
            self.connections,
            self.concurrency,
            self.rate.map(|r| format!(", {r}/s")).unwrap_or_default()
        );
        println!("duration            {:.1} s", self.duration_s);
        println!("ok                  {}", self.ok);
        println!("throughput          {:.0} ops/s", self.throughput_per_s);
        for (name, p) in [
            ("latency", &self.latency_ms),
            ("time to terminal", &self.time_to_terminal_ms),
            ("notification lag", &self.notification_lag_ms),
        ] {
            if let Some(p) = p {
                println!(
                    "{name:<20}p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  p99.9 {:.2} ms  max {:.2} ms",
                    p.p50, p.p90, p.p99, p.p999, p.max
                );
            }
        }
        if self.errors.is_empty() {
            println!("errors              none");
        }
        for (kind, n) in &self.errors {
            println!("errors              {n} × {kind}");
        }
        if let Some(per_op) = self.redis_commands_per_op {
            let top: Vec<String> = self.redis_commands.iter().map(|(c, n)| format!("{c}={n}")).collect();
            println!("redis commands/op   {per_op:.2}  ({})", top.join(" "));
        }
        if !self.cpu_us_per_op.is_empty() {
            let roles: Vec<String> = self
                .cpu_us_per_op
                .iter()
                .map(|(role, us)| format!("{role} {us:.1} ({:.2} cores)", self.cpu_cores.get(role).unwrap_or(&0.0)))
                .collect();
            println!("cpu µs/op           {}", roles.join("  "));
        }
        for (test, rps) in &self.redis_benchmark {
            match self.redis_benchmark_cpu_us_per_op.get(test) {
                Some(us) => println!("redis-benchmark     {test}: {rps:.0} req/s, redis {us:.2} cpu µs/request"),
                None => println!("redis-benchmark     {test}: {rps:.0} req/s"),
            }
        }
        for (name, ratio) in &self.ratios {
            println!("ratio               {name}: {ratio:.3}");
        }
    }
}
