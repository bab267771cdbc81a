//! Redis behind Sentinel: `redis+sentinel://[user:pass@]host:port[,host:port…]/<master>[?db=N]`
//! (`rediss+sentinel://` for TLS to the sentinels and the data nodes alike).
//!
//! taskgate asks the sentinels for the master of that name ([`ask`]: every sentinel at once, the
//! answer with the highest configuration epoch wins, and none under an older epoch than one
//! already seen), connects, and checks with `ROLE` on that very connection that the node is a
//! primary. It keeps the primary it found in a [`Follower`]
//! and leaves it the moment it stops being one:
//! - a command fails on the connection (dropped, refused, timed out: the primary died or
//!   Sentinel killed its clients while demoting it);
//! - a reply says `READONLY` (the node is a replica now);
//! - the periodic re-check ([`Follower::recheck`], every [`CHECK_EVERY`]) finds that the node
//!   answers `ROLE` as a replica, or that the sentinels name another primary. This is what
//!   catches a primary cut off from the sentinels and its replicas while this process still
//!   reaches it: it keeps answering as a primary, refuses nothing, and is never demoted while
//!   cut off, so nothing else would make a process leave it.
//!
//! The next command asks the sentinels again, so it reaches the new primary as soon as they
//! name it, and fails fast (within the command timeout) while they cannot. The command that
//! saw the loss is not retried: it may have been applied, and only the caller knows whether
//! it is safe to send again. Scripts are loaded again on the new primary by the `NOSCRIPT`
//! fallback of every script call.
//!
//! A primary left because the sentinels named another, or because it answers as a replica, is
//! a *move*: every connection made to it before is dead to taskgate from then on. The
//! dedicated connections (blocking reads, durable creates) carry the move count they were made
//! under and refuse every command once it changed ([`Follower::still_followed`]); the pools'
//! idle ones are closed by the store's watcher; subscriptions end through [`PrimaryMoves`].
//!
//! When no sentinel answers, the primary is kept: sentinels that are down (restarting, say) are
//! far more common than a partition, and silence proves nothing about the primary. It is still
//! checked with `ROLE` every period, a warning is logged once the silence lasts
//! [`SILENCE_WARN`], and `min-replicas-to-write` on the primary (docs/redis.md) is what stops
//! an old primary cut off from its replicas from taking writes meanwhile.

mod ask;

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike as _, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Client, Cmd, Pipeline, RedisError, RedisResult, Value};

use super::{Endpoint, StoreError, redact};
use crate::telemetry::metrics::REDIS;
use ask::Sentinels;

/// How often the primary is checked while nothing fails: `ROLE` on its connection, and the
/// sentinels asked.
pub(super) const CHECK_EVERY: Duration = Duration::from_secs(1);

/// How long one periodic check may wait for each sentinel (and for `ROLE`), at most: a check
/// never holds up the next by more than this.
const CHECK_BOUND: Duration = Duration::from_secs(1);

/// How long the sentinels may stay silent before a warning says that the primary is used
/// unconfirmed.
const SILENCE_WARN: Duration = Duration::from_secs(10);

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
    sentinels: Sentinels,
    endpoint: Endpoint,
    url: SentinelUrl,
    timeout: Duration,
    current: Mutex<Option<Primary>>,
    /// One resolution or connection at a time; the others wait for its outcome.
    resolving: tokio::sync::Mutex<()>,
    generations: AtomicU64,
    /// The address of the last primary found, to count changes.
    last_address: Mutex<Option<String>>,
    /// How many times a primary was left as one that must not be written to any more (module
    /// docs): connections made under an older count are refused.
    moves: tokio::sync::watch::Sender<u64>,
    /// Since when no sentinel has confirmed the primary, and whether that was said.
    silent: Mutex<Option<(Instant, bool)>>,
}

impl Follower {
    pub(super) fn new(endpoint: &Endpoint, url: SentinelUrl, timeout: Duration) -> Result<Self, StoreError> {
        // The data nodes' URL must make a client, as for every other URL (TLS files beside a
        // plain URL are refused here, at start).
        endpoint.connection_info(&url.node_url("localhost", 6379))?;
        Ok(Self {
            sentinels: Sentinels::new(&url, &endpoint.sentinel, &endpoint.tls)?,
            endpoint: endpoint.clone(),
            url,
            timeout,
            current: Mutex::new(None),
            resolving: tokio::sync::Mutex::new(()),
            generations: AtomicU64::new(0),
            last_address: Mutex::new(None),
            moves: tokio::sync::watch::Sender::new(0),
            silent: Mutex::new(None),
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

    /// How many times a primary was left (module docs): a connection made under another count
    /// reaches a node that must not be used any more.
    pub(super) fn moves(&self) -> u64 {
        *self.moves.borrow()
    }

    /// Whether a connection made when [`Self::moves`] was `moves` may still be used.
    pub(super) fn still_followed(&self, moves: u64) -> bool {
        self.moves() == moves
    }

    /// Told of every move from now on.
    pub(super) fn subscribe_moves(&self) -> tokio::sync::watch::Receiver<u64> {
        self.moves.subscribe()
    }

    /// A client for the current primary, once a connection to it has answered `ROLE` as a
    /// primary (asking the sentinels when none is known). Boxed: the lookup is a deep future,
    /// and it would otherwise be laid out inside every caller's.
    pub(super) fn client(&self) -> futures::future::BoxFuture<'_, Result<Client, StoreError>> {
        Box::pin(async {
            self.connection().await?;
            self.lock().as_ref().map(|p| p.client.clone()).ok_or_else(|| StoreError::Redis(lost_primary()))
        })
    }

    /// Makes sure a primary is known, asking the sentinels when none is.
    async fn resolve(&self) -> Result<(), StoreError> {
        if self.lock().is_some() {
            return Ok(());
        }
        let _one = self.resolving.lock().await;
        if self.lock().is_some() {
            return Ok(());
        }
        let named = self.sentinels.primary(self.timeout).await.map_err(|why| self.no_primary(&why))?;
        let address = named.address();
        let client = self.endpoint.client(&self.url.node_url(&named.host, named.port))?;
        self.noticed(&address);
        let generation = self.generations.fetch_add(1, Ordering::Relaxed) + 1;
        *self.lock() = Some(Primary { generation, address, client, conn: None });
        Ok(())
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

    /// The multiplexed connection to the current primary, and its generation. A new connection
    /// is used only once it answered `ROLE` as a primary.
    async fn connection(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        if let Some(Primary { generation, conn: Some(conn), .. }) = self.lock().as_ref() {
            return Ok((*generation, conn.clone()));
        }
        self.resolve().await.map_err(into_redis)?;
        let _one = self.resolving.lock().await;
        // The primary as it is now: another may have been found since the resolution above.
        let (generation, client) = match self.lock().as_ref() {
            Some(Primary { generation, conn: Some(conn), .. }) => return Ok((*generation, conn.clone())),
            Some(primary) => (primary.generation, primary.client.clone()),
            None => return Err(lost_primary()),
        };
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let made = async {
            let mut conn = client.get_multiplexed_async_connection_with_config(&config).await?;
            let role = role(&mut conn).await?;
            Ok::<_, RedisError>((conn, role))
        };
        let made = made.await;
        let mut current = self.lock();
        let Some(primary) = current.as_mut().filter(|p| p.generation == generation) else {
            return Err(lost_primary());
        };
        match made {
            Ok((conn, role)) if role == "master" => {
                primary.conn = Some(conn.clone());
                Ok((generation, conn))
            }
            Ok((_, role)) => {
                // Named by the sentinels, but not (or no longer) a primary: ask them again next
                // time, and use nothing of it meanwhile.
                tracing::warn!(master = %self.url.master, node = %primary.address, role, "the node the sentinels named is not a primary");
                *current = None;
                Err(not_primary(&role))
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

    /// Leaves the primary of `generation` as one that must not be written to any more: it is
    /// forgotten, its connection dropped, and every connection made to it refused from now on.
    fn leave(&self, generation: u64) {
        let mut current = self.lock();
        if current.as_ref().is_some_and(|p| p.generation == generation) {
            *current = None;
            drop(current);
            self.moves.send_modify(|moves| *moves += 1);
        }
    }

    /// One periodic check of the primary followed (none known: nothing to check): `ROLE` on its
    /// connection, then the sentinels. Leaves it when it answers as a replica or the sentinels
    /// name another; keeps it while they are silent (module docs).
    pub(super) async fn recheck(&self) {
        let Some((generation, address, conn)) =
            self.lock().as_ref().map(|p| (p.generation, p.address.clone(), p.conn.clone()))
        else {
            return;
        };
        let bound = self.timeout.min(CHECK_BOUND);
        if let Some(mut conn) = conn {
            match tokio::time::timeout(bound, role(&mut conn)).await {
                Ok(Ok(role)) if role == "master" => {}
                Ok(Ok(role)) => {
                    tracing::warn!(master = %self.url.master, primary = %address, role, "the redis primary answers as a replica now; leaving it");
                    return self.leave(generation);
                }
                // Gone: the next command asks the sentinels again.
                Ok(Err(err)) if connection_lost(&err) => return self.lost(generation),
                // Slow, or an error reply: the commands' own timeouts and errors decide.
                Ok(Err(_)) | Err(_) => {}
            }
        }
        match self.sentinels.primary(bound).await {
            Ok(named) if named.address() != address => {
                tracing::warn!(
                    master = %self.url.master,
                    from = %address,
                    to = %named.address(),
                    epoch = named.epoch,
                    "the sentinels name another redis primary; leaving the old one"
                );
                self.confirmed();
                self.leave(generation);
            }
            Ok(_) => self.confirmed(),
            Err(why) => self.unconfirmed(&address, &why),
        }
    }

    fn confirmed(&self) {
        let mut silent = self.silent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((since, true)) = *silent {
            tracing::info!(master = %self.url.master, silent_for = ?since.elapsed(), "the sentinels answer again");
        }
        *silent = None;
    }

    fn unconfirmed(&self, address: &str, why: &str) {
        let mut silent = self.silent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (since, said) = silent.get_or_insert((Instant::now(), false));
        if !*said && since.elapsed() >= SILENCE_WARN {
            *said = true;
            tracing::warn!(
                master = %self.url.master,
                primary = address,
                silent_for = ?since.elapsed(),
                why,
                "no sentinel confirms the redis primary; still using it (min-replicas-to-write on it guards against a split)"
            );
        }
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

/// The node's replication role (`master`, `slave`, `sentinel`), from `ROLE`.
pub(super) async fn role(conn: &mut impl redis::aio::ConnectionLike) -> RedisResult<String> {
    let reply: Vec<Value> = redis::cmd("ROLE").query_async(conn).await?;
    Ok(reply.first().and_then(super::reply::as_string).unwrap_or_default())
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

/// A connection made to a primary that was left since: refused without being sent.
pub(super) fn moved_primary() -> RedisError {
    RedisError::from(std::io::Error::new(std::io::ErrorKind::NotConnected, "the redis primary moved"))
}

/// The node named as the primary answers `ROLE` otherwise: as unavailable as a lost one.
pub(super) fn not_primary(role: &str) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        format!("the node named as the redis primary answers ROLE as {role:?}"),
    ))
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
