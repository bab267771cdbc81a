//! The HTTP surface: `POST /mcp`, the probes, and the connections they arrive on. Everything
//! HTTP-specific (statuses, headers, SSE framing, timeouts) is decided in this module and in
//! `crate::error`; the MCP layer below sees parsed messages only.

mod edge;
mod probes;
mod serve;
mod stack;
pub(crate) mod transport;

use axum::Router;
use axum::routing::{get, post};

pub(crate) use serve::serve;

use crate::state::AppState;

/// The gateway's router: the routes, then [`stack::pipeline`] around them. `GET`/`DELETE /mcp`
/// get axum's 405 with `Allow: POST`; any other path is 404.
pub fn router(state: AppState) -> Router {
    let probes = Router::new()
        .route("/healthz", get(probes::healthz))
        .route("/readyz", get(probes::readyz))
        .route("/metrics", get(probes::metrics))
        .route("/.well-known/oauth-protected-resource", get(probes::resource_metadata))
        .route("/.well-known/oauth-protected-resource/{*path}", get(probes::resource_metadata));
    let routes = stack::Routes {
        mcp: post(transport::handle),
        probes,
        console: state.config.console.is_some().then(crate::console::routes),
        admin: crate::admin::routes(),
        // Hidden flag, for the black-box tests of the pipeline: a handler that panics.
        test_panic: state.config.test_routes.then(|| post(probes::panic_for_tests)),
    };
    stack::pipeline(routes, &state.config).with_state(state)
}
