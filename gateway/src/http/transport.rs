//! `POST /mcp`: the Streamable HTTP binding of 2026-07-28. One JSON-RPC message per POST;
//! no sessions, no GET stream, no `Last-Event-ID` (both headers are ignored, never minted).

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::response::Response;
use http_body_util::BodyExt;
use serde_json::Value;
use taskgate_shared::protocol::{Incoming, Method, envelope, meta};
use taskgate_shared::telemetry::trace;
use tower_http::request_id::RequestId;
use tracing::Instrument as _;

use super::edge;
use super::stack::MethodLabel;
use crate::error::{Framing, GatewayError};
use crate::mcp;
use crate::state::AppState;

/// Answers one POST, marking the response with its method label for the request metrics
/// (counted around the route: `stack::count`).
pub(crate) async fn handle(State(state): State<AppState>, request: Request) -> Response {
    let (method, mut response) = respond(&state, request).await;
    response.extensions_mut().insert(MethodLabel(method));
    response
}

/// The request's `traceparent`: `_meta.traceparent` first, else the HTTP header; only if well
/// formed.
fn traceparent(headers: &HeaderMap, message: &Incoming<'_>) -> Option<String> {
    // Only a body that names a traceparent is read for it; `params` is read again, fully, once
    // the method is known.
    let params = message.params.filter(|raw| raw.get().contains("\"traceparent\""));
    let from_meta = params.and_then(|_| message.params().ok()).and_then(|p| meta::traceparent(p.meta));
    from_meta
        .as_deref()
        .or_else(|| headers.get("traceparent").and_then(|v| v.to_str().ok()))
        .and_then(trace::parse_traceparent)
}

/// Answers one POST; returns the method label with the response.
async fn respond(state: &AppState, request: Request) -> (&'static str, Response) {
    let (parts, body) = request.into_parts();
    let refused = |framing| (MethodLabel::INVALID.0, edge::refusal(GatewayError::Framing(framing)));
    if let Err(framing) = state.origin_policy.check(&parts.headers, parts.uri.authority().map(|a| a.as_str())) {
        return refused(framing);
    }
    if let Err(framing) = negotiate(&parts.headers) {
        return refused(framing);
    }
    let bytes = match read_body(state, body).await {
        Ok(bytes) => bytes,
        Err(framing) => return refused(framing),
    };
    let message = match envelope::parse(&bytes) {
        Ok(message) => message,
        Err(bad) => return (MethodLabel::INVALID.0, edge::render(&bad.id, Err(GatewayError::Envelope(bad.error)))),
    };
    let method = Method::label_of(&message.method);
    // Set by the pipeline's request-id layer: the caller's, if sane, else a new one.
    let request_id = parts.extensions.get::<RequestId>().and_then(|id| id.header_value().to_str().ok()).unwrap_or("");
    let span = tracing::info_span!(
        "mcp.request",
        otel.name = method,
        otel.kind = "server",
        rpc.system = "jsonrpc",
        method,
        request_id,
        tenant = tracing::field::Empty,
        task_id = tracing::field::Empty,
    );
    if let Some(parent) = traceparent(&parts.headers, &message) {
        trace::set_parent(&span, &parent);
    }
    let id = message.id.clone().unwrap_or(Value::Null);
    let response = async {
        let outcome = mcp::handle(state, &parts.headers, &message).await;
        edge::render(&id, outcome)
    }
    .instrument(span)
    .await;
    (method, response)
}

/// `Content-Type` must be JSON (415) and `Accept` must list both JSON and SSE (406).
pub(crate) fn negotiate(headers: &HeaderMap) -> Result<(), Framing> {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(media_type);
    if !content_type.is_some_and(|t| t.eq_ignore_ascii_case("application/json")) {
        return Err(Framing::UnsupportedMediaType);
    }
    let accepts = || {
        headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(media_type)
    };
    if !["application/json", "text/event-stream"].iter().all(|m| accepts().any(|a| a.eq_ignore_ascii_case(m))) {
        return Err(Framing::NotAcceptable);
    }
    Ok(())
}

/// The media type of a header value, without parameters (compared ignoring case).
fn media_type(value: &str) -> &str {
    value.split(';').next().unwrap_or_default().trim()
}

/// Reads the body within `--body-timeout-ms`. Its size is bounded by the pipeline's body-limit
/// layer, which refuses an announced oversize body before this runs. The deadline is for the
/// whole body, not tower-http's `RequestBodyTimeoutLayer`, which times the wait between frames
/// only: a body sent a byte at a time would never trip it.
async fn read_body(state: &AppState, body: Body) -> Result<bytes::Bytes, Framing> {
    match tokio::time::timeout(state.config.requests.body_timeout, body.collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(err)) => match err.into_inner().is::<http_body_util::LengthLimitError>() {
            true => Err(Framing::BodyTooLarge { limit: state.config.requests.max_body_bytes }),
            false => Err(Framing::BodyUnreadable),
        },
        Err(_) => Err(Framing::BodyTimedOut),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, HeaderValue, header};

    use super::*;

    fn headers(content_type: &str, accept: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(header::CONTENT_TYPE, HeaderValue::from_str(content_type).unwrap());
        for value in accept {
            map.append(header::ACCEPT, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn media_types_ignore_parameters_and_case() {
        let both = ["application/json", "text/event-stream"];
        assert_eq!(negotiate(&headers("Application/JSON; charset=utf-8", &both)), Ok(()));
        assert_eq!(negotiate(&headers("application/json", &["text/event-stream;q=0.9, application/json"])), Ok(()));
        assert_eq!(negotiate(&headers("text/plain", &both)), Err(Framing::UnsupportedMediaType));
        assert_eq!(negotiate(&headers("application/jsonx", &both)), Err(Framing::UnsupportedMediaType));
        assert_eq!(negotiate(&headers("application/json", &["*/*"])), Err(Framing::NotAcceptable));
        assert_eq!(negotiate(&headers("application/json", &["application/json"])), Err(Framing::NotAcceptable));
    }
}
