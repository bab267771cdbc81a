//! One multiplexed, self-reconnecting Redis connection per process, cloned into every request:
//! no pool checkout on the request path. The same handle speaks to a standalone server (or a
//! replicated primary) and to a Redis Cluster.
//!
//! **Cluster.** A URL `redis+cluster://[user:pass@]host:port[,host:port…]` (or
//! `rediss+cluster://` for TLS) names seed nodes of a Cluster. Every script touches keys of one
//! hash tag, so commands route by their first key. Task events use sharded pub/sub there
//! ([`Store::shard_subscription`]); the other channels stay classic (`PUBLISH` is broadcast over
//! the cluster bus), so a subscriber on any node hears them.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Client, Cmd, Pipeline, RedisFuture, Value};

use tracing::Instrument as _;

use super::dedicated::{Dedicated, Exclusive, Held, MAX_BLOCK, ShardSubscriber, Subscriber};
use super::sentinel::{CHECK_EVERY, Follower, SentinelUrl, moved_primary};
use super::{Endpoint, Keys, StoreError, scripts};
use crate::backoff::Backoff;
use crate::telemetry::metrics::REDIS;
use crate::telemetry::trace;

/// A connection of either kind. Cheap to clone; clones share sockets.
#[derive(Clone)]
pub struct Conn(Inner);

impl Conn {
    pub(super) fn direct(conn: MultiplexedConnection) -> Self {
        Self(Inner::Direct(conn))
    }

    pub(super) fn cluster(conn: ClusterConnection) -> Self {
        Self(Inner::Cluster(conn))
    }

    /// A connection of its own to the primary `follower` follows, made when its move count was
    /// `moves`: refused once that primary is left.
    pub(super) fn pinned(conn: MultiplexedConnection, follower: Arc<Follower>, moves: u64) -> Self {
        Self(Inner::Pinned { conn, follower, moves })
    }

    /// Whether this connection still reaches the node the process follows: always, except for
    /// a [`Self::pinned`] one whose primary was left.
    pub(super) fn still_followed(&self) -> bool {
        match &self.0 {
            Inner::Pinned { follower, moves, .. } => follower.still_followed(*moves),
            _ => true,
        }
    }
}

#[derive(Clone)]
enum Inner {
    Managed(ConnectionManager),
    Direct(MultiplexedConnection),
    Cluster(ClusterConnection),
    /// The primary that Sentinel names now, found again whenever it is lost.
    Sentinel(Arc<Follower>),
    /// A dedicated connection to the primary Sentinel named, made under a move count.
    Pinned {
        conn: MultiplexedConnection,
        follower: Arc<Follower>,
        moves: u64,
    },
}

/// Every command is timed and counted (`taskgate_redis_*`), and gets a span when traces are
/// exported.
impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let sent = match &mut self.0 {
            Inner::Managed(c) => c.req_packed_command(cmd),
            Inner::Direct(c) => c.req_packed_command(cmd),
            Inner::Cluster(c) => c.req_packed_command(cmd),
            Inner::Sentinel(f) => {
                let f = f.clone();
                Box::pin(async move { f.send(cmd).await })
            }
            Inner::Pinned { follower, moves, .. } if !follower.still_followed(*moves) => {
                Box::pin(async { Err(moved_primary()) })
            }
            Inner::Pinned { conn, .. } => conn.req_packed_command(cmd),
        };
        Box::pin(observed(command_label(cmd), sent, failed))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let sent = match &mut self.0 {
            Inner::Managed(c) => c.req_packed_commands(pipeline, offset, count),
            Inner::Direct(c) => c.req_packed_commands(pipeline, offset, count),
            Inner::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Inner::Sentinel(f) => {
                let f = f.clone();
                Box::pin(async move { f.send_pipeline(pipeline, offset, count).await })
            }
            Inner::Pinned { follower, moves, .. } if !follower.still_followed(*moves) => {
                Box::pin(async { Err(moved_primary()) })
            }
            Inner::Pinned { conn, .. } => conn.req_packed_commands(pipeline, offset, count),
        };
        Box::pin(observed("pipeline", sent, |replies: &Vec<Value>| replies.iter().any(failed)))
    }

    fn get_db(&self) -> i64 {
        match &self.0 {
            Inner::Managed(c) => c.get_db(),
            Inner::Direct(c) => c.get_db(),
            Inner::Cluster(c) => c.get_db(),
            Inner::Sentinel(_) => 0,
            Inner::Pinned { conn, .. } => conn.get_db(),
        }
    }
}

/// Times and counts one command (or pipeline). Error replies arrive as `Ok(ServerError)` at
/// this level, so `is_error` looks inside the reply. Spans are made only inside a traced
/// operation: background loops (reads, renewals, reaping, probes) would otherwise start a new
/// trace per command.
async fn observed<T>(
    command: &'static str,
    sent: RedisFuture<'_, T>,
    is_error: impl Fn(&T) -> bool,
) -> redis::RedisResult<T> {
    let start = std::time::Instant::now();
    let reply = if trace::enabled() && !tracing::Span::current().is_none() {
        sent.instrument(tracing::info_span!("redis", otel.name = command, db.system = "redis")).await
    } else {
        sent.await
    };
    REDIS.observe(command, start.elapsed(), reply.as_ref().map_or(true, &is_error));
    reply
}

/// An error reply, except `NOSCRIPT`: the client loads the script and retries at once.
fn failed(reply: &Value) -> bool {
    matches!(reply, Value::ServerError(err) if err.code() != "NOSCRIPT")
}

/// The metric label of a command: its name, or `script:<name>` for one of ours. Only names
/// taskgate sends are possible; anything else is `other`.
fn command_label(cmd: &Cmd) -> &'static str {
    let mut args = cmd.args_iter().filter_map(|arg| match arg {
        redis::Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let Some(name) = args.next() else { return "other" };
    if name.eq_ignore_ascii_case(b"EVALSHA") || name.eq_ignore_ascii_case(b"EVAL") {
        return args.next().and_then(scripts::label_of).unwrap_or("script:other");
    }
    const KNOWN: &[&str] = &[
        "PING",
        "HMGET",
        "HGET",
        "HGETALL",
        "HSET",
        "HDEL",
        "DEL",
        "ZADD",
        "ZREM",
        "ZRANGEBYSCORE",
        "XREADGROUP",
        "XAUTOCLAIM",
        "XGROUP",
        "XINFO",
        "XRANGE",
        "XPENDING",
        "XLEN",
        "WAIT",
        "SCRIPT",
        "PUBLISH",
        "EXISTS",
    ];
    KNOWN.iter().find(|known| name.eq_ignore_ascii_case(known.as_bytes())).copied().unwrap_or("other")
}

/// Where Redis is.
#[derive(Clone)]
pub(super) enum Target {
    Standalone(Box<Client>),
    /// The cluster, one client per seed node for classic pub/sub, and what a sharded
    /// subscription's own client is built from.
    Cluster {
        cluster: Box<ClusterClient>,
        seeds: Vec<Client>,
        endpoint: Box<Endpoint>,
        seed_urls: Vec<String>,
    },
    /// A primary that Sentinel manages, as found now.
    Sentinel(Arc<Follower>),
}

/// Durable creates in flight at once per process; more wait for a connection. Each holds its
/// connection for about one replica acknowledgement.
const DURABLE_CONNECTIONS: usize = 64;

/// A handle on Redis and the namespace's key names. Cheap to clone; clones share the
/// connection and the pools.
#[derive(Clone)]
pub struct Store {
    target: Target,
    conn: Conn,
    blocking: Dedicated<Exclusive>,
    durable: Dedicated<Exclusive>,
    subscribers: Dedicated<Subscriber>,
    shard_subscribers: Arc<OnceLock<Dedicated<ShardSubscriber>>>,
    timeout: Duration,
    keys: Keys,
    /// The URL without credentials, for messages.
    address: String,
    single_slot: bool,
}

impl Store {
    /// Builds the handle without connecting, so a process can start (and report itself not
    /// ready) while Redis is down. Every command and connection attempt is bounded by
    /// `timeout`. Must be called inside a Tokio runtime. Fails only on a configuration that
    /// cannot work (a bad URL, TLS files beside a plain URL, unreadable PEM).
    pub fn connect_lazy(endpoint: &Endpoint, namespace: &str, timeout: Duration) -> Result<Self, StoreError> {
        let sentinel = SentinelUrl::parse(&endpoint.url).transpose()?;
        let (target, conn) = match (sentinel, endpoint.cluster_seeds()) {
            (Some(url), _) => {
                let follower = Arc::new(Follower::new(endpoint, url, timeout)?);
                (Target::Sentinel(follower.clone()), Inner::Sentinel(follower))
            }
            (None, Some(seeds)) => {
                let cluster = endpoint
                    .cluster_builder(&seeds)?
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .retries(2)
                    .max_retry_wait(500)
                    .build()?;
                let conn = cluster.get_pending_async_connection_with_config(cluster_config(timeout, timeout));
                let clients = seeds.iter().map(|s| endpoint.client(s)).collect::<Result<Vec<_>, _>>()?;
                let target = Target::Cluster {
                    cluster: Box::new(cluster),
                    seeds: clients,
                    endpoint: Box::new(endpoint.clone()),
                    seed_urls: seeds,
                };
                (target, Inner::Cluster(conn))
            }
            (None, None) => {
                let client = endpoint.client(&endpoint.url)?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout))
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_millis(500));
                let conn = ConnectionManager::new_lazy_with_config(client.clone(), config)?;
                (Target::Standalone(Box::new(client)), Inner::Managed(conn))
            }
        };
        let keys = Keys::new(namespace);
        let exclusive = |pool, blocks| Exclusive { target: target.clone(), timeout, blocks, pool };
        let store = Self {
            blocking: Dedicated::new("blocking", exclusive("blocking", MAX_BLOCK), 1, timeout),
            durable: Dedicated::new("durable", exclusive("durable", Duration::ZERO), DURABLE_CONNECTIONS, timeout),
            // Two, so that a new subscription need not wait for a broken one to be noticed.
            subscribers: Dedicated::new("pubsub", Subscriber { target: target.clone(), timeout }, 2, timeout),
            shard_subscribers: Arc::default(),
            target,
            conn: Conn(conn),
            timeout,
            keys,
            address: endpoint.redacted(),
            single_slot: endpoint.single_slot,
        };
        if let Target::Sentinel(follower) = &store.target {
            store.watch_primary(follower);
        }
        Ok(store)
    }

    /// Behind Sentinel, while this store lives: re-checks the primary every [`CHECK_EVERY`]
    /// ([`Follower::recheck`]), and once a primary was left, closes the idle connections the
    /// pools still hold to it. (The ones lent out refuse their next command; subscriptions end
    /// through [`PrimaryMoves`].)
    fn watch_primary(&self, follower: &Arc<Follower>) {
        let follower = Arc::downgrade(follower);
        let (blocking, durable, subscribers) = (self.blocking.weak(), self.durable.weak(), self.subscribers.weak());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(CHECK_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut seen = None;
            loop {
                tick.tick().await;
                // Gone with the last store (the pools hold it too).
                let Some(follower) = follower.upgrade() else { return };
                follower.recheck().await;
                let moves = follower.moves();
                if seen.is_some_and(|seen| seen != moves) {
                    blocking.close_idle();
                    durable.close_idle();
                    subscribers.close_idle();
                }
                seen = Some(moves);
            }
        });
    }

    /// Resolves once the primary this process follows behind Sentinel is left for another
    /// (never elsewhere). Take it before opening a subscription, and drop the subscription
    /// when it resolves: the old node hears none of the new primary's messages.
    pub fn primary_moves(&self) -> PrimaryMoves {
        match &self.target {
            Target::Sentinel(follower) => PrimaryMoves(Some(follower.subscribe_moves())),
            _ => PrimaryMoves(None),
        }
    }

    /// Where Redis is, without credentials: fit for logs and errors.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Behind Sentinel: the master's name and the primary's address as last found (`None` while
    /// none is known). `None` for every other kind of Redis.
    pub fn sentinel_primary(&self) -> Option<(String, Option<String>)> {
        match &self.target {
            Target::Sentinel(f) => Some((f.master().to_owned(), f.address())),
            _ => None,
        }
    }

    /// Whether every command must stay within one hash tag: on a Redis Cluster, and behind a
    /// single-endpoint proxy that refuses commands across slots ([`Endpoint::single_slot`]).
    pub fn one_slot_per_command(&self) -> bool {
        self.single_slot || matches!(self.target, Target::Cluster { .. })
    }

    /// Whether task events are sharded: on a Cluster each shard's events go to its own channel
    /// ([`Keys::shard_events_channel`], `SPUBLISH`); elsewhere to the one classic channel.
    pub fn sharded_events(&self) -> bool {
        matches!(self.target, Target::Cluster { .. })
    }

    /// The channel task `id`'s change events are published on.
    pub fn events_channel(&self, id: &crate::task::TaskId) -> String {
        if self.sharded_events() { self.keys.shard_events_channel(id.shard()) } else { self.keys.events_channel() }
    }

    /// A connection for one operation. Clones share the underlying socket.
    pub fn conn(&self) -> Conn {
        self.conn.clone()
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Room for `readers` blocking connections at once: one per delivery reader.
    pub fn reserve_blocking(&self, readers: usize) {
        self.blocking.resize(readers.max(1));
    }

    /// A dedicated connection for blocking reads (`XREADGROUP BLOCK`, at most [`MAX_BLOCK`]),
    /// which would stall every other caller of a shared multiplexed connection. Dropping it
    /// hands it back to its pool, which checks it before lending it again.
    pub async fn blocking_connection(&self) -> Result<Held<Exclusive>, StoreError> {
        self.blocking.get().await
    }

    /// A connection for a durable create: its script and `WAIT` go out together on it, so
    /// `WAIT` counts the replicas that have that create, and it holds up nobody else while they
    /// answer. Discard it when the pair failed.
    pub(super) async fn durable_connection(&self) -> Result<Held<Exclusive>, StoreError> {
        self.durable.get().await
    }

    /// A classic pub/sub connection of its own. Discard it ([`Held::discard`]) once subscribed.
    pub async fn pubsub(&self) -> Result<Held<Subscriber>, StoreError> {
        self.subscribers.get().await
    }

    /// On a Cluster, a subscription to every shard's events channel (`SSUBSCRIBE`, each on the
    /// node that owns its slot), over a RESP3 connection of its own; `None` elsewhere. Messages,
    /// and the confirmations of every (re)subscription, arrive as [`ShardEvent`]s: the client
    /// library subscribes again after a reconnect, and a confirmation beyond the first round
    /// tells the caller that something may have been missed. A moved slot unsubscribes its
    /// channel ([`ShardEvent::Lost`]), which the library does not follow: the caller discards
    /// this one and asks for a new subscription.
    pub async fn shard_subscription(&self, shards: u16) -> Result<Option<Held<ShardSubscriber>>, StoreError> {
        if !self.sharded_events() {
            return Ok(None);
        }
        let pool = self.shard_subscribers.get_or_init(|| {
            let manager =
                ShardSubscriber { target: self.target.clone(), timeout: self.timeout, keys: self.keys.clone(), shards };
            Dedicated::new("shard_pubsub", manager, 1, self.timeout)
        });
        pool.get().await.map(Some)
    }

    /// `PING`, bounded by the command timeout.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let ping = redis::cmd("PING");
        let call = ping.query_async::<String>(&mut conn);
        match tokio::time::timeout(self.timeout, call).await {
            Ok(reply) => reply.map(drop).map_err(StoreError::from),
            Err(_) => Err(StoreError::Timeout(self.timeout)),
        }
    }

    /// Whether this process can do its work on Redis: it answers, the login holds, the scripts
    /// load, and a script may run on the namespace's keys (an ACL user without `EVALSHA`, or
    /// with a key pattern that misses the namespace, fails here rather than on a request).
    pub async fn check_usable(&self) -> Result<(), StoreError> {
        self.ping().await?;
        self.load_scripts().await?;
        let probe = crate::task::TaskId::generate(1);
        let read = tokio::time::timeout(self.timeout, self.get_task(&probe));
        match read.await {
            Ok(reply) => reply.map(drop),
            Err(_) => Err(StoreError::Timeout(self.timeout)),
        }
    }

    /// Retries [`Self::check_usable`], then `also` (a process's own start-up step), until both
    /// succeed. Each failure is logged with the redacted address, its cause and what to do; the
    /// waits between attempts grow to 5 s.
    pub async fn wait_until_usable(&self, also: impl AsyncFn() -> Result<(), StoreError>) {
        let mut backoff = Backoff::redis();
        loop {
            let attempt = async {
                self.check_usable().await?;
                also().await
            };
            match attempt.await {
                Ok(()) => {
                    tracing::info!(redis = %self.address, "redis is usable");
                    return;
                }
                Err(err) => {
                    let diagnosis = err.diagnosis();
                    let delay = backoff.next_delay();
                    tracing::warn!(
                        redis = %self.address,
                        cause = diagnosis.cause,
                        hint = diagnosis.hint,
                        error = %err,
                        retry_in = ?delay,
                        "redis is not usable yet"
                    );
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    /// Loads every script, so a broken one fails at boot rather than on a request. (On a
    /// Cluster this reaches one node; `EVALSHA` falls back to `EVAL` on the others.)
    pub async fn load_scripts(&self) -> Result<(), StoreError> {
        let mut conn = self.conn();
        for file in scripts::all() {
            file.script.load_async(&mut conn).await?;
        }
        Ok(())
    }
}

/// See [`Store::primary_moves`].
pub struct PrimaryMoves(Option<tokio::sync::watch::Receiver<u64>>);

impl PrimaryMoves {
    /// Resolves at the first move since this was taken; never when there is none to follow.
    pub async fn wait(&mut self) {
        let moved = match &mut self.0 {
            Some(moves) => moves.changed().await.is_ok(),
            None => false,
        };
        if !moved {
            // Nothing to follow, or the follower is gone with its store.
            std::future::pending::<()>().await;
        }
    }
}

/// A sharded subscription ([`Store::shard_subscription`]); dropping it ends it.
pub struct ShardSubscription {
    _conn: ClusterConnection,
    pushes: tokio::sync::mpsc::UnboundedReceiver<redis::PushInfo>,
}

impl ShardSubscription {
    pub(super) fn new(conn: ClusterConnection, pushes: tokio::sync::mpsc::UnboundedReceiver<redis::PushInfo>) -> Self {
        Self { _conn: conn, pushes }
    }
}

/// What a sharded subscription hears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardEvent {
    /// A message on one of the channels.
    Message(String),
    /// A channel's subscription was confirmed: at first, and again after every resubscription.
    Subscribed,
    /// A connection dropped or a channel was unsubscribed (a slot moved): messages may be lost
    /// until the resubscription is confirmed.
    Lost,
}

impl ShardSubscription {
    /// The next event; `None` once the subscription is over.
    pub async fn next(&mut self) -> Option<ShardEvent> {
        loop {
            let push = self.pushes.recv().await?;
            return Some(match push.kind {
                redis::PushKind::SMessage => {
                    let Some(Ok(payload)) = push.data.get(1).map(redis::from_redis_value_ref::<String>) else {
                        continue;
                    };
                    ShardEvent::Message(payload)
                }
                redis::PushKind::SSubscribe => ShardEvent::Subscribed,
                redis::PushKind::Disconnection | redis::PushKind::SUnsubscribe => ShardEvent::Lost,
                _ => continue,
            });
        }
    }
}

pub(super) fn cluster_config(connect: Duration, response: Duration) -> ClusterConfig {
    ClusterConfig::new().set_connection_timeout(connect).set_response_timeout(response)
}
