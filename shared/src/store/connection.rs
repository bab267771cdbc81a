//! One multiplexed, self-reconnecting Redis connection per process, cloned into every request:
//! no pool checkout on the request path. The same handle speaks to a standalone server (or a
//! replicated primary) and to a Redis Cluster.
//!
//! **Cluster.** A URL `redis+cluster://[user:pass@]host:port[,host:port…]` (or
//! `rediss+cluster://` for TLS) names seed nodes of a Cluster. Every script touches keys of one
//! hash tag, so commands route by their first key. Task events use sharded pub/sub there
//! ([`Store::shard_subscription`]); the other channels stay classic (`PUBLISH` is broadcast over
//! the cluster bus), so a subscriber on any node hears them.
//!
//! This is the facade, [`Store`]; the connections themselves are made below it, in `wire.rs`
//! (the shared one) and `dedicated.rs` (the pooled ones).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::dedicated::{Dedicated, Exclusive, Held, MAX_BLOCK, ShardSubscriber, Subscriber};
use super::sentinel::{CHECK_EVERY, Follower};
use super::wire::{Conn, Target};
use super::{Endpoint, Keys, StoreError, scripts};
use crate::backoff::Backoff;

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
        let (target, conn) = Target::lazy(endpoint, timeout)?;
        let keys = Keys::new(namespace);
        let exclusive = |pool, blocks| Exclusive { target: target.clone(), timeout, blocks, pool };
        let store = Self {
            blocking: Dedicated::new("blocking", exclusive("blocking", MAX_BLOCK), 1, timeout),
            durable: Dedicated::new("durable", exclusive("durable", Duration::ZERO), DURABLE_CONNECTIONS, timeout),
            // Two, so that a new subscription need not wait for a broken one to be noticed.
            subscribers: Dedicated::new("pubsub", Subscriber { target: target.clone(), timeout }, 2, timeout),
            shard_subscribers: Arc::default(),
            target,
            conn,
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
