//! The one HTTP client that reaches callers' URLs (webhook deliveries and verification), hardened
//! against SSRF: `https` only, redirects and proxies off, allowed ports only, and our own
//! resolver, which resolves, drops every address that is not allowed and hands the client only
//! the allowed ones, so the check and the connection use the same answer (no DNS rebinding in
//! between); `Host` and SNI keep the original name. A URL whose host is a literal address never
//! reaches a resolver, so the same check runs on it before the request.
//!
//! Nothing here logs a URL's path or query, a body or a secret.

mod ranges;
pub(crate) mod signing;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ipnet::IpNet;
use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::config::{Ports, WebhookSettings};
use crate::metrics::METRICS;

pub(crate) use signing::WebhookSecret;

/// The longest callback URL, in bytes.
const MAX_URL_BYTES: usize = 2_048;
/// The most of a response body read (the verification echo); the rest is dropped.
const MAX_RESPONSE_BYTES: usize = 4 * 1024;

/// Why a callback URL is refused before anything is sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UrlRefusal {
    #[error("the callback URL is not a valid absolute https URL without user info, of at most 2048 bytes")]
    Malformed,
    #[error("the callback URL must use https")]
    NotHttps,
    #[error("the callback URL's port is not allowed")]
    Port,
    #[error("the callback URL's address is not allowed")]
    Address,
    #[error("the callback URL is outside the allowed prefixes")]
    NotAllowed,
}

impl UrlRefusal {
    /// The metric label.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Self::Malformed | Self::NotHttps => "url",
            Self::Port => "port",
            Self::Address => "address",
            Self::NotAllowed => "not_allowed",
        }
    }
}

/// What went wrong with an attempt, as the extension's `lastError` categories name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    ConnectionRefused,
    Timeout,
    TlsError,
    Http4xx,
    Http5xx,
    ChallengeFailed,
}

impl Failure {
    pub(crate) fn category(self) -> &'static str {
        match self {
            Self::ConnectionRefused => "connection_refused",
            Self::Timeout => "timeout",
            Self::TlsError => "tls_error",
            Self::Http4xx => "http_4xx",
            Self::Http5xx => "http_5xx",
            Self::ChallengeFailed => "challenge_failed",
        }
    }

    /// The category of a status that is not a success (a `3xx` is a refusal the receiver
    /// chose: never followed).
    pub(crate) fn of_status(status: u16) -> Self {
        if status >= 500 { Self::Http5xx } else { Self::Http4xx }
    }
}

/// An attempt's answer.
#[derive(Debug)]
pub(crate) enum Answered {
    /// The receiver answered: its status, `Retry-After` in seconds, and up to 4 KiB of body.
    Status { status: u16, retry_after: Option<Duration>, body: Bytes },
    /// Nothing usable came back.
    Failed(Failure),
}

/// One POST: the URL, the body's exact bytes, and the headers beside `content-type`.
pub(crate) struct Post<'a> {
    pub(crate) url: &'a Url,
    pub(crate) body: Bytes,
    pub(crate) headers: Vec<(&'static str, String)>,
}

/// The address a resolution refused (the resolver's error, found again in the client's error).
#[derive(Debug, thiserror::Error)]
#[error("no allowed address")]
struct AddressRefused;

struct Policy {
    allow_private: Vec<IpNet>,
    ports: Ports,
    allow: Vec<Url>,
    hosts_file: Option<PathBuf>,
}

impl Policy {
    /// The addresses the hosts file maps `host` to, read afresh (a missing or unreadable file
    /// maps nothing).
    fn hosts(&self, host: &str) -> Option<Vec<IpAddr>> {
        let text = std::fs::read_to_string(self.hosts_file.as_ref()?).ok()?;
        let found: Vec<IpAddr> = text
            .lines()
            .map(|line| line.split('#').next().unwrap_or_default())
            .filter_map(|line| {
                let mut words = line.split_whitespace();
                let address: IpAddr = words.next()?.parse().ok()?;
                words.any(|name| name.eq_ignore_ascii_case(host)).then_some(address)
            })
            .collect();
        (!found.is_empty()).then_some(found)
    }
}

/// The resolver the client connects through: only allowed addresses come out of it.
struct CheckedResolver {
    policy: Arc<Policy>,
}

impl Resolve for CheckedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<IpAddr> = match policy.hosts(&host) {
                Some(mapped) => mapped,
                None => tokio::net::lookup_host((host.as_str(), 0)).await?.map(|addr| addr.ip()).collect(),
            };
            let allowed: Vec<SocketAddr> = found
                .into_iter()
                .filter(|ip| ranges::allowed(*ip, &policy.allow_private))
                .map(|ip| SocketAddr::new(ip, 0))
                .collect();
            if allowed.is_empty() {
                return Err(Box::new(AddressRefused) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

/// Why the egress client could not be built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EgressError {
    #[error("cannot read --events-webhook-ca-file {path}: {source}")]
    CaFile { path: String, source: std::io::Error },
    #[error("--events-webhook-ca-file holds no usable PEM certificate: {0}")]
    Certificates(reqwest::Error),
    #[error("building the webhook HTTP client: {0}")]
    Client(reqwest::Error),
}

/// The hardened client.
pub(crate) struct Egress {
    client: reqwest::Client,
    policy: Arc<Policy>,
}

impl Egress {
    pub(crate) fn new(settings: &WebhookSettings) -> Result<Self, EgressError> {
        let policy = Arc::new(Policy {
            allow_private: settings.allow_private.clone(),
            ports: settings.ports.clone(),
            allow: settings.allow.iter().filter_map(|prefix| Url::parse(prefix).ok()).collect(),
            hosts_file: settings.hosts_file.clone(),
        });
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .https_only(true)
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout)
            .user_agent(concat!("taskgate/", env!("CARGO_PKG_VERSION")))
            .dns_resolver(Arc::new(CheckedResolver { policy: policy.clone() }));
        if let Some(path) = &settings.ca_file {
            let pem = std::fs::read(path)
                .map_err(|source| EgressError::CaFile { path: path.display().to_string(), source })?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(EgressError::Certificates)?;
            builder = builder.tls_certs_merge(certs);
        }
        Ok(Self { client: builder.build().map_err(EgressError::Client)?, policy })
    }

    /// Parses and checks a callback URL: absolute `https`, no user info, bounded, an allowed
    /// port, inside the allow-list when there is one, and a literal address only if allowed.
    /// Names are checked at each connection, by the resolver.
    pub(crate) fn check_url(&self, text: &str) -> Result<Url, UrlRefusal> {
        if text.len() > MAX_URL_BYTES {
            return Err(UrlRefusal::Malformed);
        }
        let url = Url::parse(text).map_err(|_| UrlRefusal::Malformed)?;
        if url.scheme() != "https" {
            return Err(UrlRefusal::NotHttps);
        }
        if !url.username().is_empty() || url.password().is_some() || url.host().is_none() {
            return Err(UrlRefusal::Malformed);
        }
        let port = url.port_or_known_default().ok_or(UrlRefusal::Malformed)?;
        if !self.policy.ports.allows(port) {
            return Err(UrlRefusal::Port);
        }
        if !self.policy.allow.is_empty() && self.allow_listed(&url).is_none() {
            return Err(UrlRefusal::NotAllowed);
        }
        match url.host() {
            Some(url::Host::Ipv4(v4)) if !ranges::allowed(IpAddr::V4(v4), &self.policy.allow_private) => {
                Err(UrlRefusal::Address)
            }
            Some(url::Host::Ipv6(v6)) if !ranges::allowed(IpAddr::V6(v6), &self.policy.allow_private) => {
                Err(UrlRefusal::Address)
            }
            _ => Ok(url),
        }
    }

    /// The allow-list prefix `url` is under, if any: same scheme, host and port, and a path
    /// at or below the prefix's, segment by segment (`/acme` covers `/acme/x`, not `/acme-evil`).
    pub(crate) fn allow_listed(&self, url: &Url) -> Option<&Url> {
        self.policy.allow.iter().find(|prefix| {
            prefix.scheme() == url.scheme()
                && prefix.host_str() == url.host_str()
                && prefix.port_or_known_default() == url.port_or_known_default()
                && under(url.path(), prefix.path())
        })
    }

    /// Sends one POST and reads the answer. A refused URL (checked again: the policy is
    /// applied at delivery time) or address counts as `connection_refused`, and is counted by
    /// reason.
    pub(crate) async fn post(&self, post: Post<'_>) -> Answered {
        if let Err(refusal) = self.check_url(post.url.as_str()) {
            METRICS.webhook_refused.with_label_values(&[refusal.label()]).inc();
            return Answered::Failed(Failure::ConnectionRefused);
        }
        let mut request = self.client.post(post.url.clone()).header("content-type", "application/json");
        for (name, value) in post.headers {
            request = request.header(name, value);
        }
        let response = match request.body(post.body).send().await {
            Ok(response) => response,
            Err(err) => return Answered::Failed(classify(&err)),
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = read_bounded(response).await;
        Answered::Status { status, retry_after, body }
    }
}

/// Up to [`MAX_RESPONSE_BYTES`] of the body; an error mid-body keeps what came.
async fn read_bounded(mut response: reqwest::Response) -> Bytes {
    let mut body = Vec::new();
    while body.len() < MAX_RESPONSE_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk[..chunk.len().min(MAX_RESPONSE_BYTES - body.len())]),
            _ => break,
        }
    }
    Bytes::from(body)
}

/// The category of a failed send, and the refused-address metric when that was the cause.
/// Whether `path` is `prefix` or below it: a prefix ending in `/` covers what starts with it;
/// otherwise the next character must start a new segment.
fn under(path: &str, prefix: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => prefix.ends_with('/') || rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

fn classify(err: &reqwest::Error) -> Failure {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(cause) = source {
        if cause.is::<AddressRefused>() {
            METRICS.webhook_refused.with_label_values(&["address"]).inc();
            return Failure::ConnectionRefused;
        }
        source = cause.source();
    }
    if err.is_timeout() {
        return Failure::Timeout;
    }
    // The causes only: the error itself names the URL, whose path may say anything.
    let mut text = String::new();
    let mut cause = std::error::Error::source(err);
    while let Some(inner) = cause {
        text.push_str(&inner.to_string().to_ascii_lowercase());
        text.push(' ');
        cause = inner.source();
    }
    if text.contains("certificate") || text.contains("tls") || text.contains("handshake") {
        Failure::TlsError
    } else {
        Failure::ConnectionRefused
    }
}

impl Egress {
    /// The verification handshake (docs/events.md, 1.7): a signed `verification` envelope with
    /// a fresh challenge, which the endpoint must echo (`{"challenge"}`) in a `2xx` body,
    /// compared in constant time.
    pub(crate) async fn verify(&self, url: &Url, subscription: &str, secret: &WebhookSecret) -> Result<(), Failure> {
        use subtle::ConstantTimeEq as _;
        let challenge = random_token();
        let body = serde_json::json!({ "type": "verification", "challenge": challenge }).to_string();
        let id = format!("msg_verification_{}", random_token());
        let timestamp = unix_seconds();
        let signature = secret.sign(&id, timestamp, body.as_bytes());
        let post = Post {
            url,
            body: Bytes::from(body),
            headers: vec![
                ("webhook-id", id),
                ("webhook-timestamp", timestamp.to_string()),
                ("webhook-signature", signature),
                ("x-mcp-subscription-id", subscription.to_owned()),
            ],
        };
        match self.post(post).await {
            Answered::Status { status: 200..=299, body, .. } => {
                let echoed = serde_json::from_slice::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v.get("challenge").and_then(|c| c.as_str()).map(str::to_owned))
                    .unwrap_or_default();
                if bool::from(echoed.as_bytes().ct_eq(challenge.as_bytes())) {
                    Ok(())
                } else {
                    METRICS.webhook_refused.with_label_values(&["verification"]).inc();
                    Err(Failure::ChallengeFailed)
                }
            }
            Answered::Status { status, .. } => Err(Failure::of_status(status)),
            Answered::Failed(failure) => Err(failure),
        }
    }
}

/// 32 random hex digits: a challenge, or the random part of a control envelope's id.
pub(crate) fn random_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Now, in Unix seconds (a `webhook-timestamp`).
pub(crate) fn unix_seconds() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_allow_listed_prefix_covers_whole_segments() {
        assert!(super::under("/acme", "/acme"));
        assert!(super::under("/acme/hooks", "/acme"));
        assert!(super::under("/acme/hooks", "/acme/"));
        assert!(super::under("/anything", "/"));
        assert!(!super::under("/acme-evil", "/acme"));
        assert!(!super::under("/acm", "/acme"));
    }

    use super::*;

    fn egress(allow: &[&str], private: &[&str], ports: Ports, hosts: Option<PathBuf>) -> Egress {
        let settings = WebhookSettings {
            delivery: crate::config::DeliveryMode::Off,
            allow: allow.iter().map(|s| (*s).to_owned()).collect(),
            allow_private: private.iter().map(|s| s.parse().unwrap()).collect(),
            ports,
            hosts_file: hosts,
            ca_file: None,
            min_ttl: Duration::from_secs(60),
            max_ttl: Duration::from_secs(3600),
            no_expiry: false,
            max_per_principal: 1,
            max_per_tenant: 1,
            timeout: Duration::from_secs(1),
            retry_base: Duration::from_secs(1),
            max_attempts: 1,
            suspend_after: 1,
            lease: Duration::from_secs(10),
            verified_ttl: Duration::from_secs(10),
        };
        Egress::new(&settings).unwrap()
    }

    #[test]
    fn urls_are_https_on_allowed_ports_and_literal_addresses_are_checked() {
        let strict = egress(&[], &[], Ports::Only(vec![443, 8443]), None);
        assert!(strict.check_url("https://example.com/hook?x=1").is_ok());
        assert_eq!(strict.check_url("http://example.com/"), Err(UrlRefusal::NotHttps));
        assert_eq!(strict.check_url("https://example.com:8080/"), Err(UrlRefusal::Port));
        assert_eq!(strict.check_url("https://user:pw@example.com/"), Err(UrlRefusal::Malformed));
        assert_eq!(strict.check_url("not a url"), Err(UrlRefusal::Malformed));
        assert_eq!(strict.check_url(&format!("https://example.com/{}", "a".repeat(2_048))), Err(UrlRefusal::Malformed));
        for literal in
            ["https://127.0.0.1/", "https://[::1]/", "https://[::ffff:127.0.0.1]/", "https://169.254.169.254/"]
        {
            assert_eq!(strict.check_url(literal), Err(UrlRefusal::Address), "{literal}");
        }
        let loopback = egress(&[], &["127.0.0.0/8"], Ports::Any, None);
        assert!(loopback.check_url("https://127.0.0.1:9/").is_ok());
        assert_eq!(loopback.check_url("https://[::1]/"), Err(UrlRefusal::Address));
    }

    #[test]
    fn the_allow_list_is_by_origin_and_path_prefix() {
        let listed = egress(&["https://hooks.example.com/acme/"], &[], Ports::Any, None);
        assert!(listed.check_url("https://hooks.example.com/acme/in").is_ok());
        assert_eq!(listed.check_url("https://hooks.example.com/other"), Err(UrlRefusal::NotAllowed));
        assert_eq!(listed.check_url("https://hooks.example.com:444/acme/in"), Err(UrlRefusal::NotAllowed));
        let url = Url::parse("https://hooks.example.com/acme/in").unwrap();
        assert!(listed.allow_listed(&url).is_some());
    }

    #[test]
    fn the_hosts_file_is_read_at_each_lookup() {
        let path = std::env::temp_dir().join(format!("taskgate-hosts-{}", std::process::id()));
        std::fs::write(&path, "127.0.0.2 hooks.test other.test # a comment\n").unwrap();
        let mapped = egress(&[], &[], Ports::Any, Some(path.clone()));
        assert_eq!(mapped.policy.hosts("hooks.test"), Some(vec!["127.0.0.2".parse().unwrap()]));
        assert_eq!(mapped.policy.hosts("nowhere.test"), None);
        std::fs::write(&path, "127.0.0.1 hooks.test\n").unwrap();
        assert_eq!(mapped.policy.hosts("hooks.test"), Some(vec!["127.0.0.1".parse().unwrap()]));
        std::fs::remove_file(&path).unwrap();
    }
}
