//! The `subscriptions/listen` stream for task ids: acknowledgement, one snapshot per accepted
//! task, then a snapshot on every change, and the listen result once every task is terminal.
//!
//! Wake-ups only mark tasks *dirty*; a snapshot is read from Redis when the client is ready for
//! the next event, and sent only if it differs from the last one sent for its task. A slow
//! client therefore costs at most one pending snapshot per task, always gets the newest, and
//! never misses a terminal one (back-pressure by coalescing, not by an unbounded queue).
//!
//! "Differs" is by (version, last update time), not "has a higher version": a failover that
//! loses the latest writes sends a record's version backwards, and a stream that only took
//! higher versions would then drop every later snapshot, the terminal one included.
//!
//! Each `notifications/tasks` carries `io.taskgate/seq` (1, 2, 3… on this stream, no holes) and
//! `io.taskgate/version` (the snapshot's), so a client tells a notification lost on the way (a
//! hole in `seq`) from coalescing (a jump in `version`). Both come from memory.

use std::collections::VecDeque;

use futures::StreamExt as _;
use futures::stream;
use serde_json::{Map, Value, json};
use taskgate_shared::backoff::Backoff;
use taskgate_shared::protocol::{meta_keys, result};
use taskgate_shared::store::Store;
use taskgate_shared::task::{Owner, Snapshot, TaskId};
use tokio_util::sync::CancellationToken;

use super::{Notice, NoticeParams, Stream, StreamItem};
use crate::events::{Wake, Watch};
use crate::metrics::METRICS;
use crate::stream_slots::StreamSlot;

/// How often an open stream re-reads its tasks without a wake-up.
const BACKSTOP: std::time::Duration = std::time::Duration::from_secs(10);

/// The backstop's re-reads per second a replica spends at most, on average, over all its
/// streams: with many streams open each one's period grows past [`BACKSTOP`], so 100,000
/// streams cost 1,000 reads a second rather than 10,000.
const BACKSTOP_READS_PER_SECOND: f64 = 1_000.0;

/// A stream's backstop period with `open` streams on the replica.
fn backstop_period(open: usize) -> std::time::Duration {
    BACKSTOP.max(std::time::Duration::from_secs_f64(open as f64 / BACKSTOP_READS_PER_SECOND))
}

/// The wait until a stream's next backstop: jittered (0.5 to 1.5 periods), so streams opened
/// together do not re-read together.
fn backstop_after(open: usize) -> std::time::Duration {
    backstop_period(open).mul_f64(0.5 + rand::random::<f64>())
}

/// Bounds of the wait between re-reads while Redis fails.
const RETRY_MIN: std::time::Duration = std::time::Duration::from_millis(200);
const RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// What a listen request asked for, once checked.
pub(crate) struct Subscription {
    /// The listen request's id: the subscription id, with its JSON type.
    pub(crate) id: Value,
    pub(crate) owner: Owner,
    /// Snapshots of the accepted tasks, in request order.
    pub(crate) accepted: Vec<Snapshot>,
    /// Whether the filter named `taskIds`.
    pub(crate) task_filter: bool,
}

struct Tracked {
    id: TaskId,
    /// The (version, `updated` time) of the last snapshot sent; `None` before the first.
    last_sent: Option<(u64, i64)>,
    done: bool,
}

enum Phase {
    Ack,
    Live,
    Finished,
}

/// The state behind one stream.
pub(crate) struct Listen {
    subscription_id: Value,
    store: Store,
    owner: Owner,
    tasks: Vec<Tracked>,
    /// Indexes into `tasks` whose latest state has not been looked at.
    dirty: VecDeque<usize>,
    /// Snapshots read at acceptance, sent first without reading again.
    initial: VecDeque<Snapshot>,
    watch: Watch,
    /// Re-reads every open task now and then: a wake-up lost in transit (a Cluster bus link
    /// down, a failover) delays a snapshot by at most this period instead of forever.
    backstop: std::pin::Pin<Box<tokio::time::Sleep>>,
    /// The wait between failed re-reads, and whether one failed since the last success.
    retry: Backoff,
    failing: bool,
    shutdown: CancellationToken,
    phase: Phase,
    /// Whether the filter named `taskIds` at all (then the acknowledgement lists the subset
    /// accepted, even when empty).
    task_filter: bool,
    /// This stream's count; also the replica's open streams and its turns to re-read.
    slot: StreamSlot,
    /// The `io.taskgate/seq` of the last `notifications/tasks` sent (0: none yet).
    seq: u64,
}

impl Listen {
    pub(crate) fn new(
        request: Subscription,
        store: Store,
        watch: Watch,
        shutdown: CancellationToken,
        slot: StreamSlot,
    ) -> Self {
        let Subscription { id: subscription_id, owner, accepted, task_filter } = request;
        let tasks = accepted
            .iter()
            .filter_map(|s| Some(Tracked { id: TaskId::parse(&s.task_id)?, last_sent: None, done: false }))
            .collect();
        Self {
            subscription_id,
            store,
            owner,
            tasks,
            dirty: VecDeque::new(),
            initial: accepted.into(),
            watch,
            // The first after 10 s and a random part of a period (10 to 20 s with few streams
            // open), later ones a jittered period apart.
            backstop: Box::pin(tokio::time::sleep(
                BACKSTOP + backstop_period(slot.open_streams()).mul_f64(rand::random::<f64>()),
            )),
            retry: Backoff::new(RETRY_MIN, RETRY_MAX),
            failing: false,
            shutdown,
            phase: Phase::Ack,
            task_filter,
            slot,
            seq: 0,
        }
    }

    fn meta(&self) -> Value {
        json!({ meta_keys::SUBSCRIPTION_ID: self.subscription_id.clone() })
    }

    fn acknowledgement(&self) -> StreamItem {
        let ids: Vec<&str> = self.tasks.iter().map(|t| t.id.as_str()).collect();
        let notifications = if self.task_filter { json!({ "taskIds": ids }) } else { json!({}) };
        StreamItem::Notice(Notice::new(
            "notifications/subscriptions/acknowledged",
            json!({ "notifications": notifications, "_meta": self.meta() }),
        ))
    }

    /// The DetailedTask, as `tasks/get` would return it, minus `resultType`: written straight
    /// into one buffer, the stored result spliced in. Numbered: call it only for a
    /// notification that is sent.
    fn notification(&mut self, snapshot: &Snapshot) -> StreamItem {
        self.seq += 1;
        // Room for the `_meta` with the subscription id, the sequence number and version too.
        let mut members = Vec::with_capacity(snapshot.encoded_len_hint() + 192);
        snapshot.write_detailed(&mut members);
        members.extend_from_slice(br#","_meta":"#);
        let mut meta = self.meta();
        meta[meta_keys::SEQ] = self.seq.into();
        meta[meta_keys::VERSION] = snapshot.version.into();
        // Into a Vec, of a Value: writing cannot fail.
        let _ = serde_json::to_writer(&mut members, &meta);
        StreamItem::Notice(Notice { method: "notifications/tasks", params: NoticeParams::Members(members) })
    }

    /// The listen request's response (its id is the subscription id), which ends the stream.
    fn closing_result(&self) -> StreamItem {
        let mut fields = Map::new();
        fields.insert("resultType".into(), result::COMPLETE.into());
        fields.insert("_meta".into(), self.meta());
        StreamItem::Done(Ok(Value::Object(fields)))
    }

    fn mark(&mut self, wake: Wake) {
        mark_dirty(&mut self.dirty, &self.tasks, wake);
    }

    /// Accepts a snapshot unless its task is done or it is the one last sent.
    fn take(&mut self, snapshot: &Snapshot) -> bool {
        let Some(task) = self.tasks.iter_mut().find(|t| t.id.as_str() == snapshot.task_id) else { return false };
        take_snapshot(task, snapshot)
    }

    /// The next message to send, or `None` when the stream is over.
    async fn next_message(&mut self) -> Option<StreamItem> {
        loop {
            match self.phase {
                Phase::Finished => return None,
                Phase::Ack => {
                    self.phase = Phase::Live;
                    return Some(self.acknowledgement());
                }
                Phase::Live => {}
            }
            if let Some(snapshot) = self.initial.pop_front() {
                if self.take(&snapshot) {
                    return Some(self.notification(&snapshot));
                }
                continue;
            }
            while let Some(wake) = self.watch.try_recv() {
                self.mark(wake);
            }
            if let Some(i) = self.dirty.pop_front() {
                let id = self.tasks[i].id.clone();
                let read = {
                    let _turn = self.slot.read_turn().await;
                    self.store.get_owned_task(&id, &self.owner).await
                };
                match read {
                    Ok(Some(snapshot)) => {
                        self.retry.reset();
                        self.failing = false;
                        if self.take(&snapshot) {
                            // Both clocks are wall clocks: Redis `TIME` wrote `updated`.
                            let lag_ms =
                                taskgate_shared::task::now_ms().saturating_sub(snapshot.updated_at_ms.max(0) as u64);
                            METRICS.sse_lag.observe(lag_ms as f64 / 1000.0);
                            return Some(self.notification(&snapshot));
                        }
                    }
                    // Expired (or gone): nothing more will ever come for it.
                    Ok(_) => self.tasks[i].done = true,
                    Err(err) => {
                        // Redis is failing: back off (logging once per outage), and still end
                        // with the graceful result on shutdown.
                        if !self.failing {
                            tracing::warn!(task_id = %id, error = %err, "listen: re-read failed; retrying with backoff");
                        }
                        self.failing = true;
                        self.dirty.push_back(i);
                        tokio::select! {
                            () = self.retry.wait() => {}
                            () = self.shutdown.cancelled() => {
                                self.phase = Phase::Finished;
                                return Some(self.closing_result());
                            }
                        }
                    }
                }
                continue;
            }
            if self.tasks.iter().all(|t| t.done) {
                self.phase = Phase::Finished;
                return Some(self.closing_result());
            }
            tokio::select! {
                wake = self.watch.recv() => match wake {
                    Some(wake) => self.mark(wake),
                    None => return None,
                },
                () = &mut self.backstop => {
                    let next = backstop_after(self.slot.open_streams());
                    self.backstop.as_mut().reset(tokio::time::Instant::now() + next);
                    self.mark(Wake::Resync);
                }
                () = self.shutdown.cancelled() => {
                    self.phase = Phase::Finished;
                    return Some(self.closing_result());
                }
            }
        }
    }

    /// The stream's messages, each sent whole as it is ready.
    pub(crate) fn into_stream(self, keep_alive: std::time::Duration) -> Stream {
        let items = stream::unfold(self, |mut listen| async move {
            let item = listen.next_message().await?;
            Some((item, listen))
        });
        Stream { items: items.boxed(), keep_alive }
    }
}

/// Coalescing: a change marks its task dirty once however often it repeats; a resync marks
/// every task that is not done; notices are not changes.
fn mark_dirty(dirty: &mut VecDeque<usize>, tasks: &[Tracked], wake: Wake) {
    match wake {
        Wake::Changed(task, _) => {
            if let Some(i) = tasks.iter().position(|t| t.id.as_str() == task && !t.done)
                && !dirty.contains(&i)
            {
                dirty.push_back(i);
            }
        }
        Wake::Resync => *dirty = (0..tasks.len()).filter(|i| !tasks[*i].done).collect(),
        Wake::Notice(_) => {}
    }
}

/// Whether `snapshot` should be sent for `task`, updating what was last sent.
fn take_snapshot(task: &mut Tracked, snapshot: &Snapshot) -> bool {
    let this = (snapshot.version, snapshot.updated_at_ms);
    if task.done || task.last_sent == Some(this) {
        return false;
    }
    if let Some((last, _)) = task.last_sent
        && snapshot.version > last + 1
    {
        METRICS.sse_coalesced.inc_by(snapshot.version - last - 1);
    }
    task.last_sent = Some(this);
    task.done = snapshot.status.is_terminal();
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskgate_shared::task::TaskStatus;

    fn snapshot(version: u64, updated: i64, status: TaskStatus) -> Snapshot {
        Snapshot {
            task_id: "t".into(),
            owner: Owner { tenant: "a".into(), principal: "b".into() },
            status,
            status_message: None,
            created_at_ms: 0,
            updated_at_ms: updated,
            ttl_ms: 1,
            poll_interval_ms: 1,
            input_requests: Map::new(),
            result: None,
            error: None,
            version,
        }
    }

    #[test]
    fn changes_coalesce_into_one_mark_per_task() {
        let tracked = |done| Tracked { id: TaskId::generate(1), last_sent: None, done };
        let tasks = vec![tracked(false), tracked(false), tracked(true)];
        let changed = |i: usize| Wake::Changed(tasks[i].id.as_str().to_owned(), None);
        let mut dirty = VecDeque::new();
        for _ in 0..100 {
            mark_dirty(&mut dirty, &tasks, changed(1));
        }
        mark_dirty(&mut dirty, &tasks, changed(0));
        mark_dirty(&mut dirty, &tasks, changed(2));
        mark_dirty(&mut dirty, &tasks, Wake::Changed("t_unknown".into(), None));
        mark_dirty(&mut dirty, &tasks, Wake::Notice(json!({})));
        assert_eq!(dirty, [1, 0], "in order of first change; done and unknown tasks are not marked");
        let mut resynced = VecDeque::from([1]);
        mark_dirty(&mut resynced, &tasks, Wake::Resync);
        assert_eq!(resynced, [0, 1], "a resync marks every task that is not done, once");
    }

    #[test]
    fn repeats_are_dropped_and_rollbacks_are_not() {
        let mut task = Tracked { id: TaskId::generate(1), last_sent: None, done: false };
        assert!(take_snapshot(&mut task, &snapshot(1, 10, TaskStatus::Working)));
        assert!(!take_snapshot(&mut task, &snapshot(1, 10, TaskStatus::Working)), "the same snapshot twice");
        assert!(take_snapshot(&mut task, &snapshot(4, 40, TaskStatus::Working)), "coalesced past 2 and 3");
        // A failover lost versions 2..4; the next write is version 2 again, later in time.
        assert!(take_snapshot(&mut task, &snapshot(2, 50, TaskStatus::Cancelled)), "the terminal one after a rollback");
        assert!(!take_snapshot(&mut task, &snapshot(3, 60, TaskStatus::Cancelled)), "nothing after the terminal one");
    }
}
