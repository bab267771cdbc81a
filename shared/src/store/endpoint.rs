//! Where Redis is and how to log in to it: a URL (`redis://`, `rediss://`, and their `+cluster`
//! and `+sentinel` forms), an ACL user and password given beside it (and the sentinels' own),
//! and the PEM files of TLS. Turned into
//! `redis` clients here, so that the rest of the store sees only connections.
//!
//! Server certificates are always verified, against the system's roots or a given CA: a URL
//! asking for `#insecure` is refused. Credentials never leave this module in text: every URL
//! shown to a person goes through [`redact`].

use redis::cluster::ClusterClientBuilder;
use redis::{Client, ClientTlsConfig, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, TlsCertificates};

use super::StoreError;

/// A Redis to connect to. Its `Debug` shows the URL redacted and no secret.
#[derive(Clone, Default)]
pub struct Endpoint {
    /// `redis://`, `rediss://`, `redis+cluster://` or `rediss+cluster://`, maybe with
    /// `user:password@`.
    pub url: String,
    /// An ACL user, overriding the URL's.
    pub username: Option<String>,
    /// Its password (or `requirepass`), overriding the URL's.
    pub password: Option<String>,
    /// TLS material beyond the system's roots.
    pub tls: TlsPem,
    /// A single endpoint that refuses commands across slots (a proxy in front of a cluster):
    /// every command stays within one hash tag, as on a Cluster.
    pub single_slot: bool,
    /// The sentinels' own login, for a `redis+sentinel://` URL (the URL's login and the
    /// username and password above are the data nodes').
    pub sentinel: SentinelLogin,
}

/// An ACL user and password of the sentinels.
#[derive(Clone, Default)]
pub struct SentinelLogin {
    pub username: Option<String>,
    pub password: Option<String>,
}

/// PEM contents (not paths) of a private CA and of a client certificate for mutual TLS.
#[derive(Clone, Default)]
pub struct TlsPem {
    /// CAs trusted instead of the system's roots.
    pub ca: Option<Vec<u8>>,
    /// Certificate chain and private key of this client.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl TlsPem {
    pub(super) fn is_empty(&self) -> bool {
        self.ca.is_none() && self.client.is_none()
    }

    pub(super) fn certificates(&self) -> TlsCertificates {
        TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| ClientTlsConfig { client_cert: cert.clone(), client_key: key.clone() }),
            root_cert: self.ca.clone(),
        }
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &redact(&self.url))
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("ca", &self.tls.ca.is_some())
            .field("client_cert", &self.tls.client.is_some())
            .field("single_slot", &self.single_slot)
            .field("sentinel_username", &self.sentinel.username)
            .field("sentinel_password", &self.sentinel.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Endpoint {
    /// A URL alone (credentials, if any, in it).
    pub fn new(url: impl Into<String>) -> Self {
        Self { url: url.into(), ..Self::default() }
    }

    /// The URL as it may be shown: no password, no user name.
    pub fn redacted(&self) -> String {
        redact(&self.url)
    }

    /// The seed URLs of a Cluster URL; `None` for a single endpoint.
    pub(super) fn cluster_seeds(&self) -> Option<Vec<String>> {
        cluster_seeds(&self.url)
    }

    /// A client for one node: the URL itself, or one seed of a Cluster.
    pub(super) fn client(&self, url: &str) -> Result<Client, StoreError> {
        let info = self.connection_info(url)?;
        if self.tls.is_empty() {
            return Ok(Client::open(info)?);
        }
        Ok(Client::build_with_tls(info, self.tls.certificates())?)
    }

    /// The Cluster client builder over `seeds`, with this endpoint's login (carried by each
    /// seed's connection info; the builder takes the first one's) and TLS.
    pub(super) fn cluster_builder(&self, seeds: &[String]) -> Result<ClusterClientBuilder, StoreError> {
        let infos = seeds.iter().map(|s| self.connection_info(s)).collect::<Result<Vec<_>, _>>()?;
        let builder = ClusterClientBuilder::new(infos);
        Ok(if self.tls.is_empty() { builder } else { builder.certs(self.tls.certificates()) })
    }

    pub(super) fn connection_info(&self, url: &str) -> Result<ConnectionInfo, StoreError> {
        let info = url.into_connection_info().map_err(|err| StoreError::Config(describe_url_error(&err, url)))?;
        match info.addr() {
            ConnectionAddr::TcpTls { insecure: true, .. } => {
                return Err(StoreError::Config(format!(
                    "{}: `#insecure` would skip certificate checks, which taskgate never does; \
                     trust a private CA with --redis-ca-file instead",
                    redact(url)
                )));
            }
            ConnectionAddr::TcpTls { .. } => {}
            _ if !self.tls.is_empty() => {
                return Err(StoreError::Config(format!(
                    "{}: --redis-ca-file and --redis-client-cert need a TLS URL (rediss://, rediss+cluster:// or \
                     rediss+sentinel://)",
                    redact(url)
                )));
            }
            _ => {}
        }
        let mut settings = info.redis_settings().clone();
        if let Some(username) = &self.username {
            settings = settings.set_username(username);
        }
        if let Some(password) = &self.password {
            settings = settings.set_password(password);
        }
        Ok(info.set_redis_settings(settings))
    }
}

/// A parse error of a URL, without the URL's secrets (the crate's message may quote it).
fn describe_url_error(err: &redis::RedisError, url: &str) -> String {
    let mut text = err.to_string();
    if let Some(start) = url.find("://")
        && let Some(at) = url[start + 3..].rfind('@')
    {
        let userinfo = &url[start + 3..start + 3 + at];
        if !userinfo.is_empty() {
            text = text.replace(userinfo, "***");
        }
    }
    format!("{}: {text}", redact(url))
}

/// `url` without its user name and password (`rediss://***@host:6380`); also each seed of a
/// Cluster URL, whose `@` may come before the host list.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // Not a URL: it might be anything, a password among it.
        return "<not a URL>".to_owned();
    };
    match rest.rsplit_once('@') {
        Some((_, hosts)) => format!("{scheme}://***@{hosts}"),
        None => url.to_owned(),
    }
}

/// The seed node URLs of a `redis+cluster://` or `rediss+cluster://` URL; `None` for any other.
fn cluster_seeds(url: &str) -> Option<Vec<String>> {
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("redis+cluster://") {
        ("redis", rest)
    } else {
        ("rediss", url.strip_prefix("rediss+cluster://")?)
    };
    let (userinfo, hosts) = match rest.rsplit_once('@') {
        Some((userinfo, hosts)) => (format!("{userinfo}@"), hosts),
        None => (String::new(), rest),
    };
    Some(
        hosts
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .map(|host| format!("{scheme}://{userinfo}{host}"))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_urls_name_their_seed_nodes() {
        assert_eq!(cluster_seeds("redis://a:1"), None);
        assert_eq!(
            cluster_seeds("redis+cluster://u:p@a:1,b:2").unwrap(),
            vec!["redis://u:p@a:1".to_owned(), "redis://u:p@b:2".to_owned()]
        );
        assert_eq!(cluster_seeds("rediss+cluster://a:1").unwrap(), vec!["rediss://a:1".to_owned()]);
    }

    #[test]
    fn redaction_hides_user_and_password() {
        assert_eq!(redact("rediss://app:s3cr:et@cache.example:6380/0"), "rediss://***@cache.example:6380/0");
        assert_eq!(redact("redis+cluster://u:p@a:1,b:2"), "redis+cluster://***@a:1,b:2");
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redact("hunter2"), "<not a URL>");
        let endpoint = Endpoint { password: Some("pw-secret".into()), ..Endpoint::new("redis://u:url-secret@h:1") };
        let shown = format!("{endpoint:?}");
        assert!(!shown.contains("secret"), "{shown}");
    }

    #[test]
    fn verification_is_never_turned_off() {
        let err = Endpoint::new("rediss://h:6380/#insecure").client("rediss://h:6380/#insecure").unwrap_err();
        assert!(err.to_string().contains("--redis-ca-file"), "{err}");
    }

    #[test]
    fn tls_files_need_a_tls_url() {
        let endpoint =
            Endpoint { tls: TlsPem { ca: Some(b"pem".to_vec()), client: None }, ..Endpoint::new("redis://h:6379") };
        let err = endpoint.client("redis://h:6379").unwrap_err();
        assert!(err.to_string().contains("rediss://"), "{err}");
    }

    #[test]
    fn the_flags_override_the_urls_login() {
        let endpoint = Endpoint {
            username: Some("taskgate".into()),
            password: Some("flag".into()),
            ..Endpoint::new("redis://old:url@h:6379")
        };
        let info = endpoint.connection_info(&endpoint.url).unwrap();
        assert_eq!(info.redis_settings().username(), Some("taskgate"));
        assert_eq!(info.redis_settings().password(), Some("flag"));
    }
}
