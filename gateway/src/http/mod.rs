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

/// The gateway's router. `GET`/`DELETE /mcp` get axum's 405 with `Allow: POST`; any other path
/// is 404.
pub fn router(state: AppState) -> Router {
    let mcp = stack::around_mcp(post(transport::handle), &state.config);
    let probes = Router::new()
        .route("/healthz", get(probes::healthz))
        .route("/readyz", get(probes::readyz))
        .route("/metrics", get(probes::metrics))
        .route("/.well-known/oauth-protected-resource", get(probes::resource_metadata))
        .route("/.well-known/oauth-protected-resource/{*path}", get(probes::resource_metadata));
    let mut router = Router::new().route("/mcp", mcp).merge(stack::around_probes(probes, &state.config));
    if state.config.console.is_some() {
        router = router.merge(stack::around_console(crate::console::routes(), &state.config));
    }
    if state.config.test_routes {
        // Hidden flag, for the black-box tests of the pipeline: a handler that panics.
        let panics = stack::around_mcp(post(probes::panic_for_tests), &state.config);
        router = router.route("/test/panic", panics);
    }
    stack::around_all(router.with_state(state))
}
