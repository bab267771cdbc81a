//! What 401 and 403 answers say (RFC 6750 challenges pointing at RFC 9728 metadata), and the
//! protected resource metadata document itself.

use serde_json::{Value, json};

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

impl Challenge {
    pub(crate) fn new(resource: String, authorization_servers: Vec<String>, required_scopes: Vec<String>) -> Self {
        let metadata_url = metadata_url(&resource);
        Self { resource, metadata_url, authorization_servers, required_scopes }
    }

    /// The `WWW-Authenticate` value for a missing or invalid token.
    pub(crate) fn invalid_token(&self) -> String {
        format!("Bearer error=\"invalid_token\", resource_metadata=\"{}\"", self.metadata_url)
    }

    /// The `WWW-Authenticate` value for a token without every required scope.
    pub(crate) fn insufficient_scope(&self) -> String {
        format!(
            "Bearer error=\"insufficient_scope\", scope=\"{}\", resource_metadata=\"{}\"",
            self.required_scopes.join(" "),
            self.metadata_url
        )
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
