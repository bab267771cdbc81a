//! Who may use the console, and how far they reach.
//!
//! The credential is the one `/mcp` takes: `Authorization: Bearer …`, or the same token kept
//! in an HttpOnly, SameSite=Strict cookie by the login form (a browser cannot send a header on
//! navigation). It is authenticated on every request, exactly as on `/mcp`, so an expired JWT
//! or a removed API key stops working here too. Then the scope decides the reach: the operator
//! scope sees and acts on every tenant; the tenant-admin scope sees its own tenant, read-only.
//! Under `--auth none` (loopback only) the console is open, with a banner saying so.
//!
//! Actions (POST) carry a CSRF token derived from the credential, and must come from the
//! console's own origin.

use std::sync::LazyLock;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, header};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::ConsoleError;
use crate::auth::{Authenticator, Principal};
use crate::state::AppState;

/// The cookie the login form sets.
pub(super) const COOKIE: &str = "taskgate_console";

/// What a viewer may see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Every tenant (the operator scope, or `--auth none`).
    Everything,
    /// One tenant (the tenant-admin scope).
    Tenant(String),
}

/// An authenticated console user.
#[derive(Debug, Clone)]
pub(crate) struct Viewer {
    pub(crate) principal: Principal,
    pub(crate) reach: Reach,
    /// Only operators act (cancel, fail).
    pub(crate) may_act: bool,
    /// No authentication is configured (`--auth none`): shown as a banner on every page.
    pub(crate) open: bool,
    /// The CSRF token actions must carry.
    pub(crate) csrf: String,
}

impl Viewer {
    /// `"tenant/principal"`, as the audit trail names the viewer.
    pub(crate) fn name(&self) -> String {
        format!("{}/{}", self.principal.tenant, self.principal.subject)
    }

    /// Whether a task of `tenant` is visible to this viewer.
    pub(crate) fn sees(&self, tenant: &str) -> bool {
        match &self.reach {
            Reach::Everything => true,
            Reach::Tenant(own) => own == tenant,
        }
    }

    /// The tenant a listing is confined to (`None`: every tenant, or the one asked for).
    pub(crate) fn confine(&self, asked: Option<String>) -> Option<String> {
        match &self.reach {
            Reach::Everything => asked,
            Reach::Tenant(own) => Some(own.clone()),
        }
    }

    /// Refuses an action without the operator scope, or without this viewer's CSRF token.
    pub(crate) fn check_action(&self, csrf: &str) -> Result<(), ConsoleError> {
        if !self.may_act {
            return Err(ConsoleError::Forbidden("Actions need the operator scope."));
        }
        self.check_csrf(csrf)
    }

    /// Refuses a form without this viewer's CSRF token.
    pub(crate) fn check_csrf(&self, csrf: &str) -> Result<(), ConsoleError> {
        match constant_time_eq(csrf.as_bytes(), self.csrf.as_bytes()) {
            true => Ok(()),
            false => {
                Err(ConsoleError::Forbidden("The form is stale or did not come from this console; reload the page."))
            }
        }
    }
}

impl FromRequestParts<AppState> for Viewer {
    type Rejection = ConsoleError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let Some(config) = state.config.console.as_ref() else { return Err(ConsoleError::NotFound) };
        check_host(state, parts)?;
        if matches!(*state.auth, Authenticator::Anonymous) {
            let principal = Principal::anonymous();
            return Ok(Viewer {
                principal,
                reach: Reach::Everything,
                may_act: true,
                open: true,
                csrf: csrf(&OPEN_SECRET[..]),
            });
        }
        let token = credential(&parts.headers).ok_or(ConsoleError::SignIn)?;
        let mut headers = HeaderMap::new();
        let value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| ConsoleError::SignIn)?;
        headers.insert(header::AUTHORIZATION, value);
        let principal = match state.auth.authenticate(&headers).await {
            Ok(principal) => principal,
            Err(err) => {
                tracing::info!(reason = err.label(), "console sign-in refused");
                return Err(ConsoleError::SignIn);
            }
        };
        let has = |scope: &str| principal.scopes.iter().any(|s| s == scope);
        let (reach, may_act) = if has(&config.scope) {
            (Reach::Everything, true)
        } else if has(&config.tenant_scope) {
            (Reach::Tenant(principal.tenant.clone()), false)
        } else {
            return Err(ConsoleError::Forbidden(
                "This token has neither the console's operator scope nor its tenant-admin scope.",
            ));
        };
        Ok(Viewer { principal, reach, may_act, open: false, csrf: csrf(token.as_bytes()) })
    }
}

/// The same `Host` and `Origin` rules as `/mcp`: on a loopback listener only loopback names,
/// so a page elsewhere cannot reach an open (`--auth none`) console by DNS rebinding.
pub(super) fn check_host(state: &AppState, parts: &Parts) -> Result<(), ConsoleError> {
    state
        .origin_policy
        .check(&parts.headers, parts.uri.authority().map(|a| a.as_str()))
        .map_err(|_| ConsoleError::Forbidden("This host name or origin is not allowed here."))
}

/// The bearer token of the request: the header first, else the login cookie.
fn credential(headers: &HeaderMap) -> Option<String> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim().to_owned());
    bearer.filter(|t| !t.is_empty()).or_else(|| cookie(headers))
}

/// The login cookie's value.
fn cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(cookie::Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == COOKIE)
        .map(|c| c.value().to_owned())
        .filter(|v| !v.is_empty())
}

/// Under `--auth none` there is no credential to derive from: a secret of this process (the
/// console is then on loopback, one replica).
static OPEN_SECRET: LazyLock<[u8; 32]> = LazyLock::new(rand::random);

/// The CSRF token for a credential: a MAC of it, so a page from elsewhere cannot make one.
fn csrf(credential: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(credential).unwrap_or_else(|_| unreachable!("HMAC takes any key"));
    mac.update(b"taskgate console csrf");
    URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether a POST came from the console's own pages: `Sec-Fetch-Site` when the browser sends
/// it, else `Origin` against `Host`. Neither (a non-browser client) is allowed: the CSRF token
/// is what such a client must still carry.
pub(super) fn same_origin(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        return site == "same-origin" || site == "none";
    }
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else { return true };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or_default();
    origin.split_once("://").is_some_and(|(_, authority)| authority.eq_ignore_ascii_case(host))
}

/// The `Set-Cookie` value that keeps `token` for the console's paths; `secure` when the
/// request came over HTTPS (`X-Forwarded-Proto: https` from the proxy in front).
pub(super) fn login_cookie(token: &str, secure: bool) -> String {
    cookie::Cookie::build((COOKIE, token.to_owned()))
        .path("/console")
        .http_only(true)
        .same_site(cookie::SameSite::Strict)
        .max_age(cookie::time::Duration::hours(8))
        .secure(secure)
        .build()
        .to_string()
}

/// The `Set-Cookie` value that removes the login cookie.
pub(super) fn logout_cookie() -> String {
    let mut cookie = cookie::Cookie::build((COOKIE, "")).path("/console").http_only(true).build();
    cookie.make_removal();
    cookie.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_read_among_others_and_the_header_wins() {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_static("a=1; taskgate_console=tok; b=2"));
        assert_eq!(credential(&headers).as_deref(), Some("tok"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer hdr"));
        assert_eq!(credential(&headers).as_deref(), Some("hdr"));
    }

    #[test]
    fn csrf_tokens_differ_per_credential_and_compare_exactly() {
        assert_ne!(csrf(b"one"), csrf(b"two"));
        assert!(constant_time_eq(csrf(b"one").as_bytes(), csrf(b"one").as_bytes()));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }

    #[test]
    fn cross_site_posts_are_refused() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        assert!(same_origin(&headers), "a client that is not a browser");
        headers.insert(header::ORIGIN, HeaderValue::from_static("http://127.0.0.1:8080"));
        assert!(same_origin(&headers));
        headers.insert(header::ORIGIN, HeaderValue::from_static("https://evil.example"));
        assert!(!same_origin(&headers));
        headers.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(!same_origin(&headers));
    }
}
