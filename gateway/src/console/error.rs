//! Why a console request was not served: each reason is a page with its status.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use taskgate_shared::store::StoreError;

use super::views::{self};

/// Why a console request was not served. Each is a page, never a stack trace.
#[derive(Debug)]
pub(crate) enum ConsoleError {
    /// No credential, or one that does not authenticate: the sign-in page, 401.
    SignIn,
    Forbidden(&'static str),
    NotFound,
    BadRequest(&'static str),
    /// A reveal that could not be recorded (the task keeps no timeline): nothing is shown.
    Unaudited,
    /// Redis did not answer (the cause is logged where the page is made), or the console's
    /// state is missing.
    Unavailable(Option<StoreError>),
    /// The form did not arrive whole within `--body-timeout-ms`.
    SlowBody,
    /// The form is larger than the console ever needs.
    TooLarge,
    /// `--console-max-in-flight` console requests are under way on this replica.
    Busy,
    /// Not answered within the console's request deadline.
    TimedOut,
    /// The tenant's request rate is spent.
    RateLimited {
        retry_after_ms: u64,
    },
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let (status, markup) = match self {
            Self::SignIn => (StatusCode::UNAUTHORIZED, views::login(None)),
            Self::Forbidden(why) => (StatusCode::FORBIDDEN, views::error("Not allowed", why)),
            Self::NotFound => {
                (StatusCode::NOT_FOUND, views::error("Not found", "No such task, or not one you may see."))
            }
            Self::BadRequest(why) => (StatusCode::BAD_REQUEST, views::error("Bad request", why)),
            Self::Unaudited => (
                StatusCode::CONFLICT,
                views::error(
                    "Not revealed",
                    "This task keeps no timeline (it was created while the console was off), so the reveal could not be \
                     recorded, and nothing sensitive is shown.",
                ),
            ),
            Self::Unavailable(cause) => {
                if let Some(err) = cause {
                    tracing::warn!(error = %err, "console: storage unavailable");
                }
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    views::error("Unavailable", "Redis did not answer; try again shortly."),
                )
            }
            Self::SlowBody => {
                (StatusCode::REQUEST_TIMEOUT, views::error("Too slow", "The form did not arrive in time."))
            }
            Self::TooLarge => (StatusCode::PAYLOAD_TOO_LARGE, views::error("Too large", "That form is too large.")),
            Self::Busy => return retry_later(StatusCode::SERVICE_UNAVAILABLE, 1_000, "The console is busy"),
            Self::TimedOut => (
                StatusCode::GATEWAY_TIMEOUT,
                views::error("Timed out", "The page took too long to build; try again shortly."),
            ),
            Self::RateLimited { retry_after_ms } => {
                return retry_later(StatusCode::TOO_MANY_REQUESTS, retry_after_ms, "Too many requests");
            }
        };
        (status, Html(markup.into_string())).into_response()
    }
}

/// A refusal that says when to try again, in `Retry-After` (whole seconds, at least one).
pub(super) fn retry_later(status: StatusCode, after_ms: u64, title: &str) -> Response {
    let seconds = after_ms.div_ceil(1000).max(1);
    let markup = views::error(title, &format!("Try again in {seconds} s."));
    let mut response = (status, Html(markup.into_string())).into_response();
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}

impl From<StoreError> for ConsoleError {
    fn from(err: StoreError) -> Self {
        Self::Unavailable(Some(err))
    }
}
