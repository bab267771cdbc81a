//! Redis behind Sentinel: `redis+sentinel://[user:pass@]host:port[,host:port…]/<master>[?db=N]`
//! (`rediss+sentinel://` for TLS to the sentinels and the data nodes alike).
//!
//! The `redis` crate's [`SentinelClient`] finds the primary: it asks the sentinels for the
//! master of that name, skips one they mark down, and checks with `ROLE` that the node it found
//! is a primary. What it does not do is follow a failover: a connection made from its answer
//! stays on that address for ever, and its `ConnectionManager` reconnects there. So taskgate
//! keeps the primary it found in a [`Follower`] and drops it the moment it stops being one:
//! - a command fails on the connection (dropped, refused, timed out: the primary died or
//!   Sentinel killed its clients while demoting it);
//! - a reply says `READONLY` (the node is a replica now).
//!
//! The next command asks the sentinels again, so it reaches the new primary as soon as they
//! name it, and fails fast (within the command timeout) while they cannot. The command that
//! saw the loss is not retried: it may have been applied, and only the caller knows whether
//! it is safe to send again. Scripts are loaded again on the new primary by the `NOSCRIPT`
//! fallback of every script call. The dedicated connections (blocking reads, durable creates,
//! subscriptions) are made from the same resolved primary and checked with `ROLE` before they
//! are lent again.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionLike as _, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{AsyncConnectionConfig, Client, Cmd, ConnectionAddr, Pipeline, RedisError, RedisResult, TlsMode, Value};

use super::{Endpoint, StoreError, redact};
use crate::telemetry::metrics::REDIS;

/// What a sentinel URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SentinelUrl {
    /// `rediss+sentinel://`: TLS to the sentinels and to the data nodes.
    tls: bool,
    /// `user:password@` of the data nodes, as written (maybe empty).
    userinfo: String,
    sentinels: Vec<(String, u16)>,
    master: String,
    db: i64,
}

impl SentinelUrl {
    /// The URL's parts; `None` for a URL of another kind.
    pub(super) fn parse(url: &str) -> Option<Result<Self, StoreError>> {
        let (tls, rest) = if let Some(rest) = url.strip_prefix("redis+sentinel://") {
            (false, rest)
        } else {
            (true, url.strip_prefix("rediss+sentinel://")?)
        };
        Some(Self::parts(tls, rest).map_err(|why| StoreError::Config(format!("{}: {why}", redact(url)))))
    }

    fn parts(tls: bool, rest: &str) -> Result<Self, String> {
        let (userinfo, rest) = match rest.rsplit_once('@') {
            Some((userinfo, rest)) => (userinfo.to_owned(), rest),
            None => (String::new(), rest),
        };
        let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (master, query) = path.split_once('?').unwrap_or((path, ""));
        if master.is_empty() || master.contains('/') {
            return Err("a sentinel URL ends with the master's name: redis+sentinel://host:26379/mymaster".into());
        }
        let mut db = 0;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("db", n)) => db = n.parse().map_err(|_| format!("db={n} is not a database number"))?,
                _ => return Err(format!("unknown parameter {pair:?} (only db=N)")),
            }
        }
        let sentinels = hosts
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .map(|host| {
                let (name, port) = host.rsplit_once(':').unwrap_or((host, "26379"));
                let port = port.parse().map_err(|_| format!("{host}: not host:port"))?;
                let name = name.trim_start_matches('[').trim_end_matches(']');
                if name.is_empty() {
                    return Err(format!("{host}: no host"));
                }
                Ok((name.to_owned(), port))
            })
            .collect::<Result<Vec<_>, String>>()?;
        if sentinels.is_empty() {
            return Err("no sentinel address".into());
        }
        Ok(Self { tls, userinfo, sentinels, master: master.to_owned(), db })
    }

    /// The URL of a data node at `host:port`, with the URL's login and database.
    fn node_url(&self, host: &str, port: u16) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let at = if self.userinfo.is_empty() { String::new() } else { format!("{}@", self.userinfo) };
        let host = if host.contains(':') { format!("[{host}]") } else { host.to_owned() };
        format!("{scheme}://{at}{host}:{port}/{}", self.db)
    }
}

/// The primary found last, and the connection to it.
struct Primary {
    /// Bumped at every resolution: a loss reported for an older one is stale.
    generation: u64,
    address: String,
    client: Client,
    conn: Option<MultiplexedConnection>,
}

/// Follows the primary of one Sentinel-managed master (module docs).
pub(super) struct Follower {
    sentinel: tokio::sync::Mutex<SentinelClient>,
    endpoint: Endpoint,
    url: SentinelUrl,
    timeout: Duration,
    current: Mutex<Option<Primary>>,
    /// One resolution or connection at a time; the others wait for its outcome.
    resolving: tokio::sync::Mutex<()>,
    generations: AtomicU64,
    /// The address of the last primary found, to count changes.
    last_address: Mutex<Option<String>>,
}

impl Follower {
    pub(super) fn new(endpoint: &Endpoint, url: SentinelUrl, timeout: Duration) -> Result<Self, StoreError> {
        let addrs = url.sentinels.iter().map(|(host, port)| {
            if url.tls {
                ConnectionAddr::TcpTls { host: host.clone(), port: *port, insecure: false, tls_params: None }
            } else {
                ConnectionAddr::Tcp(host.clone(), *port)
            }
        });
        let mut builder = SentinelClientBuilder::new(addrs, &url.master, SentinelServerType::Master)?;
        // The data nodes' login, as for every other URL: the flags over the URL's.
        let node = endpoint.connection_info(&url.node_url("localhost", 6379))?;
        let settings = node.redis_settings();
        if let Some(username) = settings.username() {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = settings.password() {
            builder = builder.set_client_to_redis_password(password);
        }
        builder = builder.set_client_to_redis_db(url.db);
        if let Some(username) = &endpoint.sentinel.username {
            builder = builder.set_client_to_sentinel_username(username);
        }
        if let Some(password) = &endpoint.sentinel.password {
            builder = builder.set_client_to_sentinel_password(password);
        }
        if url.tls {
            builder =
                builder.set_client_to_redis_tls_mode(TlsMode::Secure).set_client_to_sentinel_tls_mode(TlsMode::Secure);
            if !endpoint.tls.is_empty() {
                builder = builder
                    .set_client_to_redis_certificates(endpoint.tls.certificates())
                    .set_client_to_sentinel_certificates(endpoint.tls.certificates());
            }
        }
        Ok(Self {
            sentinel: tokio::sync::Mutex::new(builder.build()?),
            endpoint: endpoint.clone(),
            url,
            timeout,
            current: Mutex::new(None),
            resolving: tokio::sync::Mutex::new(()),
            generations: AtomicU64::new(0),
            last_address: Mutex::new(None),
        })
    }

    /// The master's name, as the URL gives it.
    pub(super) fn master(&self) -> &str {
        &self.url.master
    }

    /// The primary's address as last found (`None` while none is known).
    pub(super) fn address(&self) -> Option<String> {
        self.lock().as_ref().map(|p| p.address.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Primary>> {
        self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A client for the current primary, asking the sentinels when none is known. Boxed: the
    /// crate's lookup is a deep future, and it would otherwise be laid out inside every caller's.
    pub(super) fn client(&self) -> futures::future::BoxFuture<'_, Result<Client, StoreError>> {
        Box::pin(self.resolve())
    }

    async fn resolve(&self) -> Result<Client, StoreError> {
        if let Some(primary) = self.lock().as_ref() {
            return Ok(primary.client.clone());
        }
        let _one = self.resolving.lock().await;
        if let Some(primary) = self.lock().as_ref() {
            return Ok(primary.client.clone());
        }
        let asked = tokio::time::timeout(self.timeout, async { self.sentinel.lock().await.async_get_client().await });
        let found = match asked.await {
            Ok(Ok(found)) => found,
            Ok(Err(err)) => return Err(self.no_primary(&err.to_string())),
            Err(_) => return Err(self.no_primary(&format!("no answer within {:?}", self.timeout))),
        };
        let (host, port) = match found.get_connection_info().addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => (host.clone(), *port),
            other => return Err(StoreError::Config(format!("the sentinels named a primary at {other:?}"))),
        };
        let address = format!("{host}:{port}");
        let client = self.endpoint.client(&self.url.node_url(&host, port))?;
        self.noticed(&address);
        let generation = self.generations.fetch_add(1, Ordering::Relaxed) + 1;
        *self.lock() = Some(Primary { generation, address, client: client.clone(), conn: None });
        Ok(client)
    }

    /// Why no primary could be found, naming the sentinels and the master (no secret: the URL's
    /// login is not part of either).
    fn no_primary(&self, why: &str) -> StoreError {
        let sentinels: Vec<String> = self.url.sentinels.iter().map(|(h, p)| format!("{h}:{p}")).collect();
        StoreError::NoPrimary(format!(
            "the sentinels at {} name no reachable primary for master {:?}: {why}",
            sentinels.join(","),
            self.url.master
        ))
    }

    /// Logs and counts a primary at another address than the last one found.
    fn noticed(&self, address: &str) {
        let mut last = self.last_address.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match last.as_deref() {
            Some(previous) if previous == address => {}
            Some(previous) => {
                REDIS.failover();
                tracing::warn!(master = %self.url.master, from = previous, to = address, "the redis primary moved");
            }
            None => tracing::info!(master = %self.url.master, primary = address, "found the redis primary"),
        }
        *last = Some(address.to_owned());
    }

    /// The multiplexed connection to the current primary, and its generation.
    async fn connection(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        if let Some(Primary { generation, conn: Some(conn), .. }) = self.lock().as_ref() {
            return Ok((*generation, conn.clone()));
        }
        let client = self.client().await.map_err(into_redis)?;
        let _one = self.resolving.lock().await;
        if let Some(Primary { generation, conn: Some(conn), .. }) = self.lock().as_ref() {
            return Ok((*generation, conn.clone()));
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let conn = client.get_multiplexed_async_connection_with_config(&config).await;
        let mut current = self.lock();
        let Some(primary) = current.as_mut() else {
            return Err(lost_primary());
        };
        match conn {
            Ok(conn) => {
                primary.conn = Some(conn.clone());
                Ok((primary.generation, conn))
            }
            Err(err) => {
                // The node the sentinels named cannot be reached: ask them again next time.
                *current = None;
                Err(err)
            }
        }
    }

    /// Forgets the primary of `generation`, so the next command asks the sentinels again.
    pub(super) fn lost(&self, generation: u64) {
        let mut current = self.lock();
        if current.as_ref().is_some_and(|p| p.generation == generation) {
            *current = None;
        }
    }

    /// Forgets whatever primary is known (a dedicated connection found it demoted).
    pub(super) fn lost_any(&self) {
        *self.lock() = None;
    }

    pub(super) async fn send(&self, cmd: &Cmd) -> RedisResult<Value> {
        let (generation, mut conn) = self.connection().await?;
        let reply = conn.req_packed_command(cmd).await;
        if lost_by(&reply) {
            self.lost(generation);
        }
        reply
    }

    pub(super) async fn send_pipeline(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let (generation, mut conn) = self.connection().await?;
        let replies = conn.req_packed_commands(pipeline, offset, count).await;
        let lost = match &replies {
            Ok(values) => values.iter().any(read_only),
            Err(err) => connection_lost(err),
        };
        if lost {
            self.lost(generation);
        }
        replies
    }
}

/// Whether a reply shows that the connection no longer reaches a primary.
fn lost_by(reply: &RedisResult<Value>) -> bool {
    match reply {
        Ok(value) => read_only(value),
        Err(err) => connection_lost(err),
    }
}

/// `READONLY`: the node was demoted to a replica.
pub(super) fn read_only(value: &Value) -> bool {
    matches!(value, Value::ServerError(err) if err.code() == "READONLY")
}

pub(super) fn connection_lost(err: &RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_timeout()
        || err.code() == Some("READONLY")
}

fn lost_primary() -> RedisError {
    RedisError::from(std::io::Error::new(std::io::ErrorKind::NotConnected, "the redis primary was lost"))
}

/// A resolution failure as the error of the command that needed it: a connection error, which
/// callers treat as "unavailable, retry".
fn into_redis(err: StoreError) -> RedisError {
    match err {
        StoreError::Redis(err) => err,
        other => RedisError::from(std::io::Error::new(std::io::ErrorKind::NotConnected, other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_urls_name_their_sentinels_and_master() {
        let url = SentinelUrl::parse("redis+sentinel://u:p@a:26379,b:26380/mymaster?db=2").unwrap().unwrap();
        assert_eq!(url.sentinels, vec![("a".to_owned(), 26379), ("b".to_owned(), 26380)]);
        assert_eq!((url.master.as_str(), url.db, url.tls), ("mymaster", 2, false));
        assert_eq!(url.node_url("10.0.0.5", 6379), "redis://u:p@10.0.0.5:6379/2");
        let tls = SentinelUrl::parse("rediss+sentinel://s1/m").unwrap().unwrap();
        assert_eq!(tls.node_url("h", 6380), "rediss://h:6380/0");
        assert_eq!(tls.sentinels, vec![("s1".to_owned(), 26379)], "the sentinel's default port");
        assert!(SentinelUrl::parse("redis://h:6379").is_none());
    }

    #[test]
    fn a_sentinel_url_must_name_its_master() {
        for bad in
            ["redis+sentinel://a:26379", "redis+sentinel://a:26379/", "redis+sentinel:///m", "redis+sentinel://a:x/m"]
        {
            let err = SentinelUrl::parse(bad).unwrap().unwrap_err();
            assert!(matches!(err, StoreError::Config(_)), "{bad}: {err}");
        }
        let err = SentinelUrl::parse("redis+sentinel://u:secret@a:1").unwrap().unwrap_err().to_string();
        assert!(err.contains("master's name") && !err.contains("secret"), "{err}");
        assert!(SentinelUrl::parse("redis+sentinel://a/m?timeout=1").unwrap().is_err(), "unknown parameters");
    }
}
