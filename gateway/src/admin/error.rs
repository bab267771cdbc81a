//! Why an admin request was refused: a JSON `{"error": "..."}` with its status. No message
//! ever carries a credential's value: they name tenants, upstreams, value names and keys only.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use taskgate_shared::store::StoreError;
use tower::BoxError;

#[derive(Debug)]
pub(crate) enum AdminError {
    /// No credential, or one that does not authenticate; the `WWW-Authenticate` challenge
    /// `/mcp` sends, when authentication is configured.
    Unauthenticated(Option<String>),
    /// Authenticated, but not allowed this.
    Forbidden(String),
    BadRequest(String),
    TooLarge,
    SlowBody,
    /// The tenant's request rate is spent.
    RateLimited {
        retry_after_ms: u64,
    },
    /// No `--credentials-key`: nothing can be sealed here.
    NoKeys,
    /// Redis did not answer (logged here, never shown).
    Unavailable(Option<StoreError>),
    TimedOut,
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            Self::Unauthenticated(challenge) => {
                let mut response = refusal(StatusCode::UNAUTHORIZED, "authentication required");
                if let Some(value) = challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
                    response.headers_mut().insert(header::WWW_AUTHENTICATE, value);
                }
                return response;
            }
            Self::Forbidden(why) => (StatusCode::FORBIDDEN, why),
            Self::BadRequest(why) => (StatusCode::BAD_REQUEST, why),
            Self::TooLarge => {
                (StatusCode::PAYLOAD_TOO_LARGE, format!("the body is larger than {} bytes", super::MAX_BODY_BYTES))
            }
            Self::SlowBody => (StatusCode::REQUEST_TIMEOUT, "the body did not arrive in time".to_owned()),
            Self::RateLimited { retry_after_ms } => {
                let seconds = retry_after_ms.div_ceil(1000).max(1);
                let mut response = refusal(StatusCode::TOO_MANY_REQUESTS, "the tenant's request rate is spent");
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
                return response;
            }
            Self::NoKeys => {
                (StatusCode::SERVICE_UNAVAILABLE, "credentials key not configured (--credentials-key)".to_owned())
            }
            Self::Unavailable(cause) => {
                if let Some(err) = cause {
                    tracing::warn!(error = %err, "admin: storage unavailable");
                }
                (StatusCode::SERVICE_UNAVAILABLE, "redis did not answer; try again shortly".to_owned())
            }
            Self::TimedOut => (StatusCode::GATEWAY_TIMEOUT, "the request took too long".to_owned()),
        };
        refusal(status, &message)
    }
}

fn refusal(status: StatusCode, message: &str) -> Response {
    let mut response = (status, axum::Json(json!({ "error": message }))).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

impl From<StoreError> for AdminError {
    fn from(err: StoreError) -> Self {
        Self::Unavailable(Some(err))
    }
}

/// The pipeline's refusals (the request deadline), as JSON.
pub(crate) async fn pipeline_error(err: BoxError) -> Response {
    if err.is::<tower::timeout::error::Elapsed>() {
        return AdminError::TimedOut.into_response();
    }
    tracing::error!(error = %err, "unexpected error in the admin pipeline");
    AdminError::Unavailable(None).into_response()
}
