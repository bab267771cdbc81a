//! Reading an owner's outboxes from a cursor (docs/events.md, 2.6): one `read_outbox` script per
//! shard, sent at once on the shared connection (one round trip), merged by stream id.

use super::cursor::{EventCursor, Position};
use crate::store::outcomes::ShardRead;
use crate::store::scripts::read_outbox;
use crate::store::{Store, StoreError};

/// Each shard looks at this many entries per event asked for, at most: a filter that matches
/// little cannot make one read long (the cursor still moves past what it skipped).
const SCAN_FACTOR: usize = 4;

/// What to read.
#[derive(Debug, Clone, Copy)]
pub struct ReadRequest<'a> {
    /// Whose outboxes: an [`owner_digest`](crate::store::owner_digest). A caller reads only its
    /// own principal's (ownership is structural: docs/events.md, 2.1).
    pub owner: &'a str,
    /// The queue shard count (`--queue-shards`).
    pub shards: u16,
    /// Where to start; `None` is now: no events, a fresh cursor (one `TIME`).
    pub cursor: Option<&'a EventCursor>,
    /// Read nothing older than this (`maxAgeMs`); ignored with no cursor.
    pub max_age_ms: Option<u64>,
    /// Entries to return at most (at least 1).
    pub max_events: usize,
    /// The outbox retention the gateway runs with (`--events-retention-ms`): a cursor older
    /// than twice it is a gap.
    pub retention_ms: u64,
    /// Read only the shards marked here (by shard number; a shard past the end is not read),
    /// keeping the others' positions as the cursor has them; `None` reads every shard. A push
    /// stream reads just the shards a wake-up named. Ignored with no cursor.
    pub only: Option<&'a [bool]>,
}

/// One status change of a task, as its transition's script appended it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    pub shard: u8,
    /// Its stream id, `ms-seq`.
    pub id: (u64, u64),
    pub task_id: String,
    /// The status the task changed to.
    pub status: String,
    /// The record's version after the change.
    pub version: u64,
    /// The record's `updated` (Redis ms): when it happened.
    pub updated_ms: u64,
}

impl OutboxEntry {
    /// `<taskId>:<version>:<updated ms>`: the same change gets the same id on every path
    /// (docs/events.md, 2.1).
    pub fn event_id(&self) -> String {
        format!("{}:{}:{}", self.task_id, self.version, self.updated_ms)
    }

    fn parse(shard: u8, id: (u64, u64), fields: &[(String, String)]) -> Option<Self> {
        let get = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
        Some(Self {
            shard,
            id,
            task_id: get("t")?.to_owned(),
            status: get("s")?.to_owned(),
            version: get("v")?.parse().ok()?,
            updated_ms: get("u")?.parse().ok()?,
        })
    }
}

/// What a read found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRead {
    /// The matching entries, in stream-id order (roughly time order across shards, exact
    /// within one: a task's changes are always in order).
    pub entries: Vec<OutboxEntry>,
    /// Where the next read starts: a consistent cut, past everything returned or skipped by
    /// the filter, and nothing not returned that matched.
    pub cursor: EventCursor,
    /// Entries were lost between the cursor and where reading began (trimmed, expired, or
    /// skipped by `maxAgeMs`).
    pub truncated: bool,
    /// Some shard was not read to its end: read again at once.
    pub has_more: bool,
    /// Where this read began, past any gap: a cursor from which a read returns these same
    /// entries first, and reports no gap for what this read already reported. What a push
    /// stream's `notifications/events/active` carries.
    pub start: EventCursor,
}

impl Store {
    /// Reads the next up to `max_events` entries of `owner`'s outboxes after `cursor` that
    /// `keep` accepts (filters: task ids, statuses), with gap detection; one round trip
    /// (`None` cursor: one `TIME`). Skipped entries still move the cursor.
    pub async fn read_outbox(
        &self,
        request: ReadRequest<'_>,
        keep: impl Fn(&OutboxEntry) -> bool,
    ) -> Result<OutboxRead, StoreError> {
        let shards = usize::from(request.shards.max(1));
        let Some(cursor) = request.cursor else {
            let (seconds, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut self.conn()).await?;
            let now = seconds * 1000 + micros / 1000;
            return Ok(OutboxRead {
                entries: Vec::new(),
                cursor: EventCursor::now(shards, now),
                truncated: false,
                has_more: false,
                start: EventCursor::now(shards, now),
            });
        };
        let max_events = request.max_events.max(1);
        let wanted = |shard: usize| request.only.is_none_or(|only| only.get(shard).copied().unwrap_or(false));
        let reads = (0..shards).map(|shard| {
            let read = wanted(shard);
            let shard = u8::try_from(shard).unwrap_or(u8::MAX);
            let outbox = self.keys().outbox(shard, request.owner);
            let position = cursor.position(usize::from(shard));
            let after = position.id();
            let mut conn = self.conn();
            async move {
                if !read {
                    return Ok(None);
                }
                let keys = read_outbox::Keys { outbox: &outbox };
                let args = read_outbox::Args {
                    after: &after,
                    drained: if position.drained { "1" } else { "0" },
                    made: cursor.made_ms,
                    retention: request.retention_ms,
                    max_age: request.max_age_ms.unwrap_or(0),
                    count: max_events * SCAN_FACTOR,
                };
                read_outbox::call(&mut conn, keys, args).await.map(Some)
            }
        });
        let reads = futures::future::try_join_all(reads).await?;
        Ok(merge(&reads, cursor, max_events, keep))
    }
}

/// Merges the shards' reads by stream id, keeps the first `max_events` matches, and moves
/// each shard's position as far as it may: past everything it looked at when all its matches
/// were kept, else to just before its first match that was cut. A shard not read (`None`)
/// keeps its position in `from`, and the cursor's time stays no later than `from`'s, since
/// that shard was last looked at then.
fn merge(
    reads: &[Option<ShardRead>],
    from: &EventCursor,
    max_events: usize,
    keep: impl Fn(&OutboxEntry) -> bool,
) -> OutboxRead {
    // Per shard: every entry looked at (its id), and the matches among them (their index).
    let mut looked: Vec<Vec<(u64, u64)>> = Vec::with_capacity(reads.len());
    let mut matches: Vec<(usize, usize, OutboxEntry)> = Vec::new();
    for (shard, read) in reads.iter().enumerate() {
        let Some(read) = read else {
            looked.push(Vec::new());
            continue;
        };
        let mut ids = Vec::with_capacity(read.entries.len());
        for (id, fields) in &read.entries {
            let Some(id) = Position::parse_id(id) else { continue };
            ids.push(id);
            let shard_no = u8::try_from(shard).unwrap_or(u8::MAX);
            // An entry that does not read as one is skipped, and the cursor moves past it.
            if let Some(entry) = OutboxEntry::parse(shard_no, id, fields).filter(|e| keep(e)) {
                matches.push((shard, ids.len() - 1, entry));
            }
        }
        looked.push(ids);
    }
    matches.sort_by_key(|(shard, _, entry)| (entry.id, *shard));
    let cut: Vec<(usize, usize, OutboxEntry)> = matches.split_off(matches.len().min(max_events));
    let skipped = reads.iter().any(Option::is_none);
    let made_ms =
        reads.iter().flatten().map(|r| r.now_ms).chain(skipped.then_some(from.made_ms)).min().unwrap_or(from.made_ms);
    let mut shards = Vec::with_capacity(reads.len());
    let mut starts = Vec::with_capacity(reads.len());
    for (shard, read) in reads.iter().enumerate() {
        let Some(read) = read else {
            shards.push(from.position(shard));
            starts.push(from.position(shard));
            continue;
        };
        starts.push(start_of(read, looked[shard].first().copied(), made_ms));
        let start = Position::parse_id(&read.start).unwrap_or((made_ms.saturating_sub(1), u64::MAX));
        let first_cut = cut.iter().filter(|(s, _, _)| *s == shard).map(|(_, i, _)| *i).min();
        let ids = &looked[shard];
        let position = match first_cut {
            None => {
                let (ms, seq) = ids.last().copied().unwrap_or(start);
                Position { ms, seq, drained: read.ended }
            }
            Some(i) => {
                let (ms, seq) = if i == 0 { start } else { ids[i - 1] };
                Position { ms, seq, drained: false }
            }
        };
        shards.push(position);
    }
    let truncated = reads.iter().flatten().any(|r| r.gap);
    let has_more = shards.iter().any(|p| !p.drained);
    OutboxRead {
        entries: matches.into_iter().map(|(_, _, e)| e).collect(),
        cursor: EventCursor { made_ms, shards },
        truncated,
        has_more,
        start: EventCursor { made_ms, shards: starts },
    }
}

/// A shard's position before its read: just before the first entry it looked at (past any
/// trimmed ones, so not a gap again); with none, where the read began, or "now" after a gap
/// (nothing is left to read before it).
fn start_of(read: &ShardRead, first: Option<(u64, u64)>, made_ms: u64) -> Position {
    match first {
        Some((ms, 0)) => Position { ms: ms.saturating_sub(1), seq: u64::MAX, drained: false },
        Some((ms, seq)) => Position { ms, seq: seq - 1, drained: false },
        None if read.gap => Position::now(made_ms),
        None => match Position::parse_id(&read.start) {
            Some((ms, seq)) => Position { ms, seq, drained: read.ended },
            None => Position::now(made_ms),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, task: &str, status: &str, version: u64) -> (String, Vec<(String, String)>) {
        let fields = [("t", task), ("s", status), ("v", &version.to_string()), ("u", "77")]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        (id.to_owned(), fields)
    }

    fn shard(entries: Vec<(String, Vec<(String, String)>)>, ended: bool) -> Option<ShardRead> {
        Some(ShardRead { now_ms: 100, gap: false, ended, start: "50-0".to_owned(), entries })
    }

    /// Where the reads in these tests start: every shard at 50-0, read at 100.
    fn from(shards: usize) -> EventCursor {
        EventCursor { made_ms: 100, shards: vec![Position { ms: 50, seq: 0, drained: true }; shards] }
    }

    #[test]
    fn merges_by_id_and_cuts_consistently() {
        let reads = vec![
            shard(vec![entry("60-0", "a", "working", 1), entry("80-0", "a", "completed", 2)], true),
            shard(vec![entry("70-0", "b", "working", 1), entry("90-0", "b", "failed", 2)], true),
        ];
        let read = merge(&reads, &from(2), 3, |_| true);
        let ids: Vec<(u64, u64)> = read.entries.iter().map(|e| e.id).collect();
        assert_eq!(ids, vec![(60, 0), (70, 0), (80, 0)]);
        assert_eq!(read.entries[0].event_id(), "a:1:77");
        // Shard 0 gave all it had; shard 1's 90-0 was cut: it stays just before it.
        assert_eq!(read.cursor.shards[0], Position { ms: 80, seq: 0, drained: true });
        assert_eq!(read.cursor.shards[1], Position { ms: 70, seq: 0, drained: false });
        assert!(read.has_more && !read.truncated);
        assert_eq!(read.cursor.made_ms, 100);
        // The start: just before each shard's first entry.
        assert_eq!(read.start.shards[0], Position { ms: 59, seq: u64::MAX, drained: false });
        assert_eq!(read.start.shards[1], Position { ms: 69, seq: u64::MAX, drained: false });
    }

    #[test]
    fn after_a_gap_the_start_is_past_it() {
        let mut trimmed = shard(vec![entry("60-3", "a", "working", 1)], true).unwrap();
        trimmed.gap = true;
        let mut gone = shard(Vec::new(), true).unwrap();
        gone.gap = true;
        let read = merge(&[Some(trimmed), Some(gone)], &from(2), 10, |_| true);
        assert!(read.truncated);
        assert_eq!(read.start.shards[0], Position { ms: 60, seq: 2, drained: false });
        assert_eq!(read.start.shards[1], Position::now(100));
    }

    #[test]
    fn a_filter_skips_but_moves_the_cursor() {
        let reads = vec![shard(
            vec![entry("60-0", "a", "working", 1), entry("61-0", "x", "working", 1), entry("62-0", "a", "failed", 2)],
            false,
        )];
        let read = merge(&reads, &from(1), 10, |e| e.task_id == "a" && e.status == "failed");
        assert_eq!(read.entries.len(), 1);
        assert_eq!(read.cursor.shards[0], Position { ms: 62, seq: 0, drained: false });
        assert!(read.has_more);
        let empty = merge(&[shard(Vec::new(), true)], &from(1), 10, |_| true);
        assert_eq!(empty.cursor.shards[0], Position { ms: 50, seq: 0, drained: true });
        assert!(!empty.has_more);
    }

    #[test]
    fn a_malformed_entry_is_passed_over() {
        let reads = vec![shard(vec![("60-0".to_owned(), vec![]), entry("61-0", "a", "working", 1)], true)];
        let read = merge(&reads, &from(1), 10, |_| true);
        assert_eq!(read.entries.len(), 1);
        assert_eq!(read.cursor.shards[0].ms, 61);
    }

    #[test]
    fn a_shard_not_read_keeps_its_position_and_time() {
        let old = Position { ms: 40, seq: 3, drained: false };
        let start = EventCursor { made_ms: 90, shards: vec![Position { ms: 50, seq: 0, drained: true }, old] };
        let reads = vec![shard(vec![entry("60-0", "a", "working", 1)], true), None];
        let read = merge(&reads, &start, 10, |_| true);
        assert_eq!(read.entries.len(), 1);
        assert_eq!(read.cursor.shards, vec![Position { ms: 60, seq: 0, drained: true }, old]);
        assert_eq!(read.cursor.made_ms, 90, "no later than when the unread shard was looked at");
        assert!(read.has_more, "the unread shard was not drained");
    }
}
