//! The gateway's Prometheus families, next to the shared task and Redis families. A leaf: the
//! `/metrics` endpoint is served by `http::probes`.

use std::sync::{LazyLock, OnceLock};
use std::time::Duration;

use prometheus::{Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge};
use taskgate_shared::protocol::Method;
use taskgate_shared::telemetry::metrics::{self, LATENCY_BUCKETS};

pub(crate) struct GatewayMetrics {
    requests: IntCounterVec,
    request_seconds: HistogramVec,
    responses: IntCounterVec,
    pub(crate) auth_failures: IntCounterVec,
    pub(crate) rate_limited: IntCounterVec,
    pub(crate) held_polls: IntCounterVec,
    pub(crate) tasks_created: IntCounterVec,
    pub(crate) sse_streams: IntGauge,
    pub(crate) sse_lag: Histogram,
    pub(crate) sse_coalesced: IntCounter,
    pub(crate) ready: IntGauge,
    pub(crate) shed: IntCounterVec,
    pub(crate) snapshot_cache_hits: IntCounter,
    pub(crate) snapshot_cache_misses: IntCounter,
    pub(crate) snapshot_cache_evictions: IntCounter,
    pub(crate) snapshot_cache_bytes: IntGauge,
    pub(crate) snapshot_cache_beacon_lag: Histogram,
    pub(crate) request_slices: IntCounterVec,
    pub(crate) request_slice_calls: IntCounter,
    pub(crate) webhook_deliveries: IntCounterVec,
    pub(crate) webhook_dead_lettered: IntCounterVec,
    pub(crate) webhook_refused: IntCounterVec,
    pub(crate) webhook_held: IntGauge,
    pub(crate) webhook_lag: Histogram,
}

pub(crate) static METRICS: LazyLock<GatewayMetrics> = LazyLock::new(|| GatewayMetrics {
    requests: metrics::counter_vec(
        "taskgate_gateway_requests_total",
        "MCP requests by JSON-RPC method and outcome (ok, client_error, server_error).",
        &["method", "outcome"],
    ),
    request_seconds: metrics::histogram_vec(
        "taskgate_gateway_request_duration_seconds",
        "Time to answer an MCP request (to the first byte of a stream).",
        &["method", "outcome"],
        LATENCY_BUCKETS,
    ),
    responses: metrics::counter_vec(
        "taskgate_gateway_http_responses_total",
        "HTTP responses to POST /mcp by status class (probes and /metrics are not counted).",
        &["status_class"],
    ),
    auth_failures: metrics::counter_vec(
        "taskgate_gateway_auth_failures_total",
        "Requests refused by authentication, by reason.",
        &["reason"],
    ),
    rate_limited: metrics::counter_vec(
        "taskgate_gateway_rate_limited_total",
        "Requests refused by a tenant limit (-31429), by limit.",
        &["limit"],
    ),
    held_polls: metrics::counter_vec(
        "taskgate_gateway_held_polls_total",
        "Early tasks/get polls held instead of refused (held), those answered early because the task \
         changed (woken), and those refused because too many were held (refused).",
        &["outcome"],
    ),
    webhook_deliveries: metrics::counter_vec(
        "taskgate_events_webhook_deliveries_total",
        "Webhook POST attempts by outcome (ok, retry, dead, gone, too_large).",
        &["outcome"],
    ),
    webhook_dead_lettered: metrics::counter_vec(
        "taskgate_events_webhook_dead_lettered_total",
        "Webhook events dead-lettered, by the last error's category.",
        &["reason"],
    ),
    webhook_refused: metrics::counter_vec(
        "taskgate_events_webhook_refused_total",
        "Callback URLs or addresses refused by the egress policy (url, address, port, not_allowed, \
         verification).",
        &["reason"],
    ),
    webhook_held: metrics::gauge(
        "taskgate_events_webhook_held",
        "Webhook subscriptions this deliverer holds a lease on.",
    ),
    webhook_lag: prometheus::register_histogram!(
        "taskgate_events_webhook_lag_seconds",
        "From a task change (Redis's clock) to the receiver's 2xx for its webhook (this \
         replica's clock), retries included.",
        LATENCY_BUCKETS.to_vec()
    )
    .expect("a valid histogram definition"),
    tasks_created: metrics::counter_vec("taskgate_tasks_created_total", "Tasks created, by tool.", &["tool"]),
    sse_streams: metrics::gauge("taskgate_gateway_sse_streams", "Open subscriptions/listen and events/stream streams."),
    request_slices: metrics::counter_vec(
        "taskgate_gateway_request_slices_total",
        "Leases of a slice of a tenant's request rate from Redis (granted, refused: the tenant is \
         at its rate, error), each admitting up to --admission-slice-ms of the rate in memory.",
        &["outcome"],
    ),
    request_slice_calls: metrics::counter(
        "taskgate_gateway_request_slice_calls_total",
        "Calls to Redis that leased request slices: one call leases for the tenant that ran dry \
         and for others of this replica whose slices were nearly done.",
    ),
    snapshot_cache_hits: metrics::counter(
        "taskgate_snapshot_cache_hits_total",
        "tasks/get answered from this replica's snapshot cache, with no Redis read.",
    ),
    snapshot_cache_misses: metrics::counter(
        "taskgate_snapshot_cache_misses_total",
        "tasks/get reads that went to Redis while the snapshot cache was on (nothing kept for the \
         caller, or its beacon not heard back in time).",
    ),
    snapshot_cache_evictions: metrics::counter(
        "taskgate_snapshot_cache_evictions_total",
        "Snapshot cache entries evicted to stay within --snapshot-cache-bytes.",
    ),
    snapshot_cache_bytes: metrics::gauge(
        "taskgate_snapshot_cache_bytes",
        "Bytes held by the snapshot cache (replies, keys, owners and a fixed overhead per entry).",
    ),
    snapshot_cache_beacon_lag: prometheus::register_histogram!(
        "taskgate_snapshot_cache_beacon_lag_seconds",
        "From a snapshot cache beacon being sent (a PING on the event subscription's connection) to \
         this replica handling its answer, after every message before it: the subscription's \
         delivery lag, which invalidations share.",
        LATENCY_BUCKETS.to_vec()
    )
    .expect("a valid histogram definition"),
    sse_lag: prometheus::register_histogram!(
        "taskgate_gateway_sse_notification_lag_seconds",
        "From a task change in Redis to its notification being handed to the SSE stream.",
        LATENCY_BUCKETS.to_vec()
    )
    .expect("a valid histogram definition"),
    sse_coalesced: metrics::counter(
        "taskgate_gateway_sse_coalesced_snapshots_total",
        "Task versions a slow listen client never saw because a newer snapshot replaced them.",
    ),
    ready: metrics::gauge("taskgate_gateway_ready", "1 when this replica is ready (Redis answers), else 0."),
    shed: metrics::counter_vec(
        "taskgate_gateway_requests_shed_total",
        "Requests the pipeline answered itself: overloaded (503), timeout (504) or panic (500).",
        &["reason"],
    ),
});

/// Registers every family, with the series alerts divide by at zero, so a scrape shows them all
/// from the start.
pub(crate) fn init() {
    metrics::init();
    for class in [0, 2, 3] {
        METRICS.status_class(class);
    }
    METRICS.sse_streams.set(0);
    for reason in ["overloaded", "timeout", "panic"] {
        METRICS.shed.with_label_values(&[reason]);
    }
}

/// How a request ended, for the outcome label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    ClientError,
    ServerError,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::ClientError => "client_error",
            Self::ServerError => "server_error",
        }
    }
}

const OUTCOMES: [Outcome; 3] = [Outcome::Ok, Outcome::ClientError, Outcome::ServerError];
const STATUS_CLASSES: [&str; 4] = ["2xx", "3xx", "4xx", "5xx"];
const OTHER_LABELS: [&str; 2] = ["other", "invalid"];
const METHOD_LABELS: usize = Method::ALL.len() + OTHER_LABELS.len();

type Series = (IntCounter, Histogram);

/// The series every request touches, each looked up once, when first used: `with_label_values`
/// hashes its labels, takes a read lock and clones a handle, which on every request is a lock
/// on the hot path. A series appears on `/metrics` once used, as before.
static REQUEST_SERIES: [[OnceLock<Series>; 3]; METHOD_LABELS] =
    [const { [const { OnceLock::new() }; 3] }; METHOD_LABELS];
static RESPONSE_SERIES: [OnceLock<IntCounter>; 4] = [const { OnceLock::new() }; 4];

/// Where a method label's series are kept: every method's name, `other` and `invalid`.
fn method_slot(label: &str) -> Option<usize> {
    Method::ALL
        .iter()
        .position(|m| m.name() == label)
        .or_else(|| OTHER_LABELS.iter().position(|o| *o == label).map(|i| Method::ALL.len() + i))
}

impl GatewayMetrics {
    pub(crate) fn request(&self, method: &str, outcome: Outcome, spent: Duration) {
        let labels = [method, outcome.as_str()];
        let series = |labels: [&str; 2]| {
            (self.requests.with_label_values(&labels), self.request_seconds.with_label_values(&labels))
        };
        let outcome_slot = OUTCOMES.iter().position(|o| *o == outcome).unwrap_or(0);
        let (count, seconds) = match method_slot(method) {
            Some(slot) => REQUEST_SERIES[slot][outcome_slot].get_or_init(|| series(labels)),
            // Every label the gateway passes has a slot; anything else is still counted.
            None => &series(labels),
        };
        count.inc();
        seconds.observe(spent.as_secs_f64());
    }

    fn status_class(&self, class: usize) -> &IntCounter {
        RESPONSE_SERIES[class].get_or_init(|| self.responses.with_label_values(&[STATUS_CLASSES[class]]))
    }

    pub(crate) fn response(&self, status: u16) {
        let class = match status {
            200..=299 => 0,
            300..=399 => 1,
            400..=499 => 2,
            _ => 3,
        };
        self.status_class(class).inc();
    }
}
