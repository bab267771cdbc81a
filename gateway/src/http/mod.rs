//! The HTTP surface: `POST /mcp`, probes, and nothing else.

mod guard;
mod mirror;
mod probes;
pub(crate) mod reply;
pub(crate) mod transport;

use axum::Router;
use axum::routing::{get, post};

pub(crate) use guard::OriginPolicy;
pub(crate) use mirror::{check as check_mirrored_headers, check_params as check_param_headers};

use crate::AppState;

/// The gateway's router. `GET`/`DELETE /mcp` get axum's 405 with `Allow: POST`; any other path
/// is 404.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/mcp", post(transport::handle))
        .route("/healthz", get(probes::healthz))
        .route("/readyz", get(probes::readyz))
        .route("/metrics", get(crate::metrics::serve))
        .route("/.well-known/oauth-protected-resource", get(probes::resource_metadata))
        .route("/.well-known/oauth-protected-resource/{*path}", get(probes::resource_metadata))
        .with_state(state)
}
