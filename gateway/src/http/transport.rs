//! `POST /mcp`: the Streamable HTTP binding of 2026-07-28. One JSON-RPC message per POST;
//! no sessions, no GET stream, no `Last-Event-ID` (both headers are ignored, never minted).

use axum::body::Body;
use axum::extract::{Request, State};
use std::time::Instant;

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, Limited};
use serde_json::Value;
use taskgate_shared::protocol::{Incoming, RpcError, envelope};
use taskgate_shared::telemetry::trace;
use tracing::Instrument as _;

use super::reply;
use crate::AppState;
use crate::mcp;
use crate::metrics::{self, METRICS, Outcome};

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

pub(crate) async fn handle(State(state): State<AppState>, request: Request) -> Response {
    let started = Instant::now();
    let request_id = request_id(request.headers());
    let (method, mut response) = respond(&state, &request_id, request).await;
    let outcome = match response.extensions().get::<Outcome>() {
        Some(outcome) => *outcome,
        None if response.status().is_server_error() => Outcome::ServerError,
        None if response.status().is_client_error() => Outcome::ClientError,
        None => Outcome::Ok,
    };
    METRICS.request(method, outcome, started.elapsed());
    METRICS.response(response.status().as_u16());
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    response
}

/// The request's id for logs: a sane `X-Request-Id` from the caller (or its load balancer), else
/// a new one.
fn request_id(headers: &HeaderMap) -> String {
    headers
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| (1..=64).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b)))
        .map_or_else(|| format!("req_{:016x}", rand::random::<u64>()), str::to_owned)
}

/// The request's `traceparent`: `_meta.traceparent` first, else the HTTP header; only if well
/// formed.
fn traceparent(headers: &HeaderMap, message: &Incoming) -> Option<String> {
    let from_meta = message.params.as_ref().and_then(|p| p.get("_meta")).and_then(|m| m.get("traceparent"));
    from_meta
        .and_then(Value::as_str)
        .or_else(|| headers.get("traceparent").and_then(|v| v.to_str().ok()))
        .and_then(trace::parse_traceparent)
}

/// Answers one POST; returns the method label with the response.
async fn respond(state: &AppState, request_id: &str, request: Request) -> (&'static str, Response) {
    let (parts, body) = request.into_parts();
    let refused = |response| ("invalid", response);
    if let Err((status, err)) = state.origin_policy.check(&parts.headers, parts.uri.authority().map(|a| a.as_str())) {
        return refused(reply::error(status, &Value::Null, &err));
    }
    if let Err((status, err)) = negotiate(&parts.headers) {
        return refused(reply::error(status, &Value::Null, &err));
    }
    let bytes = match read_body(state, &parts.headers, body).await {
        Ok(bytes) => bytes,
        Err((status, err)) => return refused(reply::error(status, &Value::Null, &err)),
    };
    let message = match envelope::parse(&bytes) {
        Ok(message) => message,
        Err(bad) => return refused(reply::rpc_error(&bad.id, &bad.error, reply::Stage::Envelope)),
    };
    let method = metrics::method_label(&message.method);
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
    let response = async {
        let principal = match state.auth.authenticate(&parts.headers).await {
            Ok(principal) => principal,
            Err(err) => {
                tracing::info!(reason = err.label(), "request refused by authentication");
                METRICS.auth_failures.with_label_values(&[err.label()]).inc();
                let id = message.id.clone().unwrap_or(Value::Null);
                return match &state.challenge {
                    Some(challenge) => challenge.respond(&err, &id),
                    None => reply::error(StatusCode::UNAUTHORIZED, &id, &RpcError::internal()),
                };
            }
        };
        tracing::Span::current().record("tenant", principal.tenant.as_str());
        if message.is_notification() {
            // Core defines no client-to-server notifications over HTTP; accepting is all there is.
            return StatusCode::ACCEPTED.into_response();
        }
        mcp::handle(state, &parts.headers, principal, message).await
    }
    .instrument(span)
    .await;
    (method, response)
}

/// `Content-Type` must be JSON (415) and `Accept` must list both JSON and SSE (406).
pub(crate) fn negotiate(headers: &HeaderMap) -> Result<(), (StatusCode, RpcError)> {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(media_type);
    if content_type.as_deref() != Some("application/json") {
        let err = RpcError::invalid_request("Content-Type must be application/json");
        return Err((StatusCode::UNSUPPORTED_MEDIA_TYPE, err));
    }
    let accepts: Vec<String> = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(media_type)
        .collect();
    if !["application/json", "text/event-stream"].iter().all(|m| accepts.iter().any(|a| a == m)) {
        let err = RpcError::invalid_request("Accept must list both application/json and text/event-stream");
        return Err((StatusCode::NOT_ACCEPTABLE, err));
    }
    Ok(())
}

/// The media type of a header value, without parameters, lowercased.
fn media_type(value: &str) -> String {
    value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase()
}

/// Reads at most `max_body_bytes` within `body_timeout`.
async fn read_body(state: &AppState, headers: &HeaderMap, body: Body) -> Result<bytes::Bytes, (StatusCode, RpcError)> {
    let limit = state.config.max_body_bytes;
    let too_large = || {
        (StatusCode::PAYLOAD_TOO_LARGE, RpcError::parse_error(format!("request body exceeds the {limit}-byte limit")))
    };
    // Refuse an announced oversize body before reading any of it.
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(too_large());
    }
    match tokio::time::timeout(state.config.body_timeout(), Limited::new(body, limit).collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(err)) if err.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Ok(Err(_)) => Err((StatusCode::BAD_REQUEST, RpcError::parse_error("the request body could not be read"))),
        Err(_) => {
            Err((StatusCode::REQUEST_TIMEOUT, RpcError::parse_error("the request body was not received in time")))
        }
    }
}
