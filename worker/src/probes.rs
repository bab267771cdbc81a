//! The worker's small HTTP listener (`--metrics-listen`): `/metrics`, `/healthz` (the process
//! serves) and `/readyz` (Redis proved usable at start, answers now, and the worker is not
//! draining). The backlog gauges are
//! read from Redis on each scrape.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use taskgate_shared::telemetry::metrics;

use crate::metrics::METRICS;
use crate::runtime::Shared;

/// Serves until the process ends. A bind failure is fatal: the operator asked for the listener.
pub(crate) async fn serve(shared: Arc<Shared>, listener: tokio::net::TcpListener) {
    metrics::init();
    METRICS.slots.set(i64::from(shared.config.concurrency));
    let app = Router::new()
        .route("/metrics", get(scrape))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(shared);
    if let Err(err) = axum::serve(listener, app).await {
        tracing::error!(error = %err, "the metrics listener failed");
    }
}

async fn is_ready(shared: &Shared) -> bool {
    !shared.stop_claiming.is_cancelled()
        && shared.redis_usable.load(std::sync::atomic::Ordering::Relaxed)
        && shared.store.ping().await.is_ok()
}

async fn readyz(State(shared): State<Arc<Shared>>) -> (StatusCode, &'static str) {
    match is_ready(&shared).await {
        true => (StatusCode::OK, "ready"),
        false => (StatusCode::SERVICE_UNAVAILABLE, "not ready"),
    }
}

async fn scrape(State(shared): State<Arc<Shared>>) -> Response {
    METRICS.ready.set(i64::from(is_ready(&shared).await));
    // Tasks held, not semaphore permits: the delivery reader holds free permits while it waits.
    METRICS.slots_busy.set(shared.held.len() as i64);
    match shared.store.backlog(shared.config.redis.queue_shards, &shared.config.pool).await {
        Ok(backlog) => {
            let pool = shared.config.pool.as_str();
            METRICS.queue_depth.with_label_values(&[pool]).set(backlog.depth as i64);
            let age_ms = backlog.oldest_ms.map_or(0, |oldest| taskgate_shared::task::now_ms().saturating_sub(oldest));
            METRICS.queue_oldest_age.with_label_values(&[pool]).set(age_ms as f64 / 1000.0);
        }
        // The gauges keep their last value; the failure shows in taskgate_redis_errors_total.
        Err(err) => tracing::warn!(error = %err, "reading the backlog for /metrics failed"),
    }
    let mut response = metrics::render().into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(metrics::CONTENT_TYPE));
    response
}
