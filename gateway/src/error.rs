//! The gateway's one error edge. Every way a request can fail is a [`GatewayError`]; one
//! `match` below turns each into its HTTP status, extra headers and JSON-RPC error, and one
//! function records it (log line and counter) where it is handled, never where it is built.
//!
//! The table, in words (docs/wire.md, "HTTP status of errors", says the same):
//! - framing (media types, body size and time, Origin/Host): 4xx before the body is parsed;
//! - authentication: 401/403 with an RFC 6750 challenge, `-31401`/`-31403`;
//! - envelope (JSON-RPC, method, `_meta`, mirrored headers, version, extension): 400, 404 for an
//!   unknown method;
//! - a method's own refusal: in-band, HTTP 200 (`-32602`), except internal errors (500) and
//!   capability or framing codes a tool path raises (400);
//! - an idempotency key reused for another call: 422 (as the IETF Idempotency-Key draft asks),
//!   `-32602`;
//! - a tenant limit: 429 with `Retry-After`, `-31429`;
//! - storage: 500 with a bare `-32603`, the cause in the log only;
//! - the request pipeline's own answers: 503 overloaded, 504 timed out, 500 panicked.

use std::sync::Arc;

use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use serde_json::Value;
use taskgate_shared::protocol::{ErrorKind, RpcError};
use taskgate_shared::store::{Limit, StoreError};

use crate::auth::{AuthError, Challenge};
use crate::metrics::{METRICS, Outcome};

/// Refusals decided from the HTTP framing alone, before the JSON-RPC body is parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    DuplicateOrigin,
    OriginRefused,
    HostRefused,
    UnsupportedMediaType,
    NotAcceptable,
    BodyTooLarge { limit: usize },
    BodyUnreadable,
    BodyTimedOut,
}

/// Why a request was not answered with a result.
#[derive(Debug)]
pub(crate) enum GatewayError {
    Framing(Framing),
    /// Refused by authentication, with the configured scheme's challenge for the
    /// `WWW-Authenticate` header.
    Auth {
        error: AuthError,
        challenge: Option<Arc<Challenge>>,
    },
    /// The validation ladder refused the request before its method ran.
    Envelope(RpcError),
    /// The method ran and refused: the error is in-band.
    Method(RpcError),
    RateLimited {
        limit: Limit,
        retry_after_ms: u64,
    },
    /// A `tools/call` whose idempotency key made a task for another tool, other arguments or
    /// other pre-task answers.
    KeyReused,
    Storage(StoreError),
    /// Shed because this replica has `--max-in-flight` requests under way.
    Overloaded,
    /// Not answered within `--request-timeout-ms`.
    TimedOut,
    /// A handler panicked: a bug, answered rather than dropping the connection.
    Panicked,
}

impl From<RpcError> for GatewayError {
    fn from(error: RpcError) -> Self {
        Self::Method(error)
    }
}

impl From<StoreError> for GatewayError {
    fn from(error: StoreError) -> Self {
        Self::Storage(error)
    }
}

/// What the client is told: the HTTP status, extra headers, and the JSON-RPC error.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) error: RpcError,
}

impl Answer {
    fn new(status: StatusCode, error: RpcError) -> Self {
        Self { status, headers: Vec::new(), error }
    }

    fn with_header(mut self, name: HeaderName, value: Option<HeaderValue>) -> Self {
        self.headers.extend(value.map(|v| (name, v)));
        self
    }
}

impl GatewayError {
    /// The whole mapping.
    pub(crate) fn answer(&self) -> Answer {
        match self {
            Self::Framing(framing) => framing_answer(*framing),
            Self::Auth { error: AuthError::Missing | AuthError::Invalid(_), challenge } => {
                Answer::new(StatusCode::UNAUTHORIZED, RpcError::unauthorized()).with_header(
                    header::WWW_AUTHENTICATE,
                    challenge.as_ref().and_then(|c| HeaderValue::from_str(&c.invalid_token()).ok()),
                )
            }
            Self::Auth { error: AuthError::InsufficientScope, challenge } => {
                Answer::new(StatusCode::FORBIDDEN, RpcError::forbidden()).with_header(
                    header::WWW_AUTHENTICATE,
                    challenge.as_ref().and_then(|c| HeaderValue::from_str(&c.insufficient_scope()).ok()),
                )
            }
            Self::Envelope(err) => Answer::new(status_of(err.kind, Stage::Envelope), err.clone()),
            // A tool's stored -31429 still tells the client when to come back.
            Self::Method(err) if err.kind == ErrorKind::RateLimited => {
                let retry_ms = err.data.as_ref().and_then(|d| d.get("retryAfterMs")).and_then(Value::as_u64);
                Answer::new(status_of(err.kind, Stage::Method), err.clone())
                    .with_header(header::RETRY_AFTER, Some(retry_after(retry_ms.unwrap_or(1_000))))
            }
            Self::Method(err) => Answer::new(status_of(err.kind, Stage::Method), err.clone()),
            Self::RateLimited { limit, retry_after_ms } => {
                Answer::new(StatusCode::TOO_MANY_REQUESTS, RpcError::rate_limited(limit.as_str(), *retry_after_ms))
                    .with_header(header::RETRY_AFTER, Some(retry_after(*retry_after_ms)))
            }
            Self::KeyReused => Answer::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                RpcError::invalid_params(
                    "this idempotency key was used for another call (another tool, other arguments or other \
                     inputResponses); use a new key",
                ),
            ),
            // Redis could not be reached (or has no primary now, during a failover, or a primary
            // that refuses writes for want of replicas): nothing was done that the client can
            // see, and a retry in a moment may succeed.
            Self::Storage(err) if err.is_unavailable() => Answer::new(
                StatusCode::SERVICE_UNAVAILABLE,
                RpcError::new(ErrorKind::Internal, "storage is unavailable; retry shortly"),
            )
            .with_header(header::RETRY_AFTER, Some(HeaderValue::from_static("1"))),
            Self::Storage(_) | Self::Panicked => Answer::new(StatusCode::INTERNAL_SERVER_ERROR, RpcError::internal()),
            Self::Overloaded => Answer::new(
                StatusCode::SERVICE_UNAVAILABLE,
                RpcError::new(ErrorKind::Internal, "the gateway is overloaded; retry shortly"),
            )
            .with_header(header::RETRY_AFTER, Some(HeaderValue::from_static("1"))),
            Self::TimedOut => Answer::new(
                StatusCode::GATEWAY_TIMEOUT,
                RpcError::new(ErrorKind::Internal, "the request was not answered in time"),
            ),
        }
    }

    /// The outcome label of the request metrics.
    pub(crate) fn outcome(&self) -> Outcome {
        match self {
            Self::Storage(_) | Self::Overloaded | Self::TimedOut | Self::Panicked => Outcome::ServerError,
            Self::Method(err) if err.kind == ErrorKind::Internal => Outcome::ServerError,
            Self::Framing(_)
            | Self::Auth { .. }
            | Self::Envelope(_)
            | Self::Method(_)
            | Self::RateLimited { .. }
            | Self::KeyReused => Outcome::ClientError,
        }
    }

    /// Logs and counts the error once, where it is handled. Nothing a client sent is logged:
    /// auth reasons are a closed set, storage errors are ours.
    pub(crate) fn record(&self) {
        match self {
            Self::Auth { error: err, .. } => {
                tracing::info!(reason = err.label(), "request refused by authentication");
                METRICS.auth_failures.with_label_values(&[err.label()]).inc();
            }
            Self::RateLimited { limit, .. } => METRICS.rate_limited.with_label_values(&[limit.as_str()]).inc(),
            Self::Storage(err) => {
                tracing::error!(error = %err, cause = err.diagnosis().cause, "storage operation failed");
            }
            Self::Overloaded => METRICS.shed.with_label_values(&["overloaded"]).inc(),
            Self::TimedOut => {
                tracing::warn!("request timed out");
                METRICS.shed.with_label_values(&["timeout"]).inc();
            }
            Self::Panicked => METRICS.shed.with_label_values(&["panic"]).inc(),
            Self::Framing(_) | Self::Envelope(_) | Self::Method(_) | Self::KeyReused => {}
        }
    }
}

fn framing_answer(framing: Framing) -> Answer {
    let (status, error) = match framing {
        Framing::DuplicateOrigin => {
            (StatusCode::BAD_REQUEST, RpcError::header_mismatch("Origin", "Duplicate Origin header"))
        }
        Framing::OriginRefused => (StatusCode::FORBIDDEN, RpcError::invalid_request("Origin not allowed")),
        Framing::HostRefused => (StatusCode::FORBIDDEN, RpcError::invalid_request("Host not allowed")),
        Framing::UnsupportedMediaType => {
            (StatusCode::UNSUPPORTED_MEDIA_TYPE, RpcError::invalid_request("Content-Type must be application/json"))
        }
        Framing::NotAcceptable => (
            StatusCode::NOT_ACCEPTABLE,
            RpcError::invalid_request("Accept must list both application/json and text/event-stream"),
        ),
        Framing::BodyTooLarge { limit } => (
            StatusCode::PAYLOAD_TOO_LARGE,
            RpcError::parse_error(format!("request body exceeds the {limit}-byte limit")),
        ),
        Framing::BodyUnreadable => {
            (StatusCode::BAD_REQUEST, RpcError::parse_error("the request body could not be read"))
        }
        Framing::BodyTimedOut => {
            (StatusCode::REQUEST_TIMEOUT, RpcError::parse_error("the request body was not received in time"))
        }
    };
    Answer::new(status, error)
}

/// Where a JSON-RPC error arose, which decides its status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Envelope,
    Method,
}

fn status_of(kind: ErrorKind, stage: Stage) -> StatusCode {
    match kind {
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
        // Only a tool's stored error gets here with these codes (the gateway's own refusals
        // are `GatewayError::Auth`): in-band, so a client never mistakes it for its credentials.
        ErrorKind::Unauthorized | ErrorKind::Forbidden | ErrorKind::CredentialRequired => StatusCode::OK,
        // The Events extension's refusals of a well-formed request (docs/events.md, 2.5).
        ErrorKind::EventsForbidden | ErrorKind::ResourceExhausted | ErrorKind::CallbackEndpointError => StatusCode::OK,
        ErrorKind::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        // A tool's own error, carried in-band; the Events extension's refusal of a well-formed
        // request (docs/events.md, 2.5).
        ErrorKind::Application(_) | ErrorKind::NotFound => StatusCode::OK,
    }
}

/// `Retry-After` in whole seconds, at least one.
fn retry_after(retry_ms: u64) -> HeaderValue {
    HeaderValue::from(retry_ms.div_ceil(1_000).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_params_is_in_band_only_inside_a_method() {
        let err = RpcError::invalid_params("x");
        assert_eq!(GatewayError::Envelope(err.clone()).answer().status, StatusCode::BAD_REQUEST);
        assert_eq!(GatewayError::Method(err).answer().status, StatusCode::OK);
    }

    #[test]
    fn limits_carry_retry_after_in_whole_seconds() {
        let answer = GatewayError::RateLimited { limit: Limit::Poll, retry_after_ms: 1_001 }.answer();
        assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(answer.error.code(), -31429);
        assert_eq!(answer.headers, vec![(header::RETRY_AFTER, HeaderValue::from(2u64))]);
        let brief = GatewayError::RateLimited { limit: Limit::Requests, retry_after_ms: 0 }.answer();
        assert_eq!(brief.headers[0].1, HeaderValue::from(1u64));
    }

    #[test]
    fn a_tools_auth_codes_stay_in_band() {
        for err in [RpcError::unauthorized(), RpcError::forbidden(), RpcError::new(ErrorKind::Application(-1), "x")] {
            let answer = GatewayError::Method(err).answer();
            assert_eq!(answer.status, StatusCode::OK);
            assert!(answer.headers.is_empty());
        }
        let limited = GatewayError::Method(RpcError::rate_limited("requests", 2_500)).answer();
        assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(limited.headers, vec![(header::RETRY_AFTER, HeaderValue::from(3u64))]);
    }

    #[test]
    fn storage_errors_say_nothing_specific() {
        let answer = GatewayError::Storage(StoreError::Corrupt("status")).answer();
        assert_eq!((answer.status, answer.error.code()), (StatusCode::INTERNAL_SERVER_ERROR, -32603));
        assert_eq!(answer.error.message, "internal error");
        // Unreachable Redis is retryable: 503 with Retry-After, the same JSON-RPC code.
        let answer = GatewayError::Storage(StoreError::Timeout(std::time::Duration::from_secs(2))).answer();
        assert_eq!((answer.status, answer.error.code()), (StatusCode::SERVICE_UNAVAILABLE, -32603));
        assert_eq!(answer.headers, vec![(header::RETRY_AFTER, HeaderValue::from_static("1"))]);
        assert_eq!(
            GatewayError::Storage(StoreError::Timeout(std::time::Duration::from_secs(2))).outcome(),
            Outcome::ServerError
        );
    }

    #[test]
    fn authentication_failures_carry_their_challenge() {
        let challenge =
            Some(Arc::new(Challenge::new("https://mcp.example.com/mcp".into(), vec![], vec!["tasks".into()])));
        let refused = |error| GatewayError::Auth { error, challenge: challenge.clone() }.answer();
        let missing = refused(AuthError::Missing);
        assert_eq!((missing.status, missing.error.code()), (StatusCode::UNAUTHORIZED, -31401));
        let value = missing.headers[0].1.to_str().unwrap();
        assert!(value.starts_with("Bearer error=\"invalid_token\""), "{value}");
        let scope = refused(AuthError::InsufficientScope);
        assert_eq!((scope.status, scope.error.code()), (StatusCode::FORBIDDEN, -31403));
        assert!(scope.headers[0].1.to_str().unwrap().contains("scope=\"tasks\""));
        // Without a configured scheme (none can refuse then): the status and code, no header.
        let bare = GatewayError::Auth { error: AuthError::Missing, challenge: None }.answer();
        assert_eq!((bare.status, bare.error.code(), bare.headers.len()), (StatusCode::UNAUTHORIZED, -31401, 0));
    }

    #[test]
    fn the_pipeline_answers_are_server_errors() {
        for (err, status) in [
            (GatewayError::Overloaded, StatusCode::SERVICE_UNAVAILABLE),
            (GatewayError::TimedOut, StatusCode::GATEWAY_TIMEOUT),
            (GatewayError::Panicked, StatusCode::INTERNAL_SERVER_ERROR),
        ] {
            assert_eq!(err.outcome(), Outcome::ServerError);
            let answer = err.answer();
            assert_eq!((answer.status, answer.error.code()), (status, -32603));
        }
        assert!(GatewayError::Overloaded.answer().headers.iter().any(|(n, _)| n == header::RETRY_AFTER));
    }
}
