//! Connections that one caller holds for itself, as opposed to the shared multiplexed handle of
//! the request path: the workers' blocking delivery reads, the gateways' durable creates (a
//! script and its `WAIT`), the classic pub/sub subscriptions of both processes, and the
//! gateway's sharded subscription on a Cluster.
//!
//! Each kind comes from a bounded `deadpool` pool: the bound is what the process needs (one per
//! delivery reader, two subscriptions, 64 durable creates in flight), checkouts wait at most
//! the command timeout, and a connection handed back is checked with a `PING` before it is lent
//! again, so a reader whose connection broke gets a fresh one on its next checkout. Subscribed
//! connections are never handed back: their channels would follow them ([`Held::discard`]).
//! The pools' size, waits and errors are exported as `taskgate_redis_pool_*`.
//!
//! The managers are ours rather than `deadpool-redis`'s: the connections must carry the same
//! TLS certificates, ACL login and response timeouts as the rest of the store, on a Cluster as
//! well, and pub/sub connections are pooled too.

use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};

use deadpool::Runtime;
use deadpool::managed::{
    self, Manager, Metrics, Object, Pool, PoolError, RecycleError, RecycleResult, TimeoutType, WeakPool,
};
use redis::AsyncConnectionConfig;

use super::sentinel;
use super::wire::{ShardSubscription, Target, cluster_config};
use super::{Conn, Keys, StoreError};
use crate::telemetry::metrics::{POOLS, PoolMetrics};

/// The longest a blocking read may block: a blocking connection's response timeout is this
/// plus the command timeout, so a read on a silently dead socket fails within both.
pub const MAX_BLOCK: Duration = Duration::from_millis(1_000);

/// One of the process's pools, named for its metrics.
pub(super) struct Dedicated<M: Manager> {
    pool: Pool<M>,
    name: &'static str,
    /// Tells this pool's figures from another of its name's (`PoolMetrics::instance`).
    instance: usize,
}

impl<M: Manager> Clone for Dedicated<M> {
    fn clone(&self) -> Self {
        Self { pool: self.pool.clone(), name: self.name, instance: self.instance }
    }
}

impl<M: Manager<Error = StoreError>> Dedicated<M> {
    /// A pool of at most `max` connections that opens none until asked. Checkouts, opening and
    /// the health check are each bounded by `timeout`.
    pub(super) fn new(name: &'static str, manager: M, max: usize, timeout: Duration) -> Self {
        let pool = Pool::builder(manager)
            .max_size(max)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(timeout))
            .create_timeout(Some(timeout))
            .recycle_timeout(Some(timeout))
            .build()
            .expect("a runtime is given with the timeouts");
        let pool = Self { pool, name, instance: PoolMetrics::instance() };
        pool.report();
        pool
    }

    /// Room for `max` connections at once (the number of callers that hold one).
    pub(super) fn resize(&self, max: usize) {
        self.pool.resize(max);
        self.report();
    }

    /// A handle that does not keep the pool alive.
    pub(super) fn weak(&self) -> WeakDedicated<M> {
        WeakDedicated { pool: self.pool.weak(), name: self.name, instance: self.instance }
    }

    /// A connection of this pool, waiting for one to be handed back when all are lent.
    pub(super) async fn get(&self) -> Result<Held<M>, StoreError> {
        let status = self.pool.status();
        let waits = status.available == 0 && status.size >= status.max_size;
        let start = Instant::now();
        let got = self.pool.get().await;
        POOLS.checkout(self.name, start.elapsed(), waits);
        self.report();
        match got {
            Ok(object) => Ok(Held { object: Some(object), name: self.name, instance: self.instance }),
            Err(err) => {
                let (kind, err) = match err {
                    PoolError::Backend(err) => ("open", err),
                    PoolError::Timeout(TimeoutType::Wait) => {
                        ("exhausted", StoreError::PoolExhausted { pool: self.name, max: status.max_size })
                    }
                    PoolError::Timeout(_) => ("timeout", StoreError::Timeout(start.elapsed())),
                    PoolError::Closed | PoolError::NoRuntimeSpecified | PoolError::PostCreateHook(_) => {
                        ("open", StoreError::Config(format!("the {} pool cannot lend connections", self.name)))
                    }
                };
                POOLS.error(self.name, kind);
                Err(err)
            }
        }
    }

    fn report(&self) {
        report(self.name, self.instance, &self.pool);
    }
}

/// A pool that may be gone ([`Dedicated::weak`]).
pub(super) struct WeakDedicated<M: Manager> {
    pool: WeakPool<M>,
    name: &'static str,
    instance: usize,
}

impl<M: Manager> WeakDedicated<M> {
    /// Closes the connections the pool holds idle (those lent out are not touched).
    pub(super) fn close_idle(&self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.retain(|_, _| false);
            report(self.name, self.instance, &pool);
        }
    }
}

fn report<M: Manager>(name: &'static str, instance: usize, pool: &Pool<M>) {
    let status = pool.status();
    POOLS.status(name, instance, status.max_size, status.size, status.available);
}

/// A connection lent by a pool. Dropping it hands it back; [`Held::discard`] closes it.
pub struct Held<M: Manager> {
    object: Option<Object<M>>,
    name: &'static str,
    instance: usize,
}

impl<M: Manager> Held<M> {
    /// Closes the connection instead of handing it back: for one that is subscribed, or broken.
    pub fn discard(mut self) {
        self.release(true);
    }

    fn release(&mut self, close: bool) {
        let Some(object) = self.object.take() else { return };
        let pool = Object::pool(&object);
        if close {
            drop(Object::take(object));
        } else {
            drop(object);
        }
        if let Some(pool) = pool {
            report(self.name, self.instance, &pool);
        }
    }
}

impl<M: Manager> Drop for Held<M> {
    fn drop(&mut self) {
        self.release(false);
    }
}

impl<M: Manager> Deref for Held<M> {
    type Target = M::Type;
    fn deref(&self) -> &M::Type {
        self.object.as_ref().expect("held until dropped")
    }
}

impl<M: Manager> DerefMut for Held<M> {
    fn deref_mut(&mut self) -> &mut M::Type {
        self.object.as_mut().expect("held until dropped")
    }
}

/// Connections a caller has to itself for a command or a sequence of them: blocking reads
/// (`XREADGROUP BLOCK`), which would stall every other caller of a shared multiplexed
/// connection, and a durable create's script and `WAIT`, which must share a connection and
/// would hold up the shared one while replicas acknowledge.
pub struct Exclusive {
    pub(super) target: Target,
    pub(super) timeout: Duration,
    /// Added to the command timeout for each reply: how long a command may block.
    pub(super) blocks: Duration,
    pub(super) pool: &'static str,
}

impl Manager for Exclusive {
    type Type = Conn;
    type Error = StoreError;

    async fn create(&self) -> Result<Conn, StoreError> {
        let response = self.blocks + self.timeout;
        match &self.target {
            Target::Standalone(client) => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.timeout))
                    .set_response_timeout(Some(response));
                Ok(Conn::direct(client.get_multiplexed_async_connection_with_config(&config).await?))
            }
            Target::Cluster { cluster, .. } => Ok(Conn::cluster(
                cluster.get_async_connection_with_config(cluster_config(self.timeout, response)).await?,
            )),
            Target::Sentinel(follower) => {
                // Taken first: a move while connecting makes the connection refuse at once.
                let moves = follower.moves();
                let client = follower.client().await?;
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.timeout))
                    .set_response_timeout(Some(response));
                let made = async {
                    let mut conn = client.get_multiplexed_async_connection_with_config(&config).await?;
                    let role = sentinel::role(&mut conn).await?;
                    Ok::<_, redis::RedisError>((conn, role))
                };
                match made.await {
                    Ok((conn, role)) if role == "master" => Ok(Conn::pinned(conn, follower.clone(), moves)),
                    Ok((_, role)) => {
                        follower.lost_any();
                        Err(sentinel::not_primary(&role).into())
                    }
                    Err(err) => {
                        follower.lost_any();
                        Err(err.into())
                    }
                }
            }
        }
    }

    /// Always checked, as `deadpool-redis` does: a broken connection lent unchecked would fail a
    /// durable create that a fresh one would have made. Behind Sentinel the check is that the
    /// process still follows the node, then `ROLE`: a connection to a primary since demoted
    /// answers `PING` but refuses every write, and one to a primary since left (the sentinels
    /// named another) takes writes nobody will read.
    async fn recycle(&self, conn: &mut Conn, _: &Metrics) -> RecycleResult<StoreError> {
        let Target::Sentinel(follower) = &self.target else {
            return ping(redis::cmd("PING").query_async::<String>(conn), self.pool).await;
        };
        if !conn.still_followed() {
            POOLS.error(self.pool, "recycle");
            return Err(RecycleError::message("the primary it reaches was left"));
        }
        match sentinel::role(conn).await {
            Ok(role) if role == "master" => Ok(()),
            _ => {
                follower.lost_any();
                POOLS.error(self.pool, "recycle");
                Err(RecycleError::message("no longer the primary"))
            }
        }
    }
}

/// Classic pub/sub connections. On a Cluster, to the first seed node that answers: classic
/// pub/sub reaches every node.
pub struct Subscriber {
    pub(super) target: Target,
    pub(super) timeout: Duration,
}

impl Held<Subscriber> {
    /// `PING payload` on the subscribed connection. Redis answers it after every message it
    /// delivered to the connection before it ran, and the client library queues those for
    /// [`redis::aio::PubSub::on_message`] before it hands the answer here. Unbounded in time:
    /// the caller bounds it.
    pub async fn ping_in_order(&mut self, payload: &str) -> Result<(), StoreError> {
        self.ping_message::<redis::Value>(payload).await?;
        Ok(())
    }
}

impl Manager for Subscriber {
    type Type = redis::aio::PubSub;
    type Error = StoreError;

    async fn create(&self) -> Result<redis::aio::PubSub, StoreError> {
        let primary;
        let clients = match &self.target {
            Target::Standalone(client) => std::slice::from_ref(&**client),
            Target::Cluster { seeds, .. } => seeds.as_slice(),
            Target::Sentinel(follower) => {
                primary = follower.client().await?;
                std::slice::from_ref(&primary)
            }
        };
        let mut last = StoreError::Timeout(self.timeout);
        for client in clients {
            match tokio::time::timeout(self.timeout, client.get_async_pubsub()).await {
                Ok(Ok(pubsub)) => return Ok(pubsub),
                Ok(Err(err)) => last = err.into(),
                Err(_) => last = StoreError::Timeout(self.timeout),
            }
        }
        Err(last)
    }

    async fn recycle(&self, pubsub: &mut redis::aio::PubSub, _: &Metrics) -> RecycleResult<StoreError> {
        ping(pubsub.ping::<String>(), "pubsub").await
    }
}

/// Sharded subscriptions to every shard's events channel, on a Cluster.
pub struct ShardSubscriber {
    pub(super) target: Target,
    pub(super) timeout: Duration,
    pub(super) keys: Keys,
    pub(super) shards: u16,
}

impl Manager for ShardSubscriber {
    type Type = ShardSubscription;
    type Error = StoreError;

    async fn create(&self) -> Result<ShardSubscription, StoreError> {
        let Target::Cluster { endpoint, seed_urls, .. } = &self.target else {
            return Err(StoreError::Config("sharded pub/sub needs a Cluster".into()));
        };
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let client = endpoint
            .cluster_builder(seed_urls)?
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(tx)
            .connection_timeout(self.timeout)
            .response_timeout(self.timeout)
            .build()?;
        let mut conn = client.get_async_connection().await?;
        // One channel per command: a command's channels must share a slot.
        for shard in 0..self.shards.min(256) {
            conn.ssubscribe(self.keys.shard_events_channel(shard as u8)).await?;
        }
        Ok(ShardSubscription::new(conn, rx))
    }

    async fn recycle(&self, _: &mut ShardSubscription, _: &Metrics) -> RecycleResult<StoreError> {
        // Its channels stay subscribed; only a new one is clean.
        Err(RecycleError::message("a sharded subscription is not lent twice"))
    }
}

/// The health check of a connection handed back: it must answer `PING` in time.
async fn ping(
    reply: impl Future<Output = redis::RedisResult<String>>,
    pool: &'static str,
) -> RecycleResult<StoreError> {
    match reply.await {
        Ok(_) => Ok(()),
        Err(err) => {
            POOLS.error(pool, "recycle");
            Err(managed::RecycleError::Backend(err.into()))
        }
    }
}
