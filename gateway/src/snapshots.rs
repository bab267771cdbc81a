//! The snapshot cache: each replica keeps the encoded `tasks/get` answer of the tasks it read
//! lately, so that a poll of an unchanged task costs Redis nothing.
//!
//! **Invalidation.** The event hub hears every change of every task (each write script
//! publishes it, atomically with the write) and drops that task's entry. When the
//! subscription is (re-)established or lost, everything is dropped, and while it is not
//! established the cache is bypassed: nothing is served from it and nothing is kept.
//!
//! **Reads that race a change.** A read takes a [`Ticket`] before it asks Redis; the entry is
//! kept only if no change of that task (and no resubscription) was heard between the ticket and
//! the insert, since the read may predate the change (the "caching in progress" placeholder of
//! Redis's own client-side caching). An entry never replaces one of a newer version.
//!
//! **Freshness across replicas: the beacon.** A change is heard some time after it was
//! written, so an entry may outlive its task's state by the pub/sub delivery lag. Before an
//! entry is served, the replica waits until it hears back a *beacon* it sent after the request
//! began: a `PING` on the event subscription's own connection (`events.rs`). Redis runs commands
//! one at a time and writes a connection's replies and messages in order, so a beacon sent after
//! the request began is heard after every change written before it began: a write acknowledged by
//! any replica (or worker) before a `tasks/get` starts is seen by that get, on any replica. The
//! beacons are shared: one in flight at a time serves every request waiting on the replica, and
//! they are sent only while some request waits, paced by a gap ([`SnapshotCache::send_beacons`]):
//! a cost per replica, not per poll. A beacon not heard back within [`BEACON_TIMEOUT`] sends
//! the request to Redis instead.
//!
//! On a Cluster (sharded events, one subscription per shard) there is no single ordered stream
//! to put a beacon in, so the cache is off there.
//!
//! **Ownership.** An entry records its owner; it is served to that tenant and principal only.
//! Anyone else takes the uncached path, so a foreign id costs and answers exactly what an
//! unknown one does.
//!
//! **Bounds.** Entries are weighed in bytes (the reply plus the key, the owner and a fixed
//! overhead) and the least recently used are evicted beyond `--snapshot-cache-bytes`.
//! An entry also expires with its task (created + ttl), since an expiring key publishes nothing.
//!
//! `lru` (a small, widely used crate: an O(1) linked hash map with `pop_lru`) holds the order;
//! the byte total is kept here, so that the gauge is exact and every eviction is counted.
//! (`moka` and `quick_cache` weigh entries too, but evict in the background or approximately,
//! which would make the bound and the eviction count loose.)

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use lru::LruCache;
use taskgate_shared::task::{Owner, Snapshot};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::metrics::METRICS;

/// How long a request waits for its beacon before it reads Redis instead.
pub(crate) const BEACON_TIMEOUT: Duration = Duration::from_millis(100);

/// How many beacons' counts of requests served the pacing keeps (see
/// [`SnapshotCache::send_beacons`]).
const SERVED_KEPT: usize = 4;

/// What an entry costs besides its reply, key and owner: the map's node and bookkeeping.
const ENTRY_OVERHEAD: usize = 160;

/// An entry expires this much before its task, so that clocks apart by less never serve an
/// expired task.
const EXPIRY_MARGIN_MS: i64 = 2_000;

/// A `tasks/get` answer kept for its owner.
struct Entry {
    owner: Owner,
    version: u64,
    expires_at_ms: i64,
    poll_interval_ms: u64,
    /// Shared with the replies that serve it: a hit copies nothing before the reply is framed.
    body: Bytes,
    weight: usize,
}

/// What a hit serves.
pub(crate) struct Hit {
    pub(crate) body: Bytes,
    pub(crate) poll_interval_ms: u64,
}

struct Inner {
    entries: LruCache<String, Entry>,
    bytes: usize,
    /// Tasks with reads in flight: how many, and how many changes were heard meanwhile.
    reading: HashMap<String, Reading>,
    /// Bumped when everything is dropped: older tickets keep nothing.
    era: u64,
}

#[derive(Default)]
struct Reading {
    readers: usize,
    changes: u64,
}

/// A read of one task in flight; [`SnapshotCache::keep`] takes it back.
pub(crate) struct Ticket<'a> {
    cache: &'a SnapshotCache,
    task: String,
    changes_at_start: u64,
    era: u64,
}

/// Per-replica cache of `tasks/get` answers.
pub(crate) struct SnapshotCache {
    capacity: usize,
    /// Whether the event subscription is established (and the cache usable at all).
    subscribed: AtomicBool,
    inner: Mutex<Inner>,
    /// The send time (see [`Self::now_ns`]) of the newest beacon heard back on the current
    /// subscription; 0 for none.
    heard: watch::Sender<u64>,
    /// A request waits for a beacon.
    wanted: Notify,
    /// Requests that asked for a beacon newer than the last one sent, ever (see
    /// [`Self::send_beacons`]).
    asked: AtomicU64,
    /// The send time of the newest beacon published.
    last_sent: AtomicU64,
    /// `asked` when the newest beacon was heard, before anyone waiting was woken.
    asked_at_heard: AtomicU64,
    /// `--snapshot-cache-beacon-gap-ms`.
    gap: Duration,
    epoch: Instant,
}

impl SnapshotCache {
    /// A cache of at most `capacity` bytes (0 turns it off), its beacons paced by `gap`.
    pub(crate) fn new(capacity: usize, gap: Duration) -> Self {
        Self {
            capacity,
            subscribed: AtomicBool::new(false),
            inner: Mutex::new(Inner { entries: LruCache::unbounded(), bytes: 0, reading: HashMap::new(), era: 0 }),
            heard: watch::Sender::new(0),
            wanted: Notify::new(),
            asked: AtomicU64::new(0),
            last_sent: AtomicU64::new(0),
            asked_at_heard: AtomicU64::new(0),
            gap,
            epoch: Instant::now(),
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.capacity > 0
    }

    fn usable(&self) -> bool {
        self.enabled() && self.subscribed.load(Ordering::Acquire)
    }

    /// Nanoseconds since this cache was made (never 0 once any time has passed: 1 is added).
    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX).saturating_add(1)
    }

    /// The answer kept for `task`, if `owner` owns it, once a beacon sent after `started` is
    /// heard. `None` sends the request to Redis (and counts a miss).
    pub(crate) async fn get(&self, task: &str, owner: &Owner, started: Instant) -> Option<Hit> {
        if !self.usable() {
            return None;
        }
        let since = u64::try_from(started.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX);
        // Only an owner's entry is worth the wait; the check is repeated after it.
        let version = self.peek(task, owner, false).map(|(version, _)| version);
        let hit = match version {
            Some(version) if self.caught_up(since).await => {
                self.peek(task, owner, true).filter(|(v, _)| *v == version).map(|(_, hit)| hit)
            }
            _ => None,
        };
        match &hit {
            Some(_) => METRICS.snapshot_cache_hits.inc(),
            None => METRICS.snapshot_cache_misses.inc(),
        }
        hit
    }

    /// The entry's version, and its answer when `take` (which also marks it used).
    fn peek(&self, task: &str, owner: &Owner, take: bool) -> Option<(u64, Hit)> {
        let mut inner = self.lock();
        let now_ms = wall_ms();
        let entry = if take { inner.entries.get(task)? } else { inner.entries.peek(task)? };
        if entry.owner != *owner || entry.expires_at_ms <= now_ms {
            return None;
        }
        let body = if take { entry.body.clone() } else { Bytes::new() };
        Some((entry.version, Hit { body, poll_interval_ms: entry.poll_interval_ms }))
    }

    /// Waits until a beacon sent at or after `since` is heard back (`false`: not in time, or the
    /// subscription went away).
    async fn caught_up(&self, since: u64) -> bool {
        let mut heard = self.heard.subscribe();
        if *heard.borrow_and_update() >= since {
            return true;
        }
        // A beacon already sent after `since` serves this request too: only a request that
        // needs a newer one is counted for the pacing.
        if self.last_sent.load(Ordering::Acquire) < since {
            self.asked.fetch_add(1, Ordering::AcqRel);
        }
        self.wanted.notify_one();
        let wait = heard.wait_for(|sent| *sent >= since);
        matches!(tokio::time::timeout(BEACON_TIMEOUT, wait).await, Ok(Ok(_)))
    }

    /// A read of `task` from Redis is about to start; `None` when nothing it reads may be kept.
    pub(crate) fn ticket(&self, task: &str) -> Option<Ticket<'_>> {
        if !self.usable() {
            return None;
        }
        let mut inner = self.lock();
        let era = inner.era;
        let reading = inner.reading.entry(task.to_owned()).or_default();
        reading.readers += 1;
        let changes_at_start = reading.changes;
        Some(Ticket { cache: self, task: task.to_owned(), changes_at_start, era })
    }

    /// Keeps `body`, the answer to a read of `snapshot` that `ticket` stands for, unless the task
    /// changed (or everything was dropped) while the read was in flight.
    pub(crate) fn keep(&self, ticket: Ticket<'_>, snapshot: &Snapshot, body: &[u8]) {
        let weight = body.len() + ticket.task.len() + snapshot.owner.tenant.len() + snapshot.owner.principal.len();
        let weight = weight + ENTRY_OVERHEAD;
        if weight > self.capacity {
            return;
        }
        let mut inner = self.lock();
        let unchanged = inner.era == ticket.era
            && inner.reading.get(&ticket.task).is_some_and(|r| r.changes == ticket.changes_at_start);
        if !unchanged || !self.subscribed.load(Ordering::Acquire) {
            return;
        }
        // Two reads of one task in flight may finish in either order: never go back.
        if inner.entries.peek(&ticket.task).is_some_and(|e| e.version > snapshot.version) {
            return;
        }
        let entry = Entry {
            owner: snapshot.owner.clone(),
            version: snapshot.version,
            expires_at_ms: snapshot
                .created_at_ms
                .saturating_add(i64::try_from(snapshot.ttl_ms).unwrap_or(i64::MAX))
                .saturating_sub(EXPIRY_MARGIN_MS),
            poll_interval_ms: snapshot.poll_interval_ms,
            // A copy of its own, sized to the reply: the weight is what it holds.
            body: Bytes::copy_from_slice(body),
            weight,
        };
        if let Some(old) = inner.entries.put(ticket.task.clone(), entry) {
            inner.bytes -= old.weight;
        }
        inner.bytes += weight;
        while inner.bytes > self.capacity {
            let Some((_, evicted)) = inner.entries.pop_lru() else { break };
            inner.bytes -= evicted.weight;
            METRICS.snapshot_cache_evictions.inc();
        }
        METRICS.snapshot_cache_bytes.set(i64::try_from(inner.bytes).unwrap_or(i64::MAX));
    }

    /// `task` changed (heard from the hub, or written by this replica): drop its entry, and keep
    /// nothing from reads of it in flight.
    pub(crate) fn changed(&self, task: &str) {
        if !self.enabled() {
            return;
        }
        let mut inner = self.lock();
        if let Some(reading) = inner.reading.get_mut(task) {
            reading.changes += 1;
        }
        if let Some(old) = inner.entries.pop(task) {
            inner.bytes -= old.weight;
            METRICS.snapshot_cache_bytes.set(i64::try_from(inner.bytes).unwrap_or(i64::MAX));
        }
    }

    /// The subscription was (re-)established: changes may have been missed. Everything is
    /// dropped, beacons heard before count no more, and the cache is used again.
    pub(crate) fn resubscribed(&self) {
        self.drop_all();
        self.subscribed.store(true, Ordering::Release);
    }

    /// The subscription was lost: bypass the cache until it is back.
    pub(crate) fn unsubscribed(&self) {
        self.subscribed.store(false, Ordering::Release);
        self.drop_all();
    }

    fn drop_all(&self) {
        if !self.enabled() {
            return;
        }
        let mut inner = self.lock();
        inner.entries.clear();
        inner.bytes = 0;
        inner.era += 1;
        METRICS.snapshot_cache_bytes.set(0);
        drop(inner);
        self.heard.send_replace(0);
    }

    /// A beacon came back through the subscription.
    pub(crate) fn beacon_heard(&self, payload: &str) {
        let Ok(sent) = payload.parse::<u64>() else { return };
        let lag = self.now_ns().saturating_sub(sent);
        METRICS.snapshot_cache_beacon_lag.observe(Duration::from_nanos(lag).as_secs_f64());
        // Taken before the requests it answers are woken: those may ask again at once.
        self.asked_at_heard.store(self.asked.load(Ordering::Acquire), Ordering::Release);
        self.heard.send_if_modified(|heard| {
            let newer = sent > *heard;
            if newer {
                *heard = sent;
            }
            newer
        });
    }

    /// Publishes a beacon through `publish` whenever a request waits for one, one in flight at
    /// a time, each shared by every request that began before it was sent. Runs for as long as
    /// the subscription that hears them.
    ///
    /// **Pacing.** The next beacon goes once the last is heard back (or given up on after
    /// [`BEACON_TIMEOUT`]), and no sooner than `gap` after the last was sent, so that polls
    /// arriving on their own schedules (a fleet's) share one beacon per `gap` instead of taking
    /// one per trip through the subscription, each a command and its answer for Redis. Two
    /// exceptions keep the wait from costing anyone: a request that comes when no beacon was
    /// sent within the gap gets one at once (a lone poll waits one trip), and so does a closed
    /// loop of clients (each asking again when answered, none asking meanwhile): once no
    /// request came while the last beacon travelled, the next goes as soon as as many wait as
    /// any of the last [`SERVED_KEPT`] served. Open arrivals keep coming during most trips and
    /// so wait out the gap, and a trip that fell between two bursts of them is not enough: the
    /// count to reach is a whole gap's as long as one of those beacons waited the gap out. A
    /// closed loop that grew waits one gap; one that shrank, a few, to count afresh.
    /// A `gap` of 0 sends the next beacon at once.
    pub(crate) async fn send_beacons<F, Fut>(&self, publish: F)
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let mut asked_at_send = self.asked.load(Ordering::Acquire);
        let mut last_send: Option<Instant> = None;
        // How many requests each of the last few beacons was sent for, and whether none asked
        // for a newer one while the last travelled.
        let (mut served, mut quiet_trip) = ([0u64; SERVED_KEPT], false);
        loop {
            while self.asked.load(Ordering::Acquire) == asked_at_send {
                self.wanted.notified().await;
            }
            let until = last_send.map_or_else(Instant::now, |at| at + self.gap);
            while Instant::now() < until {
                let back = self.asked.load(Ordering::Acquire) - asked_at_send;
                if quiet_trip && served.iter().all(|&served| back >= served) {
                    break;
                }
                tokio::select! {
                    () = self.wanted.notified() => {}
                    () = tokio::time::sleep_until(until) => {}
                }
            }
            let asked = self.asked.load(Ordering::Acquire);
            served.rotate_right(1);
            (served[0], asked_at_send) = (asked - asked_at_send, asked);
            let sent = self.now_ns();
            self.last_sent.store(sent, Ordering::Release);
            last_send = Some(Instant::now());
            let mut heard = self.heard.subscribe();
            publish(sent.to_string()).await;
            let _ = tokio::time::timeout(BEACON_TIMEOUT, heard.wait_for(|h| *h >= sent)).await;
            // Not heard in time: the count is an older beacon's, lower than `asked_at_send`.
            quiet_trip = self.asked_at_heard.load(Ordering::Acquire) == asked_at_send;
        }
    }

    /// Bytes held now.
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// No code that can panic runs under this lock.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("the snapshot cache's lock is never poisoned")
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut inner = self.cache.lock();
        if let Some(reading) = inner.reading.get_mut(&self.task) {
            reading.readers -= 1;
            if reading.readers == 0 {
                inner.reading.remove(&self.task);
            }
        }
    }
}

fn wall_ms() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::Map;
    use taskgate_shared::task::TaskStatus;

    use super::*;

    fn owner(principal: &str) -> Owner {
        Owner { tenant: "acme".into(), principal: principal.into() }
    }

    fn snapshot(task: &str, version: u64) -> Snapshot {
        Snapshot {
            task_id: task.into(),
            owner: owner("alice"),
            status: TaskStatus::Working,
            status_message: None,
            created_at_ms: wall_ms(),
            updated_at_ms: wall_ms(),
            ttl_ms: 3_600_000,
            poll_interval_ms: 1_000,
            input_requests: Map::new(),
            result: None,
            error: None,
            version,
        }
    }

    /// A subscribed cache whose beacons are heard back at once.
    fn cache(capacity: usize) -> SnapshotCache {
        let cache = SnapshotCache::new(capacity, Duration::ZERO);
        cache.resubscribed();
        cache
    }

    fn keep(cache: &SnapshotCache, task: &str, version: u64, body: &[u8]) {
        let ticket = cache.ticket(task).expect("usable");
        cache.keep(ticket, &snapshot(task, version), body);
    }

    /// What a get started now is answered, its beacon heard back first.
    async fn get(cache: &SnapshotCache, task: &str, who: &str) -> Option<Bytes> {
        let started = Instant::now();
        cache.beacon_heard(&cache.now_ns().to_string());
        cache.get(task, &owner(who), started).await.map(|hit| hit.body)
    }

    #[tokio::test]
    async fn served_to_its_owner_only_and_dropped_on_a_change() {
        let cache = cache(1 << 20);
        keep(&cache, "t1", 1, b"one");
        assert_eq!(get(&cache, "t1", "alice").await.as_deref(), Some(&b"one"[..]));
        assert_eq!(get(&cache, "t1", "mallory").await, None, "another principal reads Redis");
        cache.changed("t1");
        assert_eq!(get(&cache, "t1", "alice").await, None);
        assert_eq!(cache.bytes(), 0);
    }

    #[tokio::test]
    async fn a_read_that_raced_a_change_or_a_resubscription_is_not_kept() {
        let cache = cache(1 << 20);
        let ticket = cache.ticket("t1").expect("usable");
        cache.changed("t1");
        cache.keep(ticket, &snapshot("t1", 1), b"old");
        assert_eq!(get(&cache, "t1", "alice").await, None, "the read may predate the change");
        let ticket = cache.ticket("t1").expect("usable");
        cache.resubscribed();
        cache.keep(ticket, &snapshot("t1", 1), b"old");
        assert_eq!(get(&cache, "t1", "alice").await, None, "changes may have been missed");
        assert!(cache.lock().reading.is_empty(), "tickets are given back");
    }

    #[tokio::test]
    async fn an_entry_never_goes_back_to_an_older_version() {
        let cache = cache(1 << 20);
        let older = cache.ticket("t1").expect("usable");
        keep(&cache, "t1", 2, b"two");
        cache.keep(older, &snapshot("t1", 1), b"one");
        assert_eq!(get(&cache, "t1", "alice").await.as_deref(), Some(&b"two"[..]));
    }

    #[tokio::test]
    async fn bypassed_while_unsubscribed_and_without_a_beacon() {
        let cache = cache(1 << 20);
        keep(&cache, "t1", 1, b"one");
        cache.unsubscribed();
        assert!(cache.ticket("t1").is_none());
        assert_eq!(get(&cache, "t1", "alice").await, None);
        cache.resubscribed();
        keep(&cache, "t1", 1, b"one");
        // Nobody sends beacons here: the get gives up after its timeout and reads Redis.
        let started = Instant::now();
        assert!(cache.get("t1", &owner("alice"), started).await.is_none());
        assert!(started.elapsed() >= BEACON_TIMEOUT);
        // A beacon sent before the get began proves nothing about writes acknowledged since.
        let early = cache.now_ns().to_string();
        let started = Instant::now();
        cache.beacon_heard(&early);
        assert!(cache.get("t1", &owner("alice"), started).await.is_none());
    }

    #[tokio::test]
    async fn held_within_its_bytes_least_recently_used_evicted() {
        let body = [b'x'; 100];
        let weight = body.len() + 2 + "acme".len() + "alice".len() + ENTRY_OVERHEAD;
        let cache = cache(weight * 3);
        for task in ["t1", "t2", "t3"] {
            keep(&cache, task, 1, &body);
        }
        assert!(get(&cache, "t1", "alice").await.is_some(), "t1 used last: t2 goes first");
        keep(&cache, "t4", 1, &body);
        assert_eq!(cache.bytes(), weight * 3);
        assert!(get(&cache, "t2", "alice").await.is_none());
        for task in ["t1", "t3", "t4"] {
            assert!(get(&cache, task, "alice").await.is_some(), "{task}");
        }
        let huge = vec![b'x'; weight * 4];
        keep(&cache, "t5", 1, &huge);
        assert!(cache.bytes() <= weight * 3, "an entry above the bound is not kept");
        assert!(SnapshotCache::new(0, Duration::ZERO).ticket("t1").is_none(), "0 turns it off");
    }

    /// How long a beacon takes to be heard back in these tests. (The paused clock's timers tick
    /// by the millisecond; polls arrive every millisecond, so some arrive during each trip.)
    const TRIP: Duration = Duration::from_millis(2);

    /// A cache pacing its beacons by `gap`, each heard back one [`TRIP`] after it is sent, and
    /// how many were sent.
    async fn paced(gap: Duration) -> (Arc<SnapshotCache>, Arc<AtomicU64>) {
        let cache = Arc::new(SnapshotCache::new(1 << 20, gap));
        cache.resubscribed();
        keep(&cache, "t1", 1, b"one");
        let sent = Arc::new(AtomicU64::new(0));
        let (beacons, count) = (cache.clone(), sent.clone());
        tokio::spawn(async move {
            let heard = beacons.clone();
            beacons
                .send_beacons(move |payload| {
                    count.fetch_add(1, Ordering::Relaxed);
                    let heard = heard.clone();
                    async move {
                        tokio::spawn(async move {
                            tokio::time::sleep(TRIP).await;
                            heard.beacon_heard(&payload);
                        });
                    }
                })
                .await;
        });
        // A get at the cache's first instant would count as heard.
        tokio::time::sleep(Duration::from_millis(1)).await;
        (cache, sent)
    }

    /// 400 polls, each on its own schedule: `burst` at once every `every` ms, with a pause of
    /// `pause` ms after every 40; how many beacons they took.
    async fn open_arrivals(gap: Duration, burst: usize, every: u64, pause: u64) -> u64 {
        let (cache, sent) = paced(gap).await;
        let mut gets = tokio::task::JoinSet::new();
        for i in 0..400 {
            if i % 40 == 39 {
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
            let cache = cache.clone();
            gets.spawn(async move { cache.get("t1", &owner("alice"), Instant::now()).await.is_some() });
            if i % burst == burst - 1 {
                tokio::time::sleep(Duration::from_millis(every)).await;
            }
        }
        while let Some(hit) = gets.join_next().await {
            assert!(hit.expect("no panic"), "every poll is answered from the cache");
        }
        sent.load(Ordering::Relaxed)
    }

    #[tokio::test(start_paused = true)]
    async fn open_arrivals_share_one_beacon_per_gap() {
        let gap = Duration::from_millis(10);
        let paced = open_arrivals(gap, 1, 1, 0).await;
        let unpaced = open_arrivals(Duration::ZERO, 1, 1, 0).await;
        let paused = open_arrivals(gap, 1, 1, 6).await;
        // Bursts that fall between trips look like a closed loop of five clients that think
        // between polls (which the pacing cannot tell apart): one beacon per burst, no more.
        let bursts = open_arrivals(gap, 5, 5, 0).await;
        assert!((30..=60).contains(&paced), "about one beacon per 10 ms over 400 ms, sent {paced}");
        assert!(unpaced >= 150, "without a gap, one beacon per trip: sent {unpaced}");
        assert!((30..=60).contains(&paused), "a gap short of polls does not cut the next ones short: {paused}");
        assert!(bursts <= 80, "at most one beacon per burst: sent {bursts}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_closed_loop_never_waits_on_the_gap() {
        let gap = Duration::from_millis(5);
        let (cache, sent) = paced(gap).await;
        let start = Instant::now();
        let mut clients = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let cache = cache.clone();
            clients.spawn(async move {
                for _ in 0..50 {
                    assert!(cache.get("t1", &owner("alice"), Instant::now()).await.is_some());
                }
            });
        }
        while let Some(done) = clients.join_next().await {
            done.expect("no panic");
        }
        // 50 rounds of a trip each, and the first gap; one gap per round would be 250 ms.
        assert!(start.elapsed() < TRIP * 50 + gap * 4, "50 rounds took {:?}", start.elapsed());
        assert!(sent.load(Ordering::Relaxed) <= 51, "one beacon per round of the loop");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_poll_waits_one_trip_not_the_gap() {
        let (cache, _) = paced(Duration::from_millis(5)).await;
        for _ in 0..3 {
            let start = Instant::now();
            assert!(cache.get("t1", &owner("alice"), start).await.is_some());
            assert!(start.elapsed() <= TRIP, "waited {:?}", start.elapsed());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
