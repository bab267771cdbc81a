//! The request pipeline: every tower layer a request passes through, in one place.

use axum::Router;
use axum::body::Body;
use axum::error_handling::HandleErrorLayer;
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use axum::routing::MethodRouter;
use taskgate_shared::protocol::Method;
use tower::ServiceBuilder;
use tower_http::body::Limited;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::limit::{RequestBodyLimitLayer, ResponseBody};
use tower_http::request_id::{MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer};

use super::edge;
use crate::config::Config;
use crate::error::{Framing, GatewayError};
use crate::metrics::{METRICS, Outcome};
use crate::state::AppState;

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The routes, before any layer.
pub(crate) struct Routes {
    pub(crate) mcp: MethodRouter<AppState>,
    /// The probes, `/metrics` and the metadata.
    pub(crate) probes: Router<AppState>,
    /// `--console`'s pages and actions, when on.
    pub(crate) console: Option<Router<AppState>>,
    /// The admin API, always (every request is authenticated).
    pub(crate) admin: Router<AppState>,
    /// `POST /test/panic`, for the pipeline's own tests.
    pub(crate) test_panic: Option<MethodRouter<AppState>>,
}

/// The whole request pipeline, every route's layers in one place. A request passes, outermost
/// first, [`around_all`], then its route's stack: [`around_mcp`] for `POST /mcp` (and the test
/// route), [`around_console`] for the console, [`around_probes`] for the rest. Outside all of
/// them are the connection's own bounds (`serve/`: the head deadline, the connection cap, the
/// idle timeout and the backstop for a stalled request); inside, `POST /mcp` reads its body
/// under `--body-timeout-ms` (`transport.rs`).
pub(crate) fn pipeline(routes: Routes, config: &Config) -> Router<AppState> {
    let mut router =
        Router::new().route("/mcp", around_mcp(routes.mcp, config)).merge(around_probes(routes.probes, config));
    if let Some(console) = routes.console {
        router = router.merge(around_console(console, config));
    }
    router = router.merge(around_admin(routes.admin, config));
    if let Some(panics) = routes.test_panic {
        router = router.route("/test/panic", around_mcp(panics, config));
    }
    around_all(router)
}

/// Layers around every route, outermost first:
/// 1. a caller's `X-Request-Id` is kept only if it is short and plain (it reaches logs);
/// 2. a request without one gets a fresh id, and the response carries the id back;
/// 3. a panicking handler is answered 500 with a JSON-RPC `-32603`, not a dropped connection.
fn around_all(router: Router<AppState>) -> Router<AppState> {
    router.layer(
        ServiceBuilder::new()
            .map_request(drop_unusable_request_id)
            .layer(SetRequestIdLayer::new(REQUEST_ID, MintRequestId))
            .layer(PropagateRequestIdLayer::new(REQUEST_ID))
            .layer(CatchPanicLayer::custom(edge::panicked)),
    )
}

/// Layers around `POST /mcp` only (probes and `/metrics` stay cheap and always answer),
/// outermost first:
/// 0. the request metrics: every answer counted once here, whichever layer made it
///    ([`count`]), and a panicking handler answered below them;
/// 1. errors from the layers below become JSON-RPC answers (`edge::pipeline_error`);
/// 2. load shedding: past `--max-in-flight` requests under way on this replica, a request is
///    answered 503 with `Retry-After` at once instead of queueing (a stream counts only until
///    its headers are sent);
/// 3. `--request-timeout-ms`: a request that is not answered (or turned into a stream) in time
///    gets 504;
/// 4. `--max-body-bytes`: an announced oversize body is refused before it is read, and a
///    chunked one is cut at the limit (the transport answers both with the same 413).
fn around_mcp(route: MethodRouter<AppState>, config: &Config) -> MethodRouter<AppState> {
    let limit = config.requests.max_body_bytes;
    route.layer(
        ServiceBuilder::new()
            .layer(axum::middleware::from_fn(count))
            .layer(CatchPanicLayer::custom(edge::panicked))
            .layer(HandleErrorLayer::new(edge::pipeline_error))
            .load_shed()
            .concurrency_limit(config.requests.max_in_flight.get())
            .timeout(config.requests.timeout)
            .map_response(move |response: Response<ResponseBody<Body>>| json_body_limit(response.map(Body::new), limit))
            .layer(RequestBodyLimitLayer::new(limit))
            .map_request(|request: Request<Limited<Body>>| request.map(Body::new)),
    )
}

/// Layers around the console's routes (HTML pages, not JSON-RPC), outermost first:
/// 1. errors from the layers below become console pages (`console::pipeline_error`);
/// 2. load shedding past `--console-max-in-flight` console requests on this replica (one
///    semaphore for every console route, so a loop on one page cannot starve `/mcp` of Redis);
/// 3. a request deadline: [`console_deadline`].
///
/// The body limit and the body-read deadline are the console's form extractor's
/// (`console::form`), which refuses before any check that needs the body.
fn around_console(router: Router<AppState>, config: &Config) -> Router<AppState> {
    let max = config.console.as_ref().map_or(1, |c| c.max_in_flight.get());
    let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(max));
    router.layer(
        ServiceBuilder::new()
            .layer(HandleErrorLayer::new(crate::console::pipeline_error))
            .load_shed()
            .layer(tower::limit::GlobalConcurrencyLimitLayer::with_semaphore(permits))
            .timeout(console_deadline(config)),
    )
}

/// Layers around the admin API (JSON), outermost first: errors from the layers below as JSON
/// (`admin::pipeline_error`), then the deadline of a request that is not `/mcp`. Its bodies
/// are read by its handlers, within their own size and time bounds.
fn around_admin(router: Router<AppState>, config: &Config) -> Router<AppState> {
    router.layer(
        ServiceBuilder::new()
            .layer(HandleErrorLayer::new(crate::admin::pipeline_error))
            .timeout(console_deadline(config)),
    )
}

/// Layers around the probes, `/metrics` and the metadata: a request deadline. None of them
/// reads a body (hyper closes a connection whose body was left unread).
fn around_probes(router: Router<AppState>, config: &Config) -> Router<AppState> {
    router.layer(
        ServiceBuilder::new().layer(HandleErrorLayer::new(edge::pipeline_error)).timeout(console_deadline(config)),
    )
}

/// The deadline of a request that is not `/mcp`: a page or a probe never needs long, so
/// `--request-timeout-ms` (sized for held polls) is capped at 30 s.
pub(crate) fn console_deadline(config: &Config) -> std::time::Duration {
    config.requests.timeout.min(std::time::Duration::from_secs(30))
}

/// The body-limit layer refuses an announced oversize body with a bare 413, before the
/// transport's checks (so before Origin and media types); clients get the same JSON-RPC error a
/// chunked oversize body gets, and the request metrics count it as the transport would.
fn json_body_limit(response: Response, limit: usize) -> Response {
    let ours = response.headers().get(header::CONTENT_TYPE).is_some_and(|v| v == "application/json");
    if response.status() == StatusCode::PAYLOAD_TOO_LARGE && !ours {
        let mut response = edge::refusal(GatewayError::Framing(Framing::BodyTooLarge { limit }));
        response.extensions_mut().insert(MethodLabel::INVALID);
        return response;
    }
    response
}

/// The method label of an answered `/mcp` request, set by whoever read its body.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MethodLabel(pub(crate) &'static str);

impl MethodLabel {
    /// A request whose body was refused or could not be parsed.
    pub(crate) const INVALID: Self = Self("invalid");
}

/// Counts an answered `/mcp` request: by method label and outcome, with its latency, and by
/// status class. The label is the transport's when it read the body; otherwise (shed, timed
/// out, panicked before it was read) the `Mcp-Method` header's, from the closed set of labels.
/// Errors mark their outcome on the response (`edge::render`).
async fn count(request: Request, next: axum::middleware::Next) -> Response {
    let started = std::time::Instant::now();
    let announced = request.headers().get("mcp-method").and_then(|v| v.to_str().ok()).map(Method::label_of);
    let response = next.run(request).await;
    let method =
        response.extensions().get::<MethodLabel>().map_or(announced.unwrap_or(MethodLabel::INVALID.0), |m| m.0);
    let outcome = response.extensions().get::<Outcome>().copied().unwrap_or(Outcome::Ok);
    METRICS.request(method, outcome, started.elapsed());
    METRICS.response(response.status().as_u16());
    response
}

fn drop_unusable_request_id(mut request: Request) -> Request {
    let usable = request.headers().get(&REQUEST_ID).is_some_and(|v| usable_request_id(v.as_bytes()));
    if !usable {
        request.headers_mut().remove(&REQUEST_ID);
    }
    request
}

fn usable_request_id(value: &[u8]) -> bool {
    (1..=64).contains(&value.len()) && value.iter().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(b))
}

#[derive(Clone, Copy)]
struct MintRequestId;

impl MakeRequestId for MintRequestId {
    fn make_request_id<B>(&mut self, _: &axum::http::Request<B>) -> Option<RequestId> {
        let id = format!("req_{:016x}", rand::random::<u64>());
        HeaderValue::from_str(&id).ok().map(RequestId::new)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn request_ids_must_be_short_and_plain() {
        assert!(super::usable_request_id(b"abc-123_x.y:z"));
        assert!(!super::usable_request_id(b""));
        assert!(!super::usable_request_id(&[b'a'; 65]));
        assert!(!super::usable_request_id(b"a b"));
        assert!(!super::usable_request_id(b"a\"b"));
    }
}
