//! One Redis pub/sub subscription per gateway process (on a Cluster, a sharded one per shard),
//! fanned out in process to whoever watches a task (inline calls waiting for their result, and
//! listen streams) or an owner (`events/stream`s: a change message of a task with an outbox
//! names its owner's digest as a fourth word).
//!
//! Messages are wake-ups only (invariant 1, docs/architecture.md): a watcher re-reads the
//! record. Channels are bounded and a full one drops the wake-up, which is harmless because the
//! next read sees the latest state. After a reconnect every watcher is told to re-read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt as _;
use serde_json::Value;
use taskgate_shared::backoff::Backoff;
use taskgate_shared::store::{ShardEvent, Store};
use taskgate_shared::task::TaskStatus;
use tokio::sync::mpsc;

/// What a watcher is told.
#[derive(Debug, Clone)]
pub(crate) enum Wake {
    /// This task changed: re-read it. The status the change announced comes along as a hint
    /// (`None` when the message did not say): the record may have moved on since.
    Changed(String, Option<TaskStatus>),
    /// An ephemeral notification from the running tool (progress, log).
    Notice(Value),
    /// The subscription was re-established, or a wake-up was dropped because the watcher was
    /// behind: anything may have been missed, so re-read everything.
    Resync,
}

type Senders = Vec<(u64, mpsc::Sender<Wake>, Arc<AtomicBool>)>;

#[derive(Default)]
pub(crate) struct EventHub {
    watchers: Mutex<HashMap<String, Senders>>,
    next_id: AtomicU64,
    /// Told of every change (and of every resubscription), watched or not: early polls are
    /// held only while their task has not changed.
    polls: Option<Arc<crate::polls::PollPacer>>,
    /// Told of every change too, and of the subscription's state; hears its own beacons back.
    snapshots: Option<Arc<crate::snapshots::SnapshotCache>>,
    /// Where the snapshot cache's beacons go while the classic subscription is established: the
    /// subscription loop, which sends each on its connection.
    beacon_route: Mutex<Option<mpsc::UnboundedSender<String>>>,
}

/// A registration; dropping it unregisters.
pub(crate) struct Watch {
    hub: Arc<EventHub>,
    id: u64,
    tasks: Vec<String>,
    wakes: mpsc::Receiver<Wake>,
    /// Set when a wake-up could not be queued.
    overflowed: Arc<AtomicBool>,
}

impl EventHub {
    /// A hub that also tells `polls` and `snapshots` of every change.
    pub(crate) fn new(polls: Arc<crate::polls::PollPacer>, snapshots: Arc<crate::snapshots::SnapshotCache>) -> Self {
        Self { polls: Some(polls), snapshots: Some(snapshots), ..Self::default() }
    }

    /// Watches these tasks. Register before acting, so that no change is missed.
    pub(crate) fn watch(self: &Arc<Self>, tasks: &[&str], capacity: usize) -> Watch {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let overflowed = Arc::new(AtomicBool::new(false));
        let mut map = self.watchers.lock().expect("lock poisoned: a holder panicked");
        for task in tasks {
            map.entry((*task).to_owned()).or_default().push((id, tx.clone(), overflowed.clone()));
        }
        drop(map);
        Watch { hub: self.clone(), id, tasks: tasks.iter().map(|t| (*t).to_owned()).collect(), wakes: rx, overflowed }
    }

    /// Watches every task of an owner (its [`owner_digest`](taskgate_shared::store::owner_digest))
    /// whose changes are written to an outbox: each change wakes it with `Changed(task id)`.
    /// Digests and task ids never collide (`t_` vs hex), so both share one map.
    pub(crate) fn watch_owner(self: &Arc<Self>, owner: &str, capacity: usize) -> Watch {
        self.watch(&[owner], capacity)
    }

    fn dispatch(&self, task: &str, wake: &Wake) {
        if let Some(senders) = self.watchers.lock().expect("lock poisoned: a holder panicked").get(task) {
            for (_, tx, overflowed) in senders {
                if let Err(mpsc::error::TrySendError::Full(_)) = tx.try_send(wake.clone()) {
                    overflowed.store(true, Ordering::Relaxed);
                }
            }
        }
    }

    fn resync_all(&self) {
        for (_, tx, overflowed) in self.watchers.lock().expect("lock poisoned: a holder panicked").values().flatten() {
            if let Err(mpsc::error::TrySendError::Full(_)) = tx.try_send(Wake::Resync) {
                overflowed.store(true, Ordering::Relaxed);
            }
        }
    }

    /// A task changed (`"<taskId> <version> <status>"`, and `" <owner digest>"` when it has an
    /// outbox): tell its watchers, its owner's watchers and the poll pacer.
    fn on_event(&self, payload: &str) {
        let mut words = payload.split(' ');
        if let Some(task) = words.next() {
            // The words: task, version, status, then the owner digest when the task has an
            // outbox.
            let status = words.nth(1).and_then(TaskStatus::parse);
            if let Some(polls) = &self.polls {
                polls.changed(task);
            }
            if let Some(snapshots) = &self.snapshots {
                snapshots.changed(task);
            }
            let wake = Wake::Changed(task.to_owned(), status);
            self.dispatch(task, &wake);
            if let Some(owner) = words.next().filter(|o| taskgate_shared::store::is_owner_digest(o)) {
                // Early `events/poll`s of this owner are held no longer.
                if let Some(polls) = &self.polls {
                    polls.changed(owner);
                }
                self.dispatch(owner, &wake);
            }
        }
    }

    /// Anything may have been missed (a new or renewed subscription): every watcher re-reads,
    /// and held polls are answered.
    fn resubscribed(&self) {
        if let Some(polls) = &self.polls {
            polls.forget_all();
        }
        self.resync_all();
    }

    /// The classic subscription that carries task events (and the beacons) is established.
    fn events_subscribed(&self) {
        if let Some(snapshots) = &self.snapshots {
            snapshots.resubscribed();
        }
    }

    /// ... or lost: the snapshot cache is bypassed until it is back.
    fn events_lost(&self) {
        if let Some(snapshots) = &self.snapshots {
            snapshots.unsubscribed();
        }
    }

    /// Subscribes and dispatches until the process ends, reconnecting with backoff. On a
    /// Cluster, task events come over sharded pub/sub (one `SSUBSCRIBE` per shard, on the node
    /// that owns it) and only the tools' notices over the classic channel.
    pub(crate) async fn run(self: Arc<Self>, store: Store, shards: u16) {
        if store.sharded_events() {
            // No single ordered stream to put a beacon in: the snapshot cache stays bypassed.
            tokio::join!(self.clone().run_classic(store.clone(), false), self.run_sharded(store, shards));
        } else {
            tokio::join!(self.clone().run_classic(store, true), self.send_beacons());
        }
    }

    /// Sends the snapshot cache's beacons, as it asks for them, to the subscription loop, which
    /// sends each as a `PING` on the subscription's own connection. Redis answers it in that
    /// connection's order, after every message published before it ran, and the loop takes the
    /// answer as heard only once it has handled every message that came before it (see
    /// [`Self::run_classic`]): what a `PUBLISH` looped through the subscription proved, for one
    /// connection's read and write instead of two connections' I/O.
    async fn send_beacons(self: Arc<Self>) {
        let Some(snapshots) = self.snapshots.clone().filter(|s| s.enabled()) else { return };
        snapshots
            .send_beacons(|payload| {
                // No subscription: not heard, and the waiting requests read Redis instead.
                if let Some(route) = self.beacon_route.lock().expect("lock poisoned: a holder panicked").as_ref() {
                    let _ = route.send(payload);
                }
                std::future::ready(())
            })
            .await;
    }

    /// The classic subscription: task events (with `with_events`) and the tools' notices, and
    /// the snapshot cache's beacons, in the order Redis sent them.
    async fn run_classic(self: Arc<Self>, store: Store, with_events: bool) {
        let events = store.keys().events_channel();
        let notices = store.keys().notify_channel();
        let channels: Vec<&str> = if with_events { vec![&events, &notices] } else { vec![&notices] };
        let mut backoff = Backoff::redis();
        loop {
            // Taken before the connection is made: a primary left meanwhile ends it at once.
            let mut moved = store.primary_moves();
            match store.pubsub().await {
                Ok(mut pubsub) => match pubsub.subscribe(&channels).await {
                    Ok(()) => {
                        backoff.reset();
                        let (route, mut beacons) = mpsc::unbounded_channel::<String>();
                        if with_events {
                            *self.beacon_route.lock().expect("lock poisoned: a holder panicked") = Some(route);
                        }
                        self.resubscribed();
                        if with_events {
                            self.events_subscribed();
                        }
                        // A beacon answered, to be taken as heard once the messages before it are.
                        let mut answered: Option<String> = None;
                        loop {
                            // In this order: a beacon's answer counts only when no message is
                            // left queued before it (the client library queues them before it
                            // hands the answer over).
                            let msg = tokio::select! {
                                biased;
                                // The old primary hears nothing the new one publishes.
                                () = moved.wait() => None,
                                msg = async { pubsub.on_message().next().await } => msg,
                                () = std::future::ready(()), if answered.is_some() => {
                                    if let (Some(snapshots), Some(payload)) = (&self.snapshots, answered.take()) {
                                        snapshots.beacon_heard(&payload);
                                    }
                                    continue;
                                }
                                Some(payload) = beacons.recv() => {
                                    // Messages arriving meanwhile wait in the library's queue.
                                    let pong = tokio::time::timeout(
                                        crate::snapshots::BEACON_TIMEOUT,
                                        pubsub.ping_in_order(&payload),
                                    )
                                    .await;
                                    match pong {
                                        Ok(Ok(())) => answered = Some(payload),
                                        Ok(Err(err)) => tracing::debug!(error = %err, "snapshot cache beacon not answered"),
                                        Err(_) => tracing::debug!("snapshot cache beacon not answered in time"),
                                    }
                                    continue;
                                }
                            };
                            let Some(msg) = msg else { break };
                            let Ok(payload) = msg.get_payload::<String>() else { continue };
                            if msg.get_channel_name() == events {
                                self.on_event(&payload);
                            } else if let Ok(notice) = serde_json::from_str::<Value>(&payload)
                                && let Some(task) = notice.get("taskId").and_then(Value::as_str)
                            {
                                self.dispatch(task, &Wake::Notice(notice.clone()));
                            }
                        }
                        self.beacon_route.lock().expect("lock poisoned: a holder panicked").take();
                        if with_events {
                            self.events_lost();
                        }
                        pubsub.discard();
                        tracing::warn!("event subscription closed; resubscribing");
                    }
                    Err(err) => tracing::warn!(error = %err, "cannot subscribe to task events"),
                },
                Err(err) => tracing::warn!(error = %err, "cannot open the event connection"),
            }
            backoff.wait().await;
        }
    }

    async fn run_sharded(self: Arc<Self>, store: Store, shards: u16) {
        let mut backoff = Backoff::redis();
        loop {
            match store.shard_subscription(shards).await {
                Ok(Some(mut subscription)) => {
                    backoff.reset();
                    self.resubscribed();
                    // The confirmations of the first subscriptions may still be queued; any
                    // beyond them come from a resubscription by the client library.
                    let mut confirmations = 0u32;
                    while let Some(event) = subscription.next().await {
                        match event {
                            ShardEvent::Message(payload) => self.on_event(&payload),
                            ShardEvent::Subscribed => {
                                confirmations += 1;
                                if confirmations > u32::from(shards) {
                                    tracing::info!("sharded event subscription renewed; re-reading watched tasks");
                                    self.resubscribed();
                                }
                            }
                            // A moved slot unsubscribes its channel and the library does not
                            // follow it (the connection sends no command to be redirected): a
                            // new subscription reads the slot map afresh.
                            ShardEvent::Lost => break,
                        }
                    }
                    subscription.discard();
                    self.resubscribed();
                    tracing::warn!(
                        "sharded event subscription lost (a slot moved or a node went away); subscribing again"
                    );
                }
                Ok(None) => return,
                Err(err) => {
                    let diagnosis = err.diagnosis();
                    tracing::warn!(error = %err, cause = diagnosis.cause, "cannot subscribe to the shards' task events");
                }
            }
            backoff.wait().await;
        }
    }
}

impl Watch {
    /// The next wake-up; `Resync` if one was dropped meanwhile. `None` once the hub is gone.
    pub(crate) async fn recv(&mut self) -> Option<Wake> {
        if self.overflowed.swap(false, Ordering::Relaxed) {
            return Some(Wake::Resync);
        }
        self.wakes.recv().await
    }

    /// A wake-up already queued, without waiting.
    pub(crate) fn try_recv(&mut self) -> Option<Wake> {
        if self.overflowed.swap(false, Ordering::Relaxed) {
            return Some(Wake::Resync);
        }
        self.wakes.try_recv().ok()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut map = self.hub.watchers.lock().expect("lock poisoned: a holder panicked");
        for task in &self.tasks {
            if let Some(senders) = map.get_mut(task) {
                senders.retain(|(id, _, _)| *id != self.id);
                if senders.is_empty() {
                    map.remove(task);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_owner_watch_hears_its_tasks_with_an_outbox() {
        let hub = Arc::new(EventHub::default());
        let owner = taskgate_shared::store::owner_digest(&taskgate_shared::task::Owner {
            tenant: "acme".into(),
            principal: "alice".into(),
        });
        let mut watch = hub.watch_owner(&owner, 4);
        hub.on_event("t_a 1 working");
        hub.on_event(&format!("t_b 2 completed {owner}"));
        hub.on_event("t_c 1 working 0123456789abcdef0123456789abcdef");
        hub.on_event(&format!("t_d 1 working {owner}x"));
        let Some(Wake::Changed(task, _)) = watch.try_recv() else { panic!("a wake-up for the owner's task") };
        assert_eq!(task, "t_b");
        assert!(watch.try_recv().is_none(), "no other owner's, no three-word and no malformed message");
        hub.resubscribed();
        assert!(matches!(watch.try_recv(), Some(Wake::Resync)), "a resubscription reaches owner watches too");
        drop(watch);
        assert!(hub.watchers.lock().unwrap().is_empty(), "dropping the watch unregisters it");
    }
}
