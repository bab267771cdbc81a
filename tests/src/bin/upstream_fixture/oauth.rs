//! The fixture's OAuth 2.0 side. With `--oauth`, a token endpoint at `/token` (refresh, RFC 6749
//! §6; token exchange, RFC 8693) issues short-lived access tokens, and `/mcp` lets in only a live
//! one of them or a static token. In every HTTP mode a layer logs whose bearer each MCP request
//! carried and hands that to the tools (`whoami_bearer`): the fixture is the upstream, so it may
//! see tokens, and it is how a test tells which identity a call was made with.
//!
//! Nothing is verified beyond what a test needs: client credentials are accepted as given (or
//! checked against `FIXTURE_CLIENT_ID` when set), and a subject token's JWT signature is never
//! checked.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{Value, json};

use crate::log;

const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const JWT_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";
const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// Who the current MCP request's bearer names, as the layer saw it (a request extension, which
/// rmcp hands to the tools inside the request's `Parts`).
#[derive(Clone, Debug)]
pub(crate) struct Bearer(pub(crate) String);

/// The tokens the fixture knows: seeded from the environment, issued by `/token`.
pub(crate) struct Issuer {
    /// `--oauth`: `/mcp` demands a live token; without it the layer only logs.
    required: bool,
    ttl: Duration,
    client_id: Option<String>,
    statics: HashMap<String, String>,
    /// Refresh token to subject. A refresh rotates it, but the old one stays valid, so a test
    /// can refresh from the same seed more than once.
    refresh: Mutex<HashMap<String, String>>,
    /// Access token to its subject and expiry. Kept after expiry, to tell "expired" from "unknown".
    access: Mutex<HashMap<String, (String, Instant)>>,
    /// `FIXTURE_EXCHANGE_REFRESH`: a token exchange also issues a refresh token.
    exchange_refresh: bool,
}

/// What a request's `Authorization` header amounts to.
enum Who {
    Nobody,
    /// Not a bearer scheme.
    OtherScheme,
    Live(String),
    Expired(String),
    Unknown(String),
}

impl Who {
    /// How the log line and `whoami_bearer` name it.
    fn label(&self) -> String {
        match self {
            Who::Nobody => "-".into(),
            Who::OtherScheme => "not-bearer".into(),
            Who::Live(subject) => subject.clone(),
            Who::Expired(subject) => format!("expired:{subject}"),
            Who::Unknown(raw) => raw.clone(),
        }
    }
}

/// `a=x,b=y` into a map (blank entries skipped).
fn pairs(var: &str) -> HashMap<String, String> {
    std::env::var(var)
        .unwrap_or_default()
        .split(',')
        .filter_map(|pair| pair.trim().split_once('='))
        .map(|(key, value)| (key.trim().to_owned(), value.trim().to_owned()))
        .filter(|(key, _)| !key.is_empty())
        .collect()
}

fn random_token(prefix: &str) -> String {
    format!("{prefix}-{:032x}", rand::random::<u128>())
}

impl Issuer {
    pub(crate) fn from_env(required: bool) -> Self {
        let ttl = std::env::var("FIXTURE_TOKEN_TTL_S").ok().and_then(|s| s.parse().ok()).unwrap_or(2);
        Self {
            required,
            ttl: Duration::from_secs(ttl),
            client_id: std::env::var("FIXTURE_CLIENT_ID").ok().filter(|id| !id.is_empty()),
            statics: pairs("FIXTURE_STATIC_TOKENS"),
            refresh: Mutex::new(pairs("FIXTURE_REFRESH_TOKENS")),
            access: Mutex::default(),
            exchange_refresh: std::env::var("FIXTURE_EXCHANGE_REFRESH").is_ok_and(|v| v == "1"),
        }
    }

    fn who(&self, headers: &HeaderMap) -> Who {
        let Some(value) = headers.get(header::AUTHORIZATION) else { return Who::Nobody };
        let value = value.to_str().unwrap_or("");
        let Some(token) =
            value.get(..7).filter(|scheme| scheme.eq_ignore_ascii_case("bearer ")).map(|_| value[7..].trim())
        else {
            return Who::OtherScheme;
        };
        if let Some(subject) = self.statics.get(token) {
            return Who::Live(subject.clone());
        }
        match self.access.lock().expect("the access tokens").get(token) {
            Some((subject, expiry)) if Instant::now() < *expiry => Who::Live(subject.clone()),
            Some((subject, _)) => Who::Expired(subject.clone()),
            None => Who::Unknown(token.to_owned()),
        }
    }

    /// A new access token for `subject`, as the token endpoint answers it.
    fn issue(&self, subject: &str) -> serde_json::Map<String, Value> {
        let token = random_token("at");
        let expiry = Instant::now() + self.ttl;
        self.access.lock().expect("the access tokens").insert(token.clone(), (subject.to_owned(), expiry));
        let Value::Object(answer) = json!({
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": self.ttl.as_secs(),
        }) else {
            unreachable!()
        };
        answer
    }

    fn refresh(&self, form: &HashMap<String, String>) -> Response {
        let Some(presented) = form.get("refresh_token") else {
            return error(StatusCode::BAD_REQUEST, "invalid_request", "refresh_token is required");
        };
        let Some(subject) = self.refresh.lock().expect("the refresh tokens").get(presented).cloned() else {
            log("token refresh refused");
            return error(StatusCode::BAD_REQUEST, "invalid_grant", "unknown refresh token");
        };
        let rotated = random_token("rt");
        self.refresh.lock().expect("the refresh tokens").insert(rotated.clone(), subject.clone());
        log(&format!("token refresh {subject}"));
        let mut answer = self.issue(&subject);
        answer.insert("refresh_token".into(), rotated.into());
        ok(answer)
    }

    fn exchange(&self, form: &HashMap<String, String>) -> Response {
        let (Some(subject_token), Some(kind)) = (form.get("subject_token"), form.get("subject_token_type")) else {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "subject_token and subject_token_type are required",
            );
        };
        if kind != JWT_TYPE && kind != ACCESS_TOKEN_TYPE {
            return error(StatusCode::BAD_REQUEST, "invalid_request", "unsupported subject_token_type");
        }
        let Some(claims) = jwt_claims(subject_token) else {
            log("token exchange refused");
            return error(StatusCode::BAD_REQUEST, "invalid_grant", "the subject token is not a JWT");
        };
        let Some(sub) = claims.get("sub").and_then(Value::as_str) else {
            log("token exchange refused");
            return error(StatusCode::BAD_REQUEST, "invalid_grant", "the subject token has no sub");
        };
        let tenant = claims.get("tenant").and_then(Value::as_str).unwrap_or("-");
        let audience = form.get("audience").map_or("-", String::as_str);
        let subject = format!("exchanged:{tenant}/{sub}");
        log(&format!("token exchange {subject} {audience}"));
        let mut answer = self.issue(&subject);
        answer.insert("issued_token_type".into(), ACCESS_TOKEN_TYPE.into());
        if self.exchange_refresh {
            let refresh = random_token("rt");
            self.refresh.lock().expect("the refresh tokens").insert(refresh.clone(), subject);
            answer.insert("refresh_token".into(), refresh.into());
        }
        ok(answer)
    }

    /// With `FIXTURE_CLIENT_ID` set, the client must name it (form `client_id` or Basic auth).
    fn client_allowed(&self, headers: &HeaderMap, form: &HashMap<String, String>) -> bool {
        let Some(expected) = &self.client_id else { return true };
        let basic = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Basic "))
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b.trim()).ok())
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|pair| pair.split_once(':').map(|(id, _)| id.to_owned()));
        form.get("client_id") == Some(expected) || basic.as_ref() == Some(expected)
    }
}

/// A JWT's payload claims, decoded without any verification (this is a fixture).
fn jwt_claims(token: &str) -> Option<serde_json::Map<String, Value>> {
    let mut parts = token.split('.');
    let (_header, payload, _signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn ok(answer: serde_json::Map<String, Value>) -> Response {
    (StatusCode::OK, [(header::CACHE_CONTROL, "no-store")], axum::Json(Value::Object(answer))).into_response()
}

/// An RFC 6749 §5.2 error answer.
fn error(status: StatusCode, code: &str, description: &str) -> Response {
    let body = json!({ "error": code, "error_description": description });
    (status, [(header::CACHE_CONTROL, "no-store")], axum::Json(body)).into_response()
}

/// `POST /token`, form-encoded.
pub(crate) async fn token(State(issuer): State<Arc<Issuer>>, headers: HeaderMap, body: Bytes) -> Response {
    let form: HashMap<String, String> = form_urlencoded::parse(&body).into_owned().collect();
    if !issuer.client_allowed(&headers, &form) {
        log("token client refused");
        return error(StatusCode::UNAUTHORIZED, "invalid_client", "unknown client");
    }
    match form.get("grant_type").map(String::as_str) {
        Some("refresh_token") => issuer.refresh(&form),
        Some(TOKEN_EXCHANGE) => issuer.exchange(&form),
        Some(_) => error(StatusCode::BAD_REQUEST, "unsupported_grant_type", "refresh_token or token-exchange only"),
        None => error(StatusCode::BAD_REQUEST, "invalid_request", "grant_type is required"),
    }
}

/// The JSON-RPC method of an MCP request, for the log: `response` for a client's answer to the
/// server, the HTTP method for a GET (the SSE stream) or DELETE (session end).
fn mcp_method(method: &Method, body: &[u8]) -> String {
    if method != Method::POST {
        return method.as_str().to_owned();
    }
    let name = |message: &Value| message.get("method").and_then(Value::as_str).unwrap_or("response").to_owned();
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Array(batch)) => batch.iter().map(name).collect::<Vec<_>>().join(","),
        Ok(message) => name(&message),
        Err(_) => "unparsable".into(),
    }
}

/// The layer around `/mcp`: logs `bearer <who> <method>` for every request, and with `--oauth`
/// answers 401 (after a line `unauthorized <who> <method>`) unless the bearer is live.
pub(crate) async fn guard(State(issuer): State<Arc<Issuer>>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 64 << 20).await else {
        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    let method = mcp_method(&parts.method, &body);
    let who = issuer.who(&parts.headers);
    let label = who.label();
    log(&format!("bearer {label} {method}"));
    if issuer.required && !matches!(who, Who::Live(_)) {
        log(&format!("unauthorized {label} {method}"));
        let challenge = "Bearer error=\"invalid_token\"";
        return (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, challenge)]).into_response();
    }
    parts.extensions.insert(Bearer(label));
    next.run(Request::from_parts(parts, Body::from(body))).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jwt_payload_is_read_without_verification() {
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"sub":"ann","tenant":"acme"}"#);
        let claims = jwt_claims(&format!("e30.{payload}.not-a-signature")).expect("claims");
        assert_eq!(claims["sub"], "ann");
        assert_eq!(claims["tenant"], "acme");
        assert!(jwt_claims("opaque-token").is_none());
        assert!(jwt_claims("a.b.c.d").is_none());
    }

    #[test]
    fn methods_are_named_for_the_log() {
        assert_eq!(mcp_method(&Method::POST, br#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#), "tools/call");
        assert_eq!(mcp_method(&Method::POST, br#"{"jsonrpc":"2.0","id":1,"result":{}}"#), "response");
        assert_eq!(mcp_method(&Method::GET, b""), "GET");
    }
}
