//! Kubernetes probes. `/healthz`: the process serves HTTP. `/readyz`: Redis answers, so this
//! replica can do useful work.

use axum::extract::State;
use axum::http::StatusCode;

use crate::AppState;

pub(crate) async fn healthz() -> &'static str {
    "ok"
}

pub(crate) async fn readyz(State(state): State<AppState>) -> (StatusCode, &'static str) {
    if state.shutting_down() {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down");
    }
    match state.store.ping().await {
        Ok(()) => (StatusCode::OK, "ready"),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "redis unavailable"),
    }
}

/// RFC 9728 protected-resource metadata (404 under `--auth none`).
pub(crate) async fn resource_metadata(State(state): State<AppState>) -> axum::response::Response {
    crate::auth::protected_resource_metadata(state.challenge.as_deref())
}
