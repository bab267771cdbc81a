//! The gateway's Prometheus families, next to the shared task and Redis families. A leaf: the
//! `/metrics` endpoint is served by `http::probes`.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge};
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
    tasks_created: metrics::counter_vec("taskgate_tasks_created_total", "Tasks created, by tool.", &["tool"]),
    sse_streams: metrics::gauge("taskgate_gateway_sse_streams", "Open subscriptions/listen streams."),
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
    for class in ["2xx", "4xx", "5xx"] {
        METRICS.responses.with_label_values(&[class]);
    }
    METRICS.sse_streams.set(0);
    for reason in ["overloaded", "timeout", "panic"] {
        METRICS.shed.with_label_values(&[reason]);
    }
}

/// A cancel that ended a queued or parked task at the gateway: the transition (a running task
/// is ended by its worker, which counts it).
pub(crate) fn count_cancel(outcome: taskgate_shared::store::CancelOutcome) {
    if let taskgate_shared::store::CancelOutcome::Cancelled { from, waited } = outcome {
        metrics::TASKS.transition(from.as_str(), "cancelled");
        if let Some(waited) = waited {
            metrics::TASKS.left_state(from.as_str(), waited);
        }
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

impl GatewayMetrics {
    pub(crate) fn request(&self, method: &str, outcome: Outcome, spent: Duration) {
        let labels = [method, outcome.as_str()];
        self.requests.with_label_values(&labels).inc();
        self.request_seconds.with_label_values(&labels).observe(spent.as_secs_f64());
    }

    pub(crate) fn response(&self, status: u16) {
        let class = match status {
            200..=299 => "2xx",
            300..=399 => "3xx",
            400..=499 => "4xx",
            _ => "5xx",
        };
        self.responses.with_label_values(&[class]).inc();
    }
}
