//! Prometheus families both processes export, registered in the process's default registry
//! (the gateway and the worker add their own next to them). Names follow the Prometheus
//! conventions: `taskgate_` prefix, the unit in the name, `_total` on counters. Label values are
//! drawn from closed sets (methods, states, tool names of the catalogue, command names), never
//! from client input.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{
    Encoder as _, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, TextEncoder,
};

/// Buckets for request and command latencies (seconds).
pub const LATENCY_BUCKETS: &[f64] =
    &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// Buckets for how long tasks take or wait (seconds): a human may answer after hours.
pub const TASK_BUCKETS: &[f64] =
    &[0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0, 86400.0];

/// A counter family, registered. Definitions are static, so a failure is a bug caught by tests.
pub fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let family = IntCounterVec::new(Opts::new(name, help), labels).expect("a valid counter definition");
    prometheus::register(Box::new(family.clone())).expect("each family registers once");
    family
}

pub fn counter(name: &str, help: &str) -> IntCounter {
    let counter = IntCounter::new(name, help).expect("a valid counter definition");
    prometheus::register(Box::new(counter.clone())).expect("each family registers once");
    counter
}

pub fn gauge(name: &str, help: &str) -> IntGauge {
    let gauge = IntGauge::new(name, help).expect("a valid gauge definition");
    prometheus::register(Box::new(gauge.clone())).expect("each family registers once");
    gauge
}

pub fn gauge_vec(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let family = IntGaugeVec::new(Opts::new(name, help), labels).expect("a valid gauge definition");
    prometheus::register(Box::new(family.clone())).expect("each family registers once");
    family
}

pub fn histogram_vec(name: &str, help: &str, labels: &[&str], buckets: &[f64]) -> HistogramVec {
    let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
    let family = HistogramVec::new(opts, labels).expect("a valid histogram definition");
    prometheus::register(Box::new(family.clone())).expect("each family registers once");
    family
}

/// The task lifecycle, counted by whichever process made each transition.
pub struct TaskMetrics {
    transitions: IntCounterVec,
    state_seconds: HistogramVec,
}

pub static TASKS: LazyLock<TaskMetrics> = LazyLock::new(|| TaskMetrics {
    transitions: counter_vec(
        "taskgate_task_transitions_total",
        "Task state transitions made by this process (from \"none\" at creation).",
        &["from", "to"],
    ),
    state_seconds: histogram_vec(
        "taskgate_task_state_duration_seconds",
        "Time a task spent in a state, observed when it left it (queued: from enqueue to claim).",
        &["state"],
        TASK_BUCKETS,
    ),
});

impl TaskMetrics {
    pub fn transition(&self, from: &str, to: &str) {
        self.transitions.with_label_values(&[from, to]).inc();
    }

    pub fn left_state(&self, state: &str, spent: Duration) {
        self.state_seconds.with_label_values(&[state]).observe(spent.as_secs_f64());
    }
}

/// Every Redis command this process sends, by command (`script:<name>` for a script).
pub struct RedisMetrics {
    seconds: HistogramVec,
    errors: IntCounterVec,
    failovers: IntCounter,
    stale_primaries: IntCounter,
}

pub static REDIS: LazyLock<RedisMetrics> = LazyLock::new(|| RedisMetrics {
    seconds: histogram_vec(
        "taskgate_redis_command_duration_seconds",
        "Redis round trips by command, including blocking reads.",
        &["command"],
        LATENCY_BUCKETS,
    ),
    errors: counter_vec(
        "taskgate_redis_errors_total",
        "Redis commands that failed (an error reply, a timeout or a lost connection).",
        &["command"],
    ),
    failovers: counter(
        "taskgate_redis_failovers_total",
        "Behind Sentinel: times the primary was found at another address than the one before.",
    ),
    stale_primaries: counter(
        "taskgate_redis_stale_primaries_refused_total",
        "Behind Sentinel: asks whose best answer named a primary under an older configuration epoch than \
         seen (a sentinel that missed a failover), which was not followed.",
    ),
});

impl RedisMetrics {
    /// Behind Sentinel, the primary was found at another address than before.
    pub fn failover(&self) {
        self.failovers.inc();
    }

    /// Behind Sentinel, a primary named under an older configuration epoch was not followed.
    pub fn stale_primary_refused(&self) {
        self.stale_primaries.inc();
    }

    /// How many such changes this process has seen.
    pub fn failovers_seen(&self) -> u64 {
        self.failovers.get()
    }

    pub fn observe(&self, command: &str, spent: Duration, failed: bool) {
        self.seconds.with_label_values(&[command]).observe(spent.as_secs_f64());
        if failed {
            self.errors.with_label_values(&[command]).inc();
        }
    }
}

/// The pools of dedicated Redis connections (blocking reads, subscriptions), by pool. A process
/// may hold several pools of one name (one per runtime, `--runtime per-core`): the gauges are
/// their sums.
pub struct PoolMetrics {
    /// The last status of each pool instance: (max, in use, idle).
    instances: std::sync::Mutex<std::collections::HashMap<(&'static str, usize), [usize; 3]>>,
    max: IntGaugeVec,
    connections: IntGaugeVec,
    checkout_seconds: HistogramVec,
    waits: IntCounterVec,
    errors: IntCounterVec,
}

pub static POOLS: LazyLock<PoolMetrics> = LazyLock::new(|| PoolMetrics {
    instances: std::sync::Mutex::default(),
    max: gauge_vec("taskgate_redis_pool_max_connections", "The most connections a pool may hold.", &["pool"]),
    connections: gauge_vec(
        "taskgate_redis_pool_connections",
        "Connections a pool holds, lent (in_use) or waiting to be lent (idle).",
        &["pool", "state"],
    ),
    checkout_seconds: histogram_vec(
        "taskgate_redis_pool_checkout_duration_seconds",
        "Time to get a connection from a pool, including opening it or waiting for one.",
        &["pool"],
        LATENCY_BUCKETS,
    ),
    waits: counter_vec(
        "taskgate_redis_pool_waits_total",
        "Checkouts that found every connection of the pool lent and had to wait.",
        &["pool"],
    ),
    errors: counter_vec(
        "taskgate_redis_pool_errors_total",
        "Pool failures: open (a connection could not be opened), recycle (one handed back failed \
         its health check and was closed), exhausted (no connection was handed back in time), timeout.",
        &["pool", "kind"],
    ),
});

impl PoolMetrics {
    /// A number that tells this pool instance's status from other pools of its name.
    pub fn instance() -> usize {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    pub fn status(&self, pool: &'static str, instance: usize, max: usize, size: usize, idle: usize) {
        let [max, in_use, idle] = {
            // Nothing panics under this lock; a poisoned one still holds sound figures.
            let mut instances = self.instances.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            instances.insert((pool, instance), [max, size.saturating_sub(idle), idle]);
            instances
                .iter()
                .filter(|((name, _), _)| *name == pool)
                .fold([0; 3], |sum, (_, one)| [sum[0] + one[0], sum[1] + one[1], sum[2] + one[2]])
        };
        let gauge = |value: usize| i64::try_from(value).unwrap_or(i64::MAX);
        self.max.with_label_values(&[pool]).set(gauge(max));
        self.connections.with_label_values(&[pool, "in_use"]).set(gauge(in_use));
        self.connections.with_label_values(&[pool, "idle"]).set(gauge(idle));
    }

    pub fn checkout(&self, pool: &str, spent: Duration, waited: bool) {
        self.checkout_seconds.with_label_values(&[pool]).observe(spent.as_secs_f64());
        if waited {
            self.waits.with_label_values(&[pool]).inc();
        }
    }

    pub fn error(&self, pool: &str, kind: &str) {
        self.errors.with_label_values(&[pool, kind]).inc();
    }
}

/// Registers the shared families (their first use would otherwise).
pub fn init() {
    LazyLock::force(&TASKS);
    // A family with no series is not exposed at all; this one should be visible at zero.
    REDIS.errors.with_label_values(&["PING"]);
    for pool in ["blocking", "pubsub"] {
        POOLS.waits.with_label_values(&[pool]);
        for kind in ["open", "recycle", "exhausted"] {
            POOLS.errors.with_label_values(&[pool, kind]);
        }
    }
}

/// The default registry in the Prometheus text format.
pub fn render() -> String {
    let mut out = Vec::new();
    // Encoding into a Vec cannot fail for the text format.
    let _ = TextEncoder::new().encode(&prometheus::gather(), &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_render_with_conventional_names() {
        TASKS.transition("none", "working");
        TASKS.left_state("input_required", Duration::from_secs(3));
        REDIS.observe("HMGET", Duration::from_micros(300), true);
        let text = render();
        assert!(text.contains("taskgate_task_transitions_total{from=\"none\",to=\"working\"} 1"), "{text}");
        assert!(text.contains("taskgate_task_state_duration_seconds_count{state=\"input_required\"} 1"));
        assert!(text.contains("taskgate_redis_errors_total{command=\"HMGET\"} 1"));
        assert!(text.contains("taskgate_redis_command_duration_seconds_bucket{command=\"HMGET\",le=\"0.0005\"} 1"));
    }
}
