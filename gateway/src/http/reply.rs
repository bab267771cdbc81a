//! Turning JSON-RPC outcomes into HTTP responses. The status of each error is decided here and
//! only here.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use taskgate_shared::protocol::{ErrorKind, RequestId, RpcError, envelope};

/// Where an error arose, which decides its HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Before the method ran: framing, routing, `_meta`, headers, capabilities.
    Envelope,
    /// Inside the method: the error is in-band.
    Method,
}

/// The HTTP status of an error (documented in the README, "HTTP status of errors").
pub(crate) fn status_of(error: &RpcError, stage: Stage) -> StatusCode {
    match error.kind {
        ErrorKind::MethodNotFound => StatusCode::NOT_FOUND,
        ErrorKind::ParseError
        | ErrorKind::InvalidRequest
        | ErrorKind::HeaderMismatch
        | ErrorKind::MissingRequiredClientCapability
        | ErrorKind::UnsupportedProtocolVersion => StatusCode::BAD_REQUEST,
        ErrorKind::InvalidParams => match stage {
            Stage::Envelope => StatusCode::BAD_REQUEST,
            // The request was well formed; the JSON-RPC error says what the method refused.
            Stage::Method => StatusCode::OK,
        },
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorKind::Application(crate::limits::RATE_LIMITED) => StatusCode::TOO_MANY_REQUESTS,
        // A tool's own error, carried in-band.
        ErrorKind::Application(_) => StatusCode::OK,
    }
}

/// A JSON body with `Content-Type: application/json`.
pub(crate) fn json(status: StatusCode, body: &Value) -> Response {
    // Serialising a `Value` cannot fail: every map key is a string.
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut response = (status, bytes).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A JSON-RPC error response, marked with its outcome for the request metrics.
pub(crate) fn error(status: StatusCode, id: &RequestId, err: &RpcError) -> Response {
    let mut response = json(status, &envelope::failure(id, err));
    let outcome = if err.kind == ErrorKind::Internal || status.is_server_error() {
        crate::metrics::Outcome::ServerError
    } else {
        crate::metrics::Outcome::ClientError
    };
    response.extensions_mut().insert(outcome);
    response
}

/// A JSON-RPC error response with the status its stage implies.
pub(crate) fn rpc_error(id: &RequestId, err: &RpcError, stage: Stage) -> Response {
    let status = status_of(err, stage);
    let mut response = error(status, id, err);
    if status == StatusCode::TOO_MANY_REQUESTS {
        let retry_ms = err.data.as_ref().and_then(|d| d.get("retryAfterMs")).and_then(Value::as_u64).unwrap_or(1_000);
        let seconds = retry_ms.div_ceil(1_000).max(1);
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}
