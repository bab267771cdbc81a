//! The deliverer's view of an owner's outbox (the store's `read_outbox`, the one events/poll
//! uses): occurrences past a position, each with the position just after it, and whether the
//! read found a gap.

use serde_json::{Value, json};
use taskgate_shared::store::{EventCursor, OutboxEntry, ReadRequest, Store, StoreError};
use taskgate_shared::task::iso8601_ms;

/// The event type (docs/events.md, 2.2).
const EVENT_NAME: &str = "taskgate.task.status";

/// One occurrence to POST.
pub(super) struct Occurrence {
    pub(super) event_id: String,
    pub(super) task_id: String,
    pub(super) status: String,
    /// The occurrence's JSON, without `cursor`.
    pub(super) body: Value,
    /// The position once this event is acknowledged: every shard at its last entry returned
    /// up to this one (a safe watermark: everything before it on every shard is acknowledged
    /// or abandoned).
    pub(super) cursor: String,
    /// When the task changed (ms, Redis's clock): the start of the delivery lag.
    pub(super) changed_ms: u64,
}

/// A read past a position.
pub(super) struct Batch {
    pub(super) events: Vec<Occurrence>,
    /// Entries between the position and the read were lost (retention, a trimmed stream).
    pub(super) gap: bool,
    /// The position after everything looked at.
    pub(super) end: String,
}

/// Where the outbox is read from: the queue shard count and the retention.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outbox {
    pub(crate) shards: u16,
    pub(crate) retention_ms: u64,
}

/// Up to `max` occurrences of `owner`'s outbox past `position` (empty or unreadable: now).
pub(super) async fn read(
    store: &Store,
    outbox: Outbox,
    owner: &str,
    position: &str,
    max: usize,
    keep: impl Fn(&OutboxEntry) -> bool,
) -> Result<Batch, StoreError> {
    let start = EventCursor::decode(position).ok();
    let request = ReadRequest {
        owner,
        shards: outbox.shards,
        cursor: start.as_ref(),
        max_age_ms: None,
        max_events: max,
        retention_ms: outbox.retention_ms,
        only: None,
    };
    let read = store.read_outbox(request, keep).await?;
    let mut cut = start.unwrap_or_else(|| read.cursor.clone());
    cut.made_ms = read.cursor.made_ms;
    let events = read
        .entries
        .iter()
        .map(|entry| {
            let shard = usize::from(entry.shard);
            if cut.shards.len() <= shard {
                let fill = cut.position(shard);
                cut.shards.resize(shard + 1, fill);
            }
            cut.shards[shard] = taskgate_shared::store::Position { ms: entry.id.0, seq: entry.id.1, drained: false };
            Occurrence {
                event_id: entry.event_id(),
                task_id: entry.task_id.clone(),
                status: entry.status.clone(),
                body: json!({
                    "eventId": entry.event_id(),
                    "name": EVENT_NAME,
                    "timestamp": iso8601_ms(entry.updated_ms as i64),
                    "data": { "taskId": entry.task_id, "status": entry.status, "version": entry.version },
                }),
                cursor: cut.encode(),
                changed_ms: entry.updated_ms,
            }
        })
        .collect();
    Ok(Batch { events, gap: read.truncated, end: read.cursor.encode() })
}
