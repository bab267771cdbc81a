//! The wire: the one connection type every command goes through ([`Conn`], timed, counted and
//! traced per command), where Redis is ([`Target`]), and the sharded subscription's stream.
//! Below the facade ([`Store`](super::Store)) and the dedicated pools, which both make
//! connections from these.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Client, Cmd, Pipeline, RedisFuture, Value};

use tracing::Instrument as _;

use super::sentinel::{Follower, SentinelUrl, moved_primary};
use super::{Endpoint, StoreError, scripts};
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

impl Target {
    /// Where `endpoint` points, and the shared connection to it, made lazily: nothing is
    /// dialled until the first command. Fails only on a configuration that cannot work.
    pub(super) fn lazy(endpoint: &Endpoint, timeout: Duration) -> Result<(Self, Conn), StoreError> {
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
        Ok((target, Conn(conn)))
    }
}

/// A sharded subscription ([`Store::shard_subscription`](super::Store::shard_subscription)); dropping it ends it.
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
