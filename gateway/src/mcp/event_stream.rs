//! The `events/stream` push stream (docs/events.md, 1.5 and 2.7): `notifications/events/active`
//! first, then the caller's own task status changes as `notifications/events/event`, each with
//! the cursor after it, a `notifications/events/heartbeat` while quiet, and the empty
//! `StreamEventsResult` when the gateway shuts down.
//!
//! Built like `subscriptions/listen` (`listen.rs`): a change message of one of the owner's tasks
//! only marks its queue shard *dirty*; the dirty shards are read from the outbox when the client
//! is ready for more, a batch at a time. A slow client therefore holds a cursor, a dirty set and
//! at most one batch, never a queue that grows with the events (back-pressure by coalescing).
//! The outbox is the truth (invariant 1): a lost wake-up only delays an event until the
//! backstop re-reads every shard.

use std::collections::VecDeque;
use std::time::Duration;

use futures::StreamExt as _;
use futures::stream;
use serde_json::{Map, Value, json};
use taskgate_shared::backoff::Backoff;
use taskgate_shared::protocol::{meta_keys, result};
use taskgate_shared::store::{EventCursor, OutboxEntry, OutboxRead, Position, ReadRequest, Store};
use taskgate_shared::task::TaskId;
use tokio_util::sync::CancellationToken;

use super::occurrences::{Subscription, occurrence};
use super::{Notice, Stream, StreamItem};
use crate::events::{Wake, Watch};
use crate::stream_slots::StreamSlot;

/// Entries one read returns at most: the most a stream holds unsent.
pub(crate) const BATCH: usize = 64;

/// How often an open stream re-reads every shard without a wake-up, at least (as listen's).
const BACKSTOP: Duration = Duration::from_secs(10);

/// The backstop's re-reads per second a replica spends at most, on average, over its streams.
const BACKSTOP_READS_PER_SECOND: f64 = 1_000.0;

/// Bounds of the wait between re-reads while Redis fails.
const RETRY_MIN: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// The backstop's period: listen's, and no longer than half the retention, so that a cursor's
/// time (which only a read of every shard moves) never ages into a false gap.
fn backstop_period(open: usize, retention_ms: u64) -> Duration {
    BACKSTOP
        .max(Duration::from_secs_f64(open as f64 / BACKSTOP_READS_PER_SECOND))
        .min(Duration::from_millis(retention_ms / 2))
        .max(Duration::from_millis(100))
}

/// What an `events/stream` request asked for, once checked and read the first time.
pub(crate) struct Opened {
    /// The request's id: the subscription id, with its JSON type.
    pub(crate) id: Value,
    /// The caller's owner digest.
    pub(crate) owner: String,
    pub(crate) filter: Subscription,
    /// The first read, from the request's cursor (or now).
    pub(crate) first: OutboxRead,
}

/// What the stream reads with.
pub(crate) struct Reading {
    pub(crate) store: Store,
    pub(crate) shards: u16,
    pub(crate) retention_ms: u64,
    pub(crate) heartbeat: Duration,
}

/// The state behind one stream.
pub(crate) struct EventStream {
    subscription_id: Value,
    owner: String,
    filter: Subscription,
    reading: Reading,
    /// Past every event read (sent or pending) and every entry the filter passed over.
    cursor: EventCursor,
    /// Read and not yet sent, each with the cursor that goes with it.
    pending: VecDeque<(OutboxEntry, String)>,
    /// A `notifications/events/active` to send before the pending events: (cursor, truncated).
    active: Option<(String, bool)>,
    /// Shards with changes not yet read, by shard number.
    dirty: Vec<bool>,
    watch: Watch,
    heartbeat: std::pin::Pin<Box<tokio::time::Sleep>>,
    /// Re-reads every shard now and then: a wake-up lost in transit delays an event by at most
    /// this period instead of forever.
    backstop: std::pin::Pin<Box<tokio::time::Sleep>>,
    retry: Backoff,
    failing: bool,
    /// A `notifications/events/error` is due: Redis has just started failing.
    error_due: bool,
    shutdown: CancellationToken,
    finished: bool,
    /// This stream's listen slot; also the replica's turns to re-read.
    slot: StreamSlot,
}

impl EventStream {
    pub(crate) fn new(
        opened: Opened,
        reading: Reading,
        watch: Watch,
        shutdown: CancellationToken,
        slot: StreamSlot,
    ) -> Self {
        let Opened { id, owner, filter, first } = opened;
        let shards = usize::from(reading.shards.max(1));
        let period = backstop_period(slot.open_streams(), reading.retention_ms);
        let mut stream = Self {
            subscription_id: id,
            owner,
            filter,
            cursor: first.cursor.clone(),
            pending: VecDeque::new(),
            active: Some((first.start.encode(), first.truncated)),
            dirty: vec![false; shards],
            watch,
            heartbeat: Box::pin(tokio::time::sleep(reading.heartbeat)),
            // The first after one period and a random part of another, later ones a jittered
            // period apart, so streams opened together do not re-read together.
            backstop: Box::pin(tokio::time::sleep(period + period.mul_f64(rand::random::<f64>()))),
            reading,
            retry: Backoff::new(RETRY_MIN, RETRY_MAX),
            failing: false,
            error_due: false,
            shutdown,
            finished: false,
            slot,
        };
        stream.take(first, false);
        stream
    }

    fn meta(&self) -> Value {
        json!({ meta_keys::SUBSCRIPTION_ID: self.subscription_id.clone() })
    }

    fn notice(&self, method: &'static str, mut params: Map<String, Value>) -> StreamItem {
        params.insert("_meta".into(), self.meta());
        StreamItem::Notice(Notice::new(method, Value::Object(params)))
    }

    /// The `StreamEventsResult`: empty, with the subscription id, as listen's result.
    fn closing_result(&mut self) -> StreamItem {
        self.finished = true;
        let mut fields = Map::new();
        fields.insert("resultType".into(), result::COMPLETE.into());
        fields.insert("_meta".into(), self.meta());
        StreamItem::Done(Ok(Value::Object(fields)))
    }

    /// Queues a read's events, each with the cursor after it: the read's start with each sent
    /// event's shard moved to it, and the read's own cursor on its last (which also covers what
    /// the filter passed over). A gap mid-stream is announced first.
    fn take(&mut self, read: OutboxRead, announce_gap: bool) {
        if announce_gap && read.truncated {
            self.active = Some((read.start.encode(), true));
        }
        let mut running = read.start;
        let count = read.entries.len();
        for (i, entry) in read.entries.into_iter().enumerate() {
            let cursor = if i + 1 == count {
                read.cursor.encode()
            } else {
                if let Some(position) = running.shards.get_mut(usize::from(entry.shard)) {
                    *position = Position { ms: entry.id.0, seq: entry.id.1, drained: false };
                }
                running.encode()
            };
            self.pending.push_back((entry, cursor));
        }
        // A shard not read to its end is read again as soon as the batch is sent.
        for (dirty, position) in self.dirty.iter_mut().zip(&read.cursor.shards) {
            *dirty |= !position.drained;
        }
        self.cursor = read.cursor;
    }

    fn mark(&mut self, wake: Wake) {
        mark_dirty(&mut self.dirty, wake);
    }

    /// Reads the dirty shards once; `false` when Redis failed (they stay dirty).
    async fn read_dirty(&mut self) -> bool {
        let clean = vec![false; self.dirty.len()];
        let only = std::mem::replace(&mut self.dirty, clean);
        let request = ReadRequest {
            owner: &self.owner,
            shards: self.reading.shards,
            cursor: Some(&self.cursor),
            max_age_ms: None,
            max_events: BATCH,
            retention_ms: self.reading.retention_ms,
            only: Some(&only),
        };
        let read = {
            let _turn = self.slot.read_turn().await;
            self.reading.store.read_outbox(request, |entry| self.filter.matches(entry)).await
        };
        match read {
            Ok(read) => {
                self.retry.reset();
                self.failing = false;
                self.take(read, true);
                true
            }
            Err(err) => {
                if !self.failing {
                    tracing::warn!(error = %err, "events/stream: outbox read failed; retrying with backoff");
                    self.error_due = true;
                }
                self.failing = true;
                for (dirty, was) in self.dirty.iter_mut().zip(only) {
                    *dirty |= was;
                }
                false
            }
        }
    }

    /// The next message to send, or `None` when the stream is over.
    async fn next_message(&mut self) -> Option<StreamItem> {
        loop {
            if self.finished {
                return None;
            }
            if self.shutdown.is_cancelled() {
                return Some(self.closing_result());
            }
            if let Some((cursor, truncated)) = self.active.take() {
                self.rearm_heartbeat();
                let mut params = Map::new();
                params.insert("cursor".into(), cursor.into());
                params.insert("truncated".into(), truncated.into());
                return Some(self.notice("notifications/events/active", params));
            }
            if std::mem::take(&mut self.error_due) {
                // A recoverable failure, once per outage: the subscription stays, and reading
                // resumes from its cursor when Redis answers again.
                let mut params = Map::new();
                let error = json!({ "code": -32603, "message": "the event store is unavailable; retrying" });
                params.insert("error".into(), error);
                return Some(self.notice("notifications/events/error", params));
            }
            if let Some((entry, cursor)) = self.pending.pop_front() {
                self.rearm_heartbeat();
                let mut params = match occurrence(&entry) {
                    Value::Object(params) => params,
                    _ => Map::new(),
                };
                params.insert("cursor".into(), cursor.into());
                return Some(self.notice("notifications/events/event", params));
            }
            while let Some(wake) = self.watch.try_recv() {
                self.mark(wake);
            }
            if self.dirty.iter().any(|d| *d) {
                if !self.read_dirty().await {
                    if self.error_due {
                        continue;
                    }
                    // Redis is failing: the heartbeat still goes out (its cursor is from
                    // memory), so the client does not take the stream for dead.
                    tokio::select! {
                        () = self.retry.wait() => {}
                        () = &mut self.heartbeat => return Some(self.heartbeat_notice()),
                        () = self.shutdown.cancelled() => return Some(self.closing_result()),
                    }
                }
                continue;
            }
            tokio::select! {
                wake = self.watch.recv() => match wake {
                    Some(wake) => self.mark(wake),
                    None => return None,
                },
                () = &mut self.backstop => {
                    let period = backstop_period(self.slot.open_streams(), self.reading.retention_ms);
                    let next = period.mul_f64(0.5 + rand::random::<f64>());
                    self.backstop.as_mut().reset(tokio::time::Instant::now() + next);
                    self.mark(Wake::Resync);
                }
                () = &mut self.heartbeat => return Some(self.heartbeat_notice()),
                () = self.shutdown.cancelled() => return Some(self.closing_result()),
            }
        }
    }

    /// `notifications/events/heartbeat` with the cursor past everything read.
    fn heartbeat_notice(&mut self) -> StreamItem {
        self.rearm_heartbeat();
        let mut params = Map::new();
        params.insert("cursor".into(), self.cursor.encode().into());
        self.notice("notifications/events/heartbeat", params)
    }

    /// A heartbeat is due one interval after the last message sent.
    fn rearm_heartbeat(&mut self) {
        let at = tokio::time::Instant::now() + self.reading.heartbeat;
        self.heartbeat.as_mut().reset(at);
    }

    /// The stream's messages, each sent whole as it is ready.
    pub(crate) fn into_stream(self, keep_alive: Duration) -> Stream {
        let items = stream::unfold(self, |mut events| async move {
            let item = events.next_message().await?;
            Some((item, events))
        });
        Stream { items: items.boxed(), keep_alive }
    }
}

/// Coalescing: a change marks its task's shard once however often it repeats; a resync (a new
/// pub/sub subscription, a dropped wake-up, the backstop) marks every shard; notices are not
/// changes.
fn mark_dirty(dirty: &mut [bool], wake: Wake) {
    match wake {
        Wake::Changed(task, _) => {
            if let Some(slot) = TaskId::parse(&task).and_then(|id| dirty.get_mut(usize::from(id.shard()))) {
                *slot = true;
            }
        }
        Wake::Resync => dirty.iter_mut().for_each(|d| *d = true),
        Wake::Notice(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_mark_their_shard_and_a_resync_marks_all() {
        let mut dirty = vec![false; 16];
        let task = TaskId::generate(16);
        for _ in 0..100 {
            mark_dirty(&mut dirty, Wake::Changed(task.as_str().to_owned(), None));
        }
        let marked: Vec<usize> = (0..16).filter(|i| dirty[*i]).collect();
        assert_eq!(marked, [usize::from(task.shard())]);
        mark_dirty(&mut dirty, Wake::Changed("not a task".into(), None));
        mark_dirty(&mut dirty, Wake::Notice(json!({})));
        assert_eq!(dirty.iter().filter(|d| **d).count(), 1, "unknown ids and notices mark nothing");
        mark_dirty(&mut dirty, Wake::Resync);
        assert!(dirty.iter().all(|d| *d));
    }

    #[test]
    fn the_backstop_is_listens_and_within_half_the_retention() {
        assert_eq!(backstop_period(1, 3_600_000), BACKSTOP);
        assert_eq!(backstop_period(100_000, 3_600_000), Duration::from_secs(100));
        assert_eq!(backstop_period(1, 4_000), Duration::from_secs(2));
        assert_eq!(backstop_period(1, 0), Duration::from_millis(100), "never a busy loop");
    }
}
