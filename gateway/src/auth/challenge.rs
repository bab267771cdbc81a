//! 401 and 403 answers (RFC 6750 challenges pointing at RFC 9728 metadata), and the protected
//! resource metadata document itself.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};
use taskgate_shared::protocol::{ErrorKind, RpcError};

use super::AuthError;
use crate::http::reply;

/// What the challenges and the metadata document say about this resource.
#[derive(Debug, Clone)]
pub(crate) struct Challenge {
    /// The canonical resource URI (the expected `aud`).
    pub(crate) resource: String,
    /// Where the metadata document is served.
    pub(crate) metadata_url: String,
    pub(crate) authorization_servers: Vec<String>,
    pub(crate) required_scopes: Vec<String>,
}

/// JSON-RPC codes for authentication failures: taskgate's own, outside every reserved range.
pub(crate) const UNAUTHORIZED: i64 = -31401;
pub(crate) const FORBIDDEN: i64 = -31403;

impl Challenge {
    pub(crate) fn new(resource: String, authorization_servers: Vec<String>, required_scopes: Vec<String>) -> Self {
        let metadata_url = metadata_url(&resource);
        Self { resource, metadata_url, authorization_servers, required_scopes }
    }

    /// The response to a request that failed authentication; the body is a JSON-RPC error
    /// with the request's id.
    pub(crate) fn respond(&self, error: &AuthError, id: &Value) -> Response {
        let (status, code, message, challenge) = match error {
            AuthError::Missing | AuthError::Invalid(_) => (
                StatusCode::UNAUTHORIZED,
                UNAUTHORIZED,
                "authentication required: missing or invalid bearer token",
                format!("Bearer error=\"invalid_token\", resource_metadata=\"{}\"", self.metadata_url),
            ),
            AuthError::InsufficientScope => (
                StatusCode::FORBIDDEN,
                FORBIDDEN,
                "the token lacks a required scope",
                format!(
                    "Bearer error=\"insufficient_scope\", scope=\"{}\", resource_metadata=\"{}\"",
                    self.required_scopes.join(" "),
                    self.metadata_url
                ),
            ),
        };
        let err = RpcError::new(ErrorKind::Application(code), message);
        let mut response = reply::error(status, id, &err);
        if let Ok(value) = HeaderValue::from_str(&challenge) {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, value);
        }
        response
    }

    /// The RFC 9728 document.
    pub(crate) fn metadata(&self) -> Value {
        let mut doc = json!({
            "resource": self.resource,
            "authorization_servers": self.authorization_servers,
            "bearer_methods_supported": ["header"],
        });
        if !self.required_scopes.is_empty() {
            doc["scopes_supported"] = json!(self.required_scopes);
        }
        doc
    }
}

/// `https://host/.well-known/oauth-protected-resource/<path>` for `https://host/<path>`: the
/// well-known segment goes before the resource's path (RFC 9728 §3).
fn metadata_url(resource: &str) -> String {
    let (scheme, rest) = resource.split_once("://").unwrap_or(("http", resource));
    let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let suffix = if path.is_empty() { String::new() } else { format!("/{}", path.trim_end_matches('/')) };
    format!("{scheme}://{authority}/.well-known/oauth-protected-resource{suffix}")
}

/// `GET /.well-known/oauth-protected-resource[/…]`.
pub(crate) fn protected_resource_metadata(challenge: Option<&Challenge>) -> Response {
    match challenge {
        Some(c) => reply::json(StatusCode::OK, &c.metadata()),
        None => reply::json(StatusCode::NOT_FOUND, &json!({"error": "no authorization is configured"})),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn metadata_url_puts_the_well_known_segment_first() {
        assert_eq!(
            super::metadata_url("https://mcp.example.com/mcp"),
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            super::metadata_url("https://mcp.example.com"),
            "https://mcp.example.com/.well-known/oauth-protected-resource"
        );
    }
}
