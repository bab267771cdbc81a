//! The console's edge: the pipeline's refusals as pages, and forms read within their bounds.
//!
//! A form is read only after the checks that need no body (host, origin, credential), within
//! `--body-timeout-ms` for the whole body and at most [`MAX_FORM_BYTES`], so a request that
//! announces a large body and sends none holds its connection for the body deadline only.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{FromRequest, Request};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use tower::BoxError;

use super::ConsoleError;
use crate::state::AppState;

/// The largest form the console takes: a sign-in token (a JWT of a few KiB) or an action's
/// reason, with room to spare.
pub(super) const MAX_FORM_BYTES: usize = 32 * 1024;

/// Reads a urlencoded form from `body`, within the body deadline and the size limit.
pub(super) async fn read_form<T: DeserializeOwned>(
    state: &AppState,
    parts: axum::http::request::Parts,
    body: Body,
) -> Result<T, ConsoleError> {
    let request = Request::from_parts(parts, axum::body::Body::new(http_body_util::Limited::new(body, MAX_FORM_BYTES)));
    read_within(state.config.requests.body_timeout, request).await
}

async fn read_within<T: DeserializeOwned>(deadline: Duration, request: Request) -> Result<T, ConsoleError> {
    let form = axum::Form::<T>::from_request(request, &());
    match tokio::time::timeout(deadline, form).await {
        Err(_) => Err(ConsoleError::SlowBody),
        Ok(Ok(axum::Form(form))) => Ok(form),
        Ok(Err(rejection)) => Err(refused(&rejection)),
    }
}

/// Why a form was refused: too large (axum says 413 when the limit cut the body), or not a
/// form.
fn refused(rejection: &axum::extract::rejection::FormRejection) -> ConsoleError {
    match rejection.status() {
        axum::http::StatusCode::PAYLOAD_TOO_LARGE => ConsoleError::TooLarge,
        _ => ConsoleError::BadRequest("That form could not be read."),
    }
}

/// The pipeline's refusals (load shedding, the request deadline), as pages.
pub(crate) async fn pipeline_error(err: BoxError) -> Response {
    let refusal = if err.is::<tower::load_shed::error::Overloaded>() {
        ConsoleError::Busy
    } else if err.is::<tower::timeout::error::Elapsed>() {
        ConsoleError::TimedOut
    } else {
        tracing::error!(error = %err, "unexpected error in the console's pipeline");
        ConsoleError::Unavailable(None)
    };
    refusal.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Login {
        token: String,
    }

    fn request(body: Body) -> Request {
        Request::builder()
            .method("POST")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .unwrap()
    }

    #[tokio::test]
    async fn a_form_within_bounds_is_read() {
        let body = Body::new(http_body_util::Limited::new(Body::from("token=abc"), MAX_FORM_BYTES));
        let form: Login = read_within(Duration::from_secs(5), request(body)).await.unwrap();
        assert_eq!(form.token, "abc");
    }

    #[tokio::test]
    async fn an_oversize_form_is_refused_as_too_large() {
        let big = format!("token={}", "a".repeat(MAX_FORM_BYTES + 1));
        let body = Body::new(http_body_util::Limited::new(Body::from(big), MAX_FORM_BYTES));
        let refused = read_within::<Login>(Duration::from_secs(5), request(body)).await.unwrap_err();
        assert!(matches!(refused, ConsoleError::TooLarge), "{refused:?}");
    }

    #[tokio::test]
    async fn a_body_that_never_comes_is_refused_at_the_deadline() {
        let (_sender, body) = {
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<axum::body::Bytes, std::io::Error>>(1);
            (tx, Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)))
        };
        let refused = read_within::<Login>(Duration::from_millis(100), request(body)).await.unwrap_err();
        assert!(matches!(refused, ConsoleError::SlowBody), "{refused:?}");
    }
}
