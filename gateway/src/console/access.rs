//! Who may use the console, and how far they reach.
//!
//! The credential is the one `/mcp` takes: `Authorization: Bearer …`, or the same token kept
//! in an HttpOnly, SameSite=Strict cookie by the login form (a browser cannot send a header on
//! navigation). It is authenticated on every request, exactly as on `/mcp`, so an expired JWT
//! or a removed API key stops working here too. Then the scope decides the reach: the operator
//! scope sees and acts on every tenant; the tenant-admin scope sees its own tenant, read-only.
//! Under `--auth none` (loopback only) the console is open, with a banner saying so.
//!
//! Actions (POST) carry a CSRF token, a MAC of the credential under a secret every replica
//! shares through Redis, and must come from the console's own origin. Every request, page or
//! action, is admitted through the tenant's request rate, as `/mcp` requests are.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, header};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use taskgate_shared::store::SharedSecret;

use super::ConsoleError;
use super::model::{Reach, Viewer};
use crate::auth::{Authenticator, Principal};
use crate::state::AppState;

/// The cookie the login form sets on a loopback listener (plain HTTP, a developer's machine),
/// and the only listener that accepts it: anywhere else it could have been set by a sibling
/// domain or over plain HTTP, which is what the `__Host-` prefix rules out.
pub(super) const COOKIE: &str = "taskgate_console";
/// The cookie anywhere else: `__Host-` makes the browser refuse it unless it is `Secure`, has
/// `Path=/` and no `Domain`, so neither plain HTTP nor a sibling domain can set or read it.
pub(super) const SECURE_COOKIE: &str = "__Host-taskgate_console";

/// Actions are checked here, beside the token they are checked against.
impl Viewer {
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
            admit(state, &principal).await?;
            let csrf = csrf(&secret(state).await?, b"");
            return Ok(Viewer { principal, reach: Reach::Everything, may_act: true, open: true, csrf });
        }
        let token = credential(&parts.headers, state.origin_policy.loopback()).ok_or(ConsoleError::SignIn)?;
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
        admit(state, &principal).await?;
        let (reach, may_act) = if has(&config.scope) {
            (Reach::Everything, true)
        } else if has(&config.tenant_scope) {
            (Reach::Tenant(principal.tenant.clone()), false)
        } else {
            return Err(ConsoleError::Forbidden(
                "This token has neither the console's operator scope nor its tenant-admin scope.",
            ));
        };
        let csrf = csrf(&secret(state).await?, token.as_bytes());
        Ok(Viewer { principal, reach, may_act, open: false, csrf })
    }
}

/// The tenant's request rate, as `/mcp` applies it: a loop of page loads is refused 429 like
/// a loop of requests.
async fn admit(state: &AppState, principal: &Principal) -> Result<(), ConsoleError> {
    match crate::limits::admit_request(state, principal).await {
        Ok(()) => Ok(()),
        Err(crate::error::GatewayError::RateLimited { retry_after_ms, .. }) => {
            Err(ConsoleError::RateLimited { retry_after_ms })
        }
        Err(crate::error::GatewayError::Storage(err)) => Err(ConsoleError::Unavailable(Some(err))),
        Err(err) => {
            tracing::error!(outcome = ?err.outcome(), "console: the request-rate check failed");
            Err(ConsoleError::Unavailable(None))
        }
    }
}

/// The CSRF secret every replica shares (`crate::secrets`).
async fn secret(state: &AppState) -> Result<[u8; 32], ConsoleError> {
    state.secrets.get(&state.store, SharedSecret::Console).await.map_err(|err| ConsoleError::Unavailable(Some(err)))
}

/// The same `Host` and `Origin` rules as `/mcp` (on a loopback listener only loopback names,
/// so a page elsewhere cannot reach an open `--auth none` console by DNS rebinding), except
/// that the console's own pages are always allowed: an `Origin` that names the request's own
/// `Host`. Without that, a console off loopback would refuse every form a browser posts
/// unless `--allowed-origins` listed it. The `Host` rule still applies, so a rebinding page
/// (whose origin is its own name) is still refused where host names are checked.
pub(super) fn check_host(state: &AppState, parts: &Parts) -> Result<(), ConsoleError> {
    let authority = parts.uri.authority().map(|a| a.as_str());
    let refused = |_| ConsoleError::Forbidden("This host name or origin is not allowed here.");
    if same_origin_header(&parts.headers) {
        let mut without_origin = parts.headers.clone();
        without_origin.remove(header::ORIGIN);
        return state.origin_policy.check(&without_origin, authority).map_err(refused);
    }
    state.origin_policy.check(&parts.headers, authority).map_err(refused)
}

/// Whether the request carries exactly one `Origin`, naming the request's own `Host`.
fn same_origin_header(headers: &HeaderMap) -> bool {
    let mut origins = headers.get_all(header::ORIGIN).iter();
    let (Some(origin), None) = (origins.next(), origins.next()) else { return false };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let authority = origin.to_str().ok().and_then(|o| o.split_once("://")).map(|(_, authority)| authority);
    matches!((authority, host), (Some(a), Some(h)) if !h.is_empty() && a.eq_ignore_ascii_case(h))
}

/// The bearer token of the request: the header first, else a login cookie (the unprefixed
/// one only on a `loopback` listener).
fn credential(headers: &HeaderMap, loopback: bool) -> Option<String> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim().to_owned());
    bearer.filter(|t| !t.is_empty()).or_else(|| cookie(headers, loopback))
}

/// The login cookie's value: the `__Host-` one, else, on a `loopback` listener only, the plain
/// one.
fn cookie(headers: &HeaderMap, loopback: bool) -> Option<String> {
    let named = |name: &str| {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(cookie::Cookie::split_parse)
            .filter_map(Result::ok)
            .find(|c| c.name() == name)
            .map(|c| c.value().to_owned())
            .filter(|v| !v.is_empty())
    };
    named(SECURE_COOKIE).or_else(|| if loopback { named(COOKIE) } else { None })
}

/// The CSRF token for a credential (empty under `--auth none`): a MAC of it under the
/// replicas' shared secret, so neither a page from elsewhere nor one who knows the token
/// format can make one, and it is not a function of the credential alone.
fn csrf(secret: &[u8; 32], credential: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap_or_else(|_| unreachable!("HMAC takes any key"));
    mac.update(b"taskgate console csrf\0");
    mac.update(credential);
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

/// The `Set-Cookie` value that keeps `token`. Off a loopback listener the cookie is always
/// `Secure` and `__Host-` named, whatever `X-Forwarded-Proto` says (a header anyone can send):
/// a console served over plain HTTP off loopback cannot keep a sign-in, by design. On
/// loopback (a developer's `http://127.0.0.1`) it is a plain cookie for `/console`.
pub(super) fn login_cookie(token: &str, loopback: bool) -> String {
    let (name, path) = if loopback { (COOKIE, "/console") } else { (SECURE_COOKIE, "/") };
    cookie::Cookie::build((name, token.to_owned()))
        .path(path)
        .http_only(true)
        .same_site(cookie::SameSite::Strict)
        .max_age(cookie::time::Duration::hours(8))
        .secure(!loopback)
        .build()
        .to_string()
}

/// The `Set-Cookie` value that removes the login cookie.
pub(super) fn logout_cookie(loopback: bool) -> String {
    let (name, path) = if loopback { (COOKIE, "/console") } else { (SECURE_COOKIE, "/") };
    let mut cookie = cookie::Cookie::build((name, "")).path(path).http_only(true).secure(!loopback).build();
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
        assert_eq!(credential(&headers, true).as_deref(), Some("tok"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer hdr"));
        assert_eq!(credential(&headers, true).as_deref(), Some("hdr"));
    }

    #[test]
    fn off_loopback_only_the_host_prefixed_cookie_is_read() {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_static("taskgate_console=plain"));
        assert_eq!(credential(&headers, false), None);
        headers.insert(header::COOKIE, HeaderValue::from_static("taskgate_console=plain; __Host-taskgate_console=tok"));
        assert_eq!(credential(&headers, false).as_deref(), Some("tok"));
        assert_eq!(credential(&headers, true).as_deref(), Some("tok"), "on loopback too, the prefixed one first");
    }

    #[test]
    fn csrf_tokens_differ_per_credential_and_secret_and_compare_exactly() {
        let (a, b) = ([1; 32], [2; 32]);
        assert_ne!(csrf(&a, b"one"), csrf(&a, b"two"));
        assert_ne!(csrf(&a, b"one"), csrf(&b, b"one"), "the server secret keys the token");
        assert!(constant_time_eq(csrf(&a, b"one").as_bytes(), csrf(&a, b"one").as_bytes()));
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

    #[test]
    fn an_origin_naming_its_own_host_is_the_consoles_own() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("console.example:8443"));
        headers.insert(header::ORIGIN, HeaderValue::from_static("https://console.example:8443"));
        assert!(same_origin_header(&headers));
        headers.insert(header::ORIGIN, HeaderValue::from_static("https://evil.example"));
        assert!(!same_origin_header(&headers));
        headers.append(header::ORIGIN, HeaderValue::from_static("https://console.example:8443"));
        assert!(!same_origin_header(&headers), "two origins are never the console's own");
    }

    #[test]
    fn off_loopback_the_cookie_is_secure_and_host_bound() {
        let cookie = login_cookie("tok", false);
        assert!(cookie.starts_with("__Host-taskgate_console=tok"), "{cookie}");
        assert!(
            cookie.contains("Secure")
                && cookie.contains("Path=/")
                && !cookie.contains("Path=/console")
                && !cookie.contains("Domain"),
            "{cookie}"
        );
        let local = login_cookie("tok", true);
        assert!(local.starts_with("taskgate_console=tok") && !local.contains("Secure"), "{local}");
    }
}
