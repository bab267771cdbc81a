//! Connections of per-identity servers (`per = "tenant"` or `"principal"`): one instance per
//! (server, identity), started on its first call with that identity's values, so one tenant's
//! calls never reach a process or session another tenant's values started.
//!
//! A worker runs at most `--max-instances` of them, every server together. When a new one is
//! needed at the bound, the least recently used instance with no call open is stopped; when
//! every instance has a call open, the new call waits for one to finish, up to the server's
//! connect timeout. An instance with no call for `--instance-idle-timeout` is stopped. An
//! instance started with values that have since changed (an operator set a new credential)
//! takes no new call and stops when its last call ends; it counts against the bound until then.
//! A stopped instance counts until its connection has ended (its child has exited and been
//! reaped), so the bound holds for processes, not only for entries in a map.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::connection::Upstream;
use crate::metrics::METRICS;

/// Which instance: the server, and the identity's description (`tenant "a"`…).
pub(super) type InstanceKey = (String, String);

pub(crate) struct Instances {
    max: usize,
    idle: Duration,
    state: Mutex<State>,
    /// Told whenever a call ends or an instance stops: a waiting call looks again.
    freed: Notify,
}

#[derive(Default)]
struct State {
    live: HashMap<InstanceKey, Slot>,
    /// Instances whose values changed, still finishing calls.
    retiring: Vec<Slot>,
    /// Instances stopped whose connections have not ended yet.
    stopping: usize,
}

struct Slot {
    upstream: Arc<Upstream>,
    stop: CancellationToken,
    fingerprint: [u8; 32],
    last_used: Instant,
    users: usize,
}

impl Slot {
    fn stop(&self, why: &'static str) {
        self.stop.cancel();
        METRICS.upstream_instances_evicted.with_label_values(&[self.upstream.name(), why]).inc();
        METRICS.upstream_instances.with_label_values(&[self.upstream.name()]).dec();
        tracing::info!(upstream = self.upstream.name(), why, "upstream instance stopped");
    }
}

/// Stops `slot`'s instance, which counts against the bound until its connections have ended;
/// then a waiting call is told.
fn retire(instances: &Arc<Instances>, state: &mut State, slot: Slot, why: &'static str) {
    slot.stop(why);
    state.stopping += 1;
    let instances = Arc::downgrade(instances);
    tokio::spawn(async move {
        slot.upstream.stopped().await;
        if let Some(instances) = instances.upgrade() {
            instances.lock().stopping -= 1;
            instances.freed.notify_waiters();
        }
    });
}

/// A call's hold on an instance: while it lives, the instance is not evicted.
pub(super) struct InUse {
    instances: Arc<Instances>,
    key: InstanceKey,
    pub(super) upstream: Arc<Upstream>,
}

impl Drop for InUse {
    fn drop(&mut self) {
        self.instances.release(&self.key, &self.upstream);
    }
}

/// Why no instance could be had.
#[derive(Debug, thiserror::Error)]
pub(super) enum Busy {
    #[error(
        "every one of this worker's {0} upstream instances (--max-instances) has a call open; waited {1} ms for one to finish"
    )]
    Full(usize, u128),
}

impl Instances {
    /// The manager, and its sweeper of idle instances (stopped with `shutdown`).
    pub(crate) fn start(max: usize, idle: Duration, shutdown: CancellationToken) -> Arc<Self> {
        let instances = Arc::new(Self { max: max.max(1), idle, state: Mutex::default(), freed: Notify::new() });
        let sweeper = Arc::downgrade(&instances);
        tokio::spawn(async move {
            let every = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
            loop {
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    () = shutdown.cancelled() => break,
                }
                let Some(instances) = sweeper.upgrade() else { return };
                Instances::sweep(&instances);
            }
            if let Some(instances) = sweeper.upgrade() {
                instances.stop_all();
            }
        });
        instances
    }

    /// The instance for `key` started with `fingerprint`'s values, started by `start` when
    /// there is none; waits up to `patience` for room at the bound.
    pub(super) async fn acquire(
        self: &Arc<Self>,
        key: InstanceKey,
        fingerprint: [u8; 32],
        patience: Duration,
        start: impl Fn(CancellationToken) -> Arc<Upstream>,
    ) -> Result<InUse, Busy> {
        let deadline = Instant::now() + patience;
        loop {
            // Registered before looking, so a release between the look and the wait is seen.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(upstream) = self.try_acquire(&key, fingerprint, &start) {
                return Ok(InUse { instances: self.clone(), key, upstream });
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return Err(Busy::Full(self.max, patience.as_millis()));
            }
        }
    }

    fn try_acquire(
        self: &Arc<Self>,
        key: &InstanceKey,
        fingerprint: [u8; 32],
        start: &impl Fn(CancellationToken) -> Arc<Upstream>,
    ) -> Option<Arc<Upstream>> {
        let mut state = self.lock();
        if let Some(slot) = state.live.get_mut(key) {
            if slot.fingerprint == fingerprint {
                slot.users += 1;
                slot.last_used = Instant::now();
                return Some(slot.upstream.clone());
            }
            // Started with values that are no longer the caller's: no new call goes to it.
            let old = state.live.remove(key)?;
            if old.users == 0 {
                retire(self, &mut state, old, "changed");
            } else {
                state.retiring.push(old);
            }
        }
        if state.live.len() + state.retiring.len() + state.stopping >= self.max {
            // At the bound: the least recently used idle instance is stopped, and this call
            // starts its own once that one has ended (the caller waits on `freed`).
            let lru = state
                .live
                .iter()
                .filter(|(_, slot)| slot.users == 0)
                .min_by_key(|(_, slot)| slot.last_used)
                .map(|(key, _)| key.clone());
            if let Some(evicted) = lru.and_then(|lru| state.live.remove(&lru)) {
                retire(self, &mut state, evicted, "lru");
            }
            return None;
        }
        let stop = CancellationToken::new();
        let upstream = start(stop.clone());
        METRICS.upstream_instances_started.with_label_values(&[upstream.name()]).inc();
        METRICS.upstream_instances.with_label_values(&[upstream.name()]).inc();
        tracing::info!(upstream = upstream.name(), "upstream instance started");
        state.live.insert(
            key.clone(),
            Slot { upstream: upstream.clone(), stop, fingerprint, last_used: Instant::now(), users: 1 },
        );
        Some(upstream)
    }

    fn release(self: &Arc<Self>, key: &InstanceKey, upstream: &Arc<Upstream>) {
        {
            let mut state = self.lock();
            match state.live.get_mut(key) {
                Some(slot) if Arc::ptr_eq(&slot.upstream, upstream) => {
                    slot.users -= 1;
                    slot.last_used = Instant::now();
                }
                _ => {
                    if let Some(at) = state.retiring.iter().position(|s| Arc::ptr_eq(&s.upstream, upstream)) {
                        state.retiring[at].users -= 1;
                        if state.retiring[at].users == 0 {
                            let old = state.retiring.swap_remove(at);
                            retire(self, &mut state, old, "changed");
                        }
                    }
                }
            }
        }
        self.freed.notify_waiters();
    }

    fn sweep(self: &Arc<Self>) {
        let now = Instant::now();
        let mut state = self.lock();
        let idle: Vec<InstanceKey> = state
            .live
            .iter()
            .filter(|(_, slot)| slot.users == 0 && now.duration_since(slot.last_used) >= self.idle)
            .map(|(key, _)| key.clone())
            .collect();
        for key in idle {
            if let Some(slot) = state.live.remove(&key) {
                retire(self, &mut state, slot, "idle");
            }
        }
    }

    fn stop_all(&self) {
        let mut state = self.lock();
        for (_, slot) in state.live.drain() {
            slot.stop.cancel();
        }
        for slot in state.retiring.drain(..) {
            slot.stop.cancel();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
