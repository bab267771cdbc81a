//! The worker's Prometheus families, next to the shared task and Redis families. A leaf: the
//! `--metrics-listen` server that renders them is the `probes` module.

use std::collections::HashSet;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use prometheus::{HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec};
use taskgate_shared::telemetry::metrics::{self, TASK_BUCKETS};

pub(crate) struct WorkerMetrics {
    pub(crate) leases_taken: IntCounter,
    pub(crate) leases_renewed: IntCounter,
    pub(crate) leases_expired: IntCounter,
    pub(crate) leases_reclaimed: IntCounter,
    pub(crate) fenced_refusals: IntCounter,
    tool_seconds: HistogramVec,
    pub(crate) slots: IntGauge,
    pub(crate) slots_busy: IntGauge,
    pub(crate) ready: IntGauge,
    pub(crate) queue_depth: IntGaugeVec,
    pub(crate) queue_oldest_age: prometheus::GaugeVec,
    queued_seconds: HistogramVec,
    /// The tenants `queued_seconds` has a label of its own for (at most [`TENANT_LABELS`]).
    labelled_tenants: Mutex<HashSet<String>>,
    pub(crate) released_unserved: IntCounterVec,
    pub(crate) config_mismatch: IntGauge,
    pub(crate) upstream_calls: IntCounterVec,
    pub(crate) upstream_seconds: HistogramVec,
    pub(crate) upstream_in_flight: IntGaugeVec,
    pub(crate) upstream_restarts: IntCounterVec,
    pub(crate) upstream_list_refreshes: IntCounterVec,
    pub(crate) upstream_instances: IntGaugeVec,
    pub(crate) upstream_instances_started: IntCounterVec,
    pub(crate) upstream_instances_evicted: IntCounterVec,
    pub(crate) upstream_credential_misses: IntCounterVec,
    pub(crate) upstream_credential_refreshes: IntCounterVec,
}

pub(crate) static METRICS: LazyLock<WorkerMetrics> = LazyLock::new(|| WorkerMetrics {
    leases_taken: metrics::counter("taskgate_worker_leases_taken_total", "Leases taken by claiming a task."),
    leases_renewed: metrics::counter("taskgate_worker_leases_renewed_total", "Lease renewals that held."),
    leases_expired: metrics::counter(
        "taskgate_worker_leases_expired_total",
        "Leases this worker lost before its tool finished (expired and taken by another).",
    ),
    leases_reclaimed: metrics::counter(
        "taskgate_worker_leases_reclaimed_total",
        "Expired leases of other (dead) workers that this worker's reaper reclaimed.",
    ),
    fenced_refusals: metrics::counter(
        "taskgate_worker_fenced_writes_refused_total",
        "Writes refused because this worker's fencing token was stale.",
    ),
    tool_seconds: metrics::histogram_vec(
        "taskgate_worker_tool_duration_seconds",
        "Run time of one tool execution, by tool and outcome.",
        &["tool", "outcome"],
        TASK_BUCKETS,
    ),
    slots: metrics::gauge("taskgate_worker_slots", "Tools this worker may run at once (--concurrency)."),
    slots_busy: metrics::gauge("taskgate_worker_slots_busy", "Tasks this worker is running now."),
    ready: metrics::gauge("taskgate_worker_ready", "1 when Redis answers and the worker is not draining, else 0."),
    queue_depth: {
        let gauge = IntGaugeVec::new(
            prometheus::Opts::new(
                "taskgate_queue_depth",
                "Tasks enqueued on this worker's pool and not yet claimed, over all shards (read from Redis at scrape).",
            ),
            &["pool"],
        )
        .expect("a valid gauge definition");
        prometheus::register(Box::new(gauge.clone())).expect("each family registers once");
        gauge
    },
    queue_oldest_age: {
        let gauge = prometheus::GaugeVec::new(
            prometheus::Opts::new(
                "taskgate_queue_oldest_age_seconds",
                "Age of the oldest wake-up still queued on this worker's pool (0 when none; read at scrape). Under fair \
                 dispatch a busy tenant's older task may wait longer still: see taskgate_task_queued_seconds.",
            ),
            &["pool"],
        )
        .expect("a valid gauge definition");
        prometheus::register(Box::new(gauge.clone())).expect("each family registers once");
        gauge
    },
    queued_seconds: metrics::histogram_vec(
        "taskgate_task_queued_seconds",
        "Time from enqueue (create, release, reclaim or answer) to claim, by pool and tenant (the first 32 tenants \
         this worker sees get a label of their own, the rest `_other`).",
        &["pool", "tenant"],
        TASK_BUCKETS,
    ),
    labelled_tenants: Mutex::new(HashSet::new()),
    released_unserved: metrics::counter_vec(
        "taskgate_worker_released_unserved_total",
        "Tasks this worker claimed for a tool it does not serve and released at once for another worker.",
        &["tool"],
    ),
    config_mismatch: metrics::gauge(
        "taskgate_worker_upstream_config_mismatch",
        "1 when live workers of this namespace publish upstream configurations that differ from this one's.",
    ),
    upstream_calls: metrics::counter_vec(
        "taskgate_upstream_calls_total",
        "Tool calls sent to upstream MCP servers, by server and outcome.",
        &["upstream", "outcome"],
    ),
    upstream_seconds: metrics::histogram_vec(
        "taskgate_upstream_call_duration_seconds",
        "Time from sending a tool call to an upstream server until its outcome, by server.",
        &["upstream"],
        TASK_BUCKETS,
    ),
    upstream_in_flight: {
        let gauge = IntGaugeVec::new(
            prometheus::Opts::new("taskgate_upstream_calls_in_flight", "Tool calls open to each upstream server."),
            &["upstream"],
        )
        .expect("a valid gauge definition");
        prometheus::register(Box::new(gauge.clone())).expect("each family registers once");
        gauge
    },
    upstream_restarts: metrics::counter_vec(
        "taskgate_upstream_restarts_total",
        "Reconnections to an upstream server (a stdio child started again) after it went down.",
        &["upstream"],
    ),
    upstream_list_refreshes: metrics::counter_vec(
        "taskgate_upstream_list_refreshes_total",
        "Tool listings taken again because an upstream server said its list changed.",
        &["upstream"],
    ),
    // Per-identity instances: labelled by server only (configured, so bounded), never by
    // tenant, whose number has no bound.
    upstream_instances: {
        let gauge = IntGaugeVec::new(
            prometheus::Opts::new(
                "taskgate_upstream_instances",
                "Per-identity upstream instances (a child or session per tenant or principal) alive in this worker.",
            ),
            &["upstream"],
        )
        .expect("a valid gauge definition");
        prometheus::register(Box::new(gauge.clone())).expect("each family registers once");
        gauge
    },
    upstream_instances_started: metrics::counter_vec(
        "taskgate_upstream_instances_started_total",
        "Per-identity upstream instances started, by server.",
        &["upstream"],
    ),
    upstream_instances_evicted: metrics::counter_vec(
        "taskgate_upstream_instances_stopped_total",
        "Per-identity upstream instances stopped, by server and why (lru, idle, changed).",
        &["upstream", "why"],
    ),
    upstream_credential_misses: metrics::counter_vec(
        "taskgate_upstream_credential_misses_total",
        "Calls refused because no credential was stored for the caller at a per-identity server.",
        &["upstream"],
    ),
    upstream_credential_refreshes: metrics::counter_vec(
        "taskgate_upstream_credential_refreshes_total",
        "OAuth refreshes and token exchanges of callers' upstream tokens, by server and outcome (refreshed, failed, exchanged, exchange_failed).",
        &["upstream", "outcome"],
    ),
});

/// How many tenants get a `tenant` label of their own on `taskgate_task_queued_seconds`: a bound
/// on the series one worker exports, whatever the number of tenants.
const TENANT_LABELS: usize = 32;

/// The label of every tenant past [`TENANT_LABELS`].
const OTHER_TENANTS: &str = "_other";

impl WorkerMetrics {
    /// A claimed task waited `waited` in `pool`'s queue.
    pub(crate) fn queued(&self, pool: &str, tenant: &str, waited: Duration) {
        let label = {
            let mut seen = self.labelled_tenants.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if seen.contains(tenant) || (seen.len() < TENANT_LABELS && seen.insert(tenant.to_owned())) {
                tenant
            } else {
                OTHER_TENANTS
            }
        };
        self.queued_seconds.with_label_values(&[pool, label]).observe(waited.as_secs_f64());
    }

    pub(crate) fn tool_run(&self, tool: &str, outcome: &str, spent: Duration) {
        self.tool_seconds.with_label_values(&[tool, outcome]).observe(spent.as_secs_f64());
    }
}
