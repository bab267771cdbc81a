//! Origin and Host checks on `/mcp`: a browser on another site, or a DNS-rebound name, must not
//! reach a local gateway (streamable-http.mdx, "Security Warning").

use axum::http::{HeaderMap, header};

use crate::error::Framing;

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

    /// Refuses a request before its body is read.
    pub(crate) fn check(&self, headers: &HeaderMap, authority: Option<&str>) -> Result<(), Framing> {
        let mut origins = headers.get_all(header::ORIGIN).iter();
        if let Some(origin) = origins.next() {
            if origins.next().is_some() {
                return Err(Framing::DuplicateOrigin);
            }
            let allowed = origin.to_str().is_ok_and(|o| self.origin_allowed(o));
            if !allowed {
                return Err(Framing::OriginRefused);
            }
        }
        if let Some(hosts) = &self.hosts {
            let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).or(authority);
            let allowed = host.is_some_and(|h| hosts.iter().any(|a| *a == host_name(h)));
            if !allowed {
                return Err(Framing::HostRefused);
            }
        }
        Ok(())
    }

    /// Whether the listener is on loopback (a developer's machine, plain HTTP).
    pub(crate) fn loopback(&self) -> bool {
        self.loopback
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

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, HeaderValue, header};

    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn host_names_drop_ports_and_keep_brackets() {
        assert_eq!(host_name("LocalHost:8080"), "localhost");
        assert_eq!(host_name("[::1]:8080"), "[::1]");
        assert_eq!(host_name("[::1]"), "[::1]");
        assert_eq!(host_name(" example.com "), "example.com");
        assert_eq!(host_name("127.0.0.1"), "127.0.0.1");
    }

    #[test]
    fn a_loopback_gateway_takes_loopback_hosts_and_origins_only() {
        let policy = OriginPolicy::new(vec![], vec![], true);
        assert_eq!(policy.check(&headers(&[(header::HOST, "localhost:8080")]), None), Ok(()));
        assert_eq!(policy.check(&headers(&[(header::HOST, "evil.example")]), None), Err(Framing::HostRefused));
        assert_eq!(policy.check(&HeaderMap::new(), Some("127.0.0.1:80")), Ok(()));
        let page = [(header::HOST, "localhost"), (header::ORIGIN, "http://localhost:3000")];
        assert_eq!(policy.check(&headers(&page), None), Ok(()));
        let foreign = [(header::HOST, "localhost"), (header::ORIGIN, "https://evil.example")];
        assert_eq!(policy.check(&headers(&foreign), None), Err(Framing::OriginRefused));
        let twice =
            [(header::HOST, "localhost"), (header::ORIGIN, "http://localhost"), (header::ORIGIN, "http://localhost")];
        assert_eq!(policy.check(&headers(&twice), None), Err(Framing::DuplicateOrigin));
    }

    #[test]
    fn allowlists_replace_the_loopback_defaults() {
        let policy = OriginPolicy::new(vec!["https://app.example".into()], vec!["MCP.example".into()], false);
        let ok = [(header::HOST, "mcp.example:443"), (header::ORIGIN, "https://app.example")];
        assert_eq!(policy.check(&headers(&ok), None), Ok(()));
        assert_eq!(policy.check(&headers(&[(header::HOST, "localhost")]), None), Err(Framing::HostRefused));
        // A public gateway without a host allowlist takes any Host.
        let open = OriginPolicy::new(vec![], vec![], false);
        assert_eq!(open.check(&headers(&[(header::HOST, "anything")]), None), Ok(()));
        assert_eq!(open.check(&headers(&[(header::ORIGIN, "http://localhost")]), None), Err(Framing::OriginRefused));
    }
}
