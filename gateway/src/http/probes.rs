//! Kubernetes probes and the other plain GET documents. `/healthz`: the process serves HTTP.
//! `/readyz`: Redis proved usable at start and answers now, so this replica can do useful work.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use taskgate_shared::telemetry::metrics as families;

use super::edge;
use crate::metrics::METRICS;
use crate::state::AppState;

pub(crate) async fn healthz() -> &'static str {
    "ok"
}

pub(crate) async fn readyz(State(state): State<AppState>) -> (StatusCode, &'static str) {
    match state.ready().await {
        Ok(()) => (StatusCode::OK, "ready"),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

/// `GET /metrics`. Readiness is re-checked on each scrape so `taskgate_gateway_ready` is fresh.
pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    let ready = state.ready().await.is_ok();
    METRICS.ready.set(i64::from(ready));
    let mut response = families::render().into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(families::CONTENT_TYPE));
    response
}

/// RFC 9728 protected-resource metadata (404 under `--auth none`).
pub(crate) async fn resource_metadata(State(state): State<AppState>) -> Response {
    match state.challenge.as_deref() {
        Some(challenge) => edge::json(StatusCode::OK, &challenge.metadata()),
        None => edge::json(StatusCode::NOT_FOUND, &json!({"error": "no authorization is configured"})),
    }
}

/// Only routed under the hidden `--test-routes` flag.
pub(crate) async fn panic_for_tests() -> Response {
    panic!("deliberate panic from the test route")
}
