//! Signing in and out: the token is checked as every request will be, then kept in a cookie.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::actions::ActionForm;
use super::model::Viewer;
use super::views::{self};
use super::{ConsoleError, access, edge, html};
use crate::auth::Authenticator;
use crate::state::AppState;

pub(super) async fn login_form(State(state): State<AppState>) -> Result<Response, ConsoleError> {
    state.config.console.as_ref().ok_or(ConsoleError::NotFound)?;
    if matches!(*state.auth, Authenticator::Anonymous) {
        return Ok(Redirect::to("/console/").into_response());
    }
    Ok(html(views::login(None)))
}

#[derive(Debug, Deserialize)]
pub(super) struct LoginForm {
    #[serde(default)]
    token: String,
}

/// Checks the token as every request will, then keeps it in the login cookie. The host and
/// origin are checked before the form is read, and the form is read within its bounds.
pub(super) async fn login(State(state): State<AppState>, request: axum::extract::Request) -> Response {
    let (parts, body) = request.into_parts();
    if let Err(refused) = access::check_host(&state, &parts) {
        return refused.into_response();
    }
    if !access::same_origin(&parts.headers) {
        return ConsoleError::Forbidden("Sign in from the console's own page.").into_response();
    }
    let form: LoginForm = match edge::read_form(&state, parts.clone(), body).await {
        Ok(form) => form,
        Err(refused) => return refused.into_response(),
    };
    let token = form.token.trim();
    // The same request, with the typed token as its credential (and no older cookie).
    let mut probe = parts.clone();
    probe.headers.remove(header::COOKIE);
    probe.headers.remove(header::AUTHORIZATION);
    if let Ok(value) = HeaderValue::from_str(&format!("Bearer {token}")) {
        probe.headers.insert(header::AUTHORIZATION, value);
    }
    use axum::extract::FromRequestParts as _;
    if let Err(err) = Viewer::from_request_parts(&mut probe, &state).await {
        return match err {
            ConsoleError::SignIn | ConsoleError::Forbidden(_) => (
                StatusCode::UNAUTHORIZED,
                Html(views::login(Some("That token was not accepted, or it has neither console scope.")).into_string()),
            )
                .into_response(),
            other => other.into_response(),
        };
    }
    let mut response = Redirect::to("/console/").into_response();
    if let Ok(cookie) = HeaderValue::from_str(&access::login_cookie(token, state.origin_policy.loopback())) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

pub(super) async fn logout(
    State(state): State<AppState>,
    viewer: Viewer,
    request: axum::extract::Request,
) -> Result<Response, ConsoleError> {
    let (parts, body) = request.into_parts();
    let headers = parts.headers.clone();
    let form: ActionForm = edge::read_form(&state, parts, body).await?;
    if !access::same_origin(&headers) || viewer.check_csrf(&form.csrf).is_err() {
        return Err(ConsoleError::Forbidden("Sign out from the console's own page."));
    }
    let mut response = Redirect::to("/console/login").into_response();
    if let Ok(cookie) = HeaderValue::from_str(&access::logout_cookie(state.origin_policy.loopback())) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    Ok(response)
}
