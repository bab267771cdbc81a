//! `POST /mcp`: the Streamable HTTP binding of 2026-07-28. One JSON-RPC message per POST;
//! no sessions, no GET stream, no `Last-Event-ID` (both headers are ignored, never minted).

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, Limited};
use serde_json::Value;
use taskgate_shared::protocol::{RpcError, envelope};

use super::reply;
use crate::AppState;
use crate::mcp;

pub(crate) async fn handle(State(state): State<AppState>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    if let Err((status, err)) = state.origin_policy.check(&parts.headers, parts.uri.authority().map(|a| a.as_str())) {
        return reply::error(status, &Value::Null, &err);
    }
    if let Err((status, err)) = negotiate(&parts.headers) {
        return reply::error(status, &Value::Null, &err);
    }
    let bytes = match read_body(&state, &parts.headers, body).await {
        Ok(bytes) => bytes,
        Err((status, err)) => return reply::error(status, &Value::Null, &err),
    };
    let message = match envelope::parse(&bytes) {
        Ok(message) => message,
        Err(bad) => return reply::rpc_error(&bad.id, &bad.error, reply::Stage::Envelope),
    };
    let principal = match state.auth.authenticate(&parts.headers).await {
        Ok(principal) => principal,
        Err(err) => {
            tracing::info!(reason = ?err, "request refused by authentication");
            let id = message.id.clone().unwrap_or(Value::Null);
            return match &state.challenge {
                Some(challenge) => challenge.respond(&err, &id),
                None => reply::error(StatusCode::UNAUTHORIZED, &id, &RpcError::internal()),
            };
        }
    };
    if message.is_notification() {
        // Core defines no client-to-server notifications over HTTP; accepting is all there is.
        return StatusCode::ACCEPTED.into_response();
    }
    mcp::handle(&state, &parts.headers, principal, message).await
}

/// `Content-Type` must be JSON (415) and `Accept` must list both JSON and SSE (406).
fn negotiate(headers: &HeaderMap) -> Result<(), (StatusCode, RpcError)> {
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
