//! Origin and Host checks on `/mcp`: a browser on another site, or a DNS-rebound name, must not
//! reach a local gateway (streamable-http.mdx, "Security Warning").

use axum::http::{HeaderMap, StatusCode, header};
use taskgate_shared::protocol::RpcError;

const LOOPBACK_NAMES: &[&str] = &["localhost", "127.0.0.1", "[::1]", "::1"];

/// Which origins and hosts may call `/mcp`.
#[derive(Debug, Clone)]
pub(crate) struct OriginPolicy {
    origins: Vec<String>,
    /// `None`: any Host.
    hosts: Option<Vec<String>>,
    loopback: bool,
}

impl OriginPolicy {
    pub(crate) fn new(origins: Vec<String>, hosts: Vec<String>, loopback: bool) -> Self {
        let hosts = if !hosts.is_empty() {
            Some(hosts.into_iter().map(|h| h.to_ascii_lowercase()).collect())
        } else if loopback {
            Some(LOOPBACK_NAMES.iter().map(|h| (*h).to_owned()).collect())
        } else {
            None
        };
        Self { origins, hosts, loopback }
    }

    /// `Err((status, error))` when the request must be refused before its body is read.
    pub(crate) fn check(&self, headers: &HeaderMap, authority: Option<&str>) -> Result<(), (StatusCode, RpcError)> {
        let mut origins = headers.get_all(header::ORIGIN).iter();
        if let Some(origin) = origins.next() {
            if origins.next().is_some() {
                return Err((StatusCode::BAD_REQUEST, RpcError::header_mismatch("Origin", "Duplicate Origin header")));
            }
            let allowed = origin.to_str().is_ok_and(|o| self.origin_allowed(o));
            if !allowed {
                return Err((StatusCode::FORBIDDEN, RpcError::invalid_request("Origin not allowed")));
            }
        }
        if let Some(hosts) = &self.hosts {
            let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).or(authority);
            let allowed = host.is_some_and(|h| hosts.iter().any(|a| *a == host_name(h)));
            if !allowed {
                return Err((StatusCode::FORBIDDEN, RpcError::invalid_request("Host not allowed")));
            }
        }
        Ok(())
    }

    fn origin_allowed(&self, origin: &str) -> bool {
        if !self.origins.is_empty() {
            return self.origins.iter().any(|o| o == origin);
        }
        // Without an allowlist, a loopback gateway accepts pages served from loopback only.
        self.loopback
            && origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                .is_some_and(|rest| LOOPBACK_NAMES.contains(&host_name(rest).as_str()))
    }
}

/// The lowercase host of `host[:port]` or `[v6]:port`.
fn host_name(authority: &str) -> String {
    let authority = authority.trim();
    let host = if authority.starts_with('[') {
        authority.split_inclusive(']').next().unwrap_or(authority)
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    };
    host.to_ascii_lowercase()
}
