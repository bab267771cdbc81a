//! What the operator console reads and does: pages of the task indexes, one task's whole
//! record with its timeline, and the operator's actions.
//!
//! The indexes are sorted sets per queue shard (all tenants, and one per tenant), task id ->
//! expiry, written by `create_task` and pruned of expired tasks there. A page reads each
//! shard's next entries (one command per shard, sent together), merges them, and reads the
//! records it shows the same way: its cost follows the page and the shard count, never the
//! keyspace.

use std::collections::BTreeMap;

use super::outcomes::OperatorFail;
use super::scripts::{fail_task, record_reveal};
use super::{Store, StoreError};
use crate::task::{Actor, TaskId, TaskStatus, Transition};

/// Entries a task's timeline keeps at most, the newest (the scripts' prelude, `TIMELINE_MAX`).
pub const TIMELINE_MAX: usize = 200;
/// Reveal entries a task's timeline keeps at most, the newest (`record_reveal.lua`).
pub const REVEALS_KEPT: usize = 20;
// Reveals alone never fill a timeline: its transitions keep room.
const _: () = assert!(REVEALS_KEPT < TIMELINE_MAX / 2);

/// Index entries examined at most per page request, as a multiple of the page size: a filter
/// that matches little returns a short page and a cursor to go on from, not an unbounded scan.
const EXAMINE_FACTOR: usize = 10;

/// Where a page starts: after this index entry (expiry, then id, both descending).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub expires_ms: i64,
    pub id: String,
}

impl Cursor {
    /// `"<expires>.<id>"`, for a URL.
    pub fn encode(&self) -> String {
        format!("{}.{}", self.expires_ms, self.id)
    }

    pub fn parse(text: &str) -> Option<Self> {
        let (expires, id) = text.split_once('.')?;
        let id = TaskId::parse(id)?;
        Some(Self { expires_ms: expires.parse().ok()?, id: id.as_str().to_owned() })
    }

    fn is_before(&self, expires_ms: i64, id: &str) -> bool {
        (expires_ms, id) < (self.expires_ms, self.id.as_str())
    }
}

/// Which tasks a page lists. Empty fields match everything.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub tenant: Option<String>,
    pub tool: Option<String>,
    pub status: Option<String>,
    /// Created at least this long ago.
    pub min_age_ms: Option<i64>,
    /// Created at most this long ago.
    pub max_age_ms: Option<i64>,
}

/// One listed task: the record's summary fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub id: String,
    pub tenant: String,
    pub principal: String,
    pub tool: String,
    pub status: String,
    pub created_ms: i64,
    pub updated_ms: i64,
    pub expires_ms: i64,
    /// The worker running it now, if any.
    pub holder: Option<String>,
    pub message: Option<String>,
}

impl Row {
    /// Queued: working, and no worker holds it.
    pub fn queued(&self) -> bool {
        self.status == "working" && self.holder.is_none()
    }
}

/// A page of the list, newest expiry first, and where the next one starts.
#[derive(Debug, Clone, Default)]
pub struct Page {
    pub rows: Vec<Row>,
    pub next: Option<Cursor>,
}

/// Everything stored about one task, for an operator.
#[derive(Debug, Clone)]
pub struct Inspection {
    /// Every field of the record, as stored, with long values put back from their own keys.
    pub record: BTreeMap<String, String>,
    /// Outstanding input requests, key -> request JSON.
    pub inputs: BTreeMap<String, String>,
    /// Answers received, key -> response JSON.
    pub answers: BTreeMap<String, String>,
    /// The transitions, oldest first, each a JSON object.
    pub timeline: Vec<serde_json::Value>,
}

const ROW_FIELDS: [&str; 9] = ["tenant", "principal", "tool", "status", "created", "updated", "ttl", "holder", "msg"];

impl Store {
    /// One page of the task index of `filter.tenant` (all tenants when `None`) over `shards`
    /// queue shards, after `after`. At most `limit` rows.
    pub async fn list_tasks(
        &self,
        shards: u16,
        filter: &Filter,
        after: Option<&Cursor>,
        limit: usize,
        now_ms: i64,
    ) -> Result<Page, StoreError> {
        let limit = limit.max(1);
        let budget = limit * EXAMINE_FACTOR;
        let mut page = Page::default();
        let mut cursor = after.cloned();
        let mut examined = 0;
        while examined < budget {
            let (entries, more) = self
                .index_entries(shards, filter.tenant.as_deref(), cursor.as_ref(), limit.min(budget - examined))
                .await?;
            if entries.is_empty() {
                return Ok(page);
            }
            examined += entries.len();
            let rows = self.rows(&entries).await?;
            let mut used = 0;
            for (entry, row) in entries.iter().zip(rows) {
                used += 1;
                cursor = Some(Cursor { expires_ms: entry.0, id: entry.1.clone() });
                if let Some(row) = row.filter(|row| matches(filter, row, now_ms)) {
                    page.rows.push(row);
                    if page.rows.len() == limit {
                        break;
                    }
                }
            }
            if !more && used == entries.len() {
                // The indexes are read to their end.
                return Ok(page);
            }
            if page.rows.len() == limit {
                break;
            }
        }
        page.next = cursor;
        Ok(page)
    }

    /// The next `count` index entries after `after` over every shard, merged: `(expiry, id)`
    /// descending, and whether any shard may have more.
    async fn index_entries(
        &self,
        shards: u16,
        tenant: Option<&str>,
        after: Option<&Cursor>,
        count: usize,
    ) -> Result<(Vec<(i64, String)>, bool), StoreError> {
        // Below the cursor's expiry, each shard's next `count` entries: the next page is among
        // them. At the cursor's own expiry, every entry (they tie, so no window of them is
        // safe to cut), kept where its id sorts after the cursor's.
        let below = after.map_or_else(|| "+inf".to_owned(), |c| format!("({}", c.expires_ms));
        // One command per shard, sent together: each shard is its own Cluster slot, so they
        // cannot share a pipeline there (the multiplexed connection batches them anyway).
        let reads = (0..shards).map(|shard| {
            // Shards are u8 in ids; more than 256 is refused by the configuration.
            let key = self.keys().task_index(shard as u8, tenant);
            let mut conn = self.conn();
            let below = below.clone();
            async move {
                let mut window = redis::cmd("ZREVRANGEBYSCORE");
                window.arg(&key).arg(below).arg("-inf").arg("WITHSCORES").arg("LIMIT").arg(0).arg(count);
                let rest: Vec<(String, i64)> = window.query_async(&mut conn).await?;
                let ties: Vec<(String, i64)> = match after {
                    Some(c) => {
                        redis::cmd("ZRANGEBYSCORE")
                            .arg(&key)
                            .arg(c.expires_ms)
                            .arg(c.expires_ms)
                            .arg("WITHSCORES")
                            .query_async(&mut conn)
                            .await?
                    }
                    None => Vec::new(),
                };
                Ok::<_, redis::RedisError>((rest, ties))
            }
        });
        let replies = futures::future::try_join_all(reads).await?;
        let mut more = false;
        let mut merged = Vec::new();
        for (rest, ties) in replies {
            more |= rest.len() == count;
            merged.extend(
                ties.into_iter()
                    .map(|(id, score)| (score, id))
                    .filter(|(s, id)| after.is_none_or(|c| c.is_before(*s, id))),
            );
            merged.extend(rest.into_iter().map(|(id, score)| (score, id)));
        }
        merged.sort_unstable_by(|a, b| b.cmp(a));
        more |= merged.len() > count;
        merged.truncate(count);
        Ok((merged, more))
    }

    /// The summary of each entry's record; `None` where it has expired.
    async fn rows(&self, entries: &[(i64, String)]) -> Result<Vec<Option<Row>>, StoreError> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<TaskId> = entries.iter().filter_map(|(_, id)| TaskId::parse(id)).collect();
        // Sent together, one command each (the records are in many Cluster slots).
        let reads = ids.iter().map(|id| {
            let record = self.keys().task(id).record;
            let mut conn = self.conn();
            async move {
                redis::cmd("HMGET").arg(record).arg(&ROW_FIELDS[..]).query_async::<Vec<Option<String>>>(&mut conn).await
            }
        });
        let replies = futures::future::try_join_all(reads).await?;
        Ok(ids.iter().zip(replies).map(|(id, fields)| row_from(id, fields)).collect())
    }

    /// Everything stored about a task, in one round trip; `None` when it does not exist.
    pub async fn inspect_task(&self, id: &TaskId) -> Result<Option<Inspection>, StoreError> {
        let keys = self.keys().task(id);
        let mut pipe = redis::pipe();
        pipe.cmd("HGETALL").arg(&keys.record);
        pipe.cmd("HGETALL").arg(&keys.inputs);
        pipe.cmd("HGETALL").arg(&keys.answers);
        pipe.cmd("LRANGE").arg(&keys.timeline).arg(0).arg(-1);
        pipe.cmd("GET").arg(&keys.outcome);
        pipe.cmd("GET").arg(&keys.args);
        type Hash = BTreeMap<String, String>;
        type Read = (Hash, Hash, Hash, Vec<String>, Option<String>, Option<String>);
        let (mut record, inputs, answers, timeline, outcome, args): Read = pipe.query_async(&mut self.conn()).await?;
        if record.is_empty() {
            return Ok(None);
        }
        super::compact::put_back(&mut record, &["result", "error"], outcome);
        super::compact::put_back(&mut record, &["args"], args);
        // An entry that is not JSON is shown as its text rather than hiding the rest.
        let timeline =
            timeline.into_iter().map(|e| serde_json::from_str(&e).unwrap_or(serde_json::Value::String(e))).collect();
        Ok(Some(Inspection { record, inputs, answers, timeline }))
    }

    /// An operator fails a task that is not terminal, whoever owns it; `by` and `why` go into
    /// its timeline. `error` is the JSON-RPC error object, as JSON text.
    pub async fn fail_task_as_operator(
        &self,
        id: &TaskId,
        error: &str,
        message: &str,
        by: &str,
        why: &str,
    ) -> Result<OperatorFail, StoreError> {
        let (events, signal_prefix) = (self.events_channel(id), self.keys().signal_prefix());
        let args = fail_task::Args {
            task_id: id.as_str(),
            error,
            message,
            events: &events,
            signal_prefix: &signal_prefix,
            operator: (by, why),
        };
        // An operator does not know the owner: the script names its outbox when it has one.
        let (outcome, slot) = self
            .on_outbox(id, None, |keys| async move { fail_task::call(&mut self.conn(), (&keys).into(), args).await })
            .await?;
        if let OperatorFail::Failed { from } = outcome {
            let transition = Transition::new(Some(from), TaskStatus::Failed, Actor::Operator);
            self.ended(id, transition, slot.as_deref()).await;
        }
        Ok(outcome)
    }
}

impl Store {
    /// Writes an operator's reveal of a task's sensitive fields to its timeline, and returns
    /// the entry as written; `None` when the task keeps no timeline (made while the console
    /// was off): then nothing was recorded, and nothing may be shown. At most [`REVEALS_KEPT`]
    /// reveal entries stay, the newest, each numbered (`n`), so a loop of reveals neither grows
    /// the timeline nor pushes the task's transitions out of it.
    pub async fn record_reveal(&self, id: &TaskId, by: &str) -> Result<Option<serde_json::Value>, StoreError> {
        let keys = self.keys().task(id);
        // The script keeps at least one entry whatever it is told.
        let args = record_reveal::Args { by, kept: REVEALS_KEPT.max(1) };
        let recorded =
            record_reveal::call(&mut self.conn(), record_reveal::Keys { timeline: &keys.timeline }, args).await?;
        Ok(match recorded {
            record_reveal::Recorded::Written { at_ms, n } => {
                Some(serde_json::json!({ "at": at_ms, "ev": "revealed", "by": by, "n": n }))
            }
            record_reveal::Recorded::NoTimeline => None,
        })
    }
}

fn row_from(id: &TaskId, fields: Vec<Option<String>>) -> Option<Row> {
    let [tenant, principal, tool, status, created, updated, ttl, holder, message] =
        <[Option<String>; 9]>::try_from(fields).ok()?;
    let number = |field: Option<String>| field.and_then(|v| v.parse::<i64>().ok());
    let created_ms = number(created)?;
    Some(Row {
        id: id.as_str().to_owned(),
        tenant: tenant?,
        principal: principal?,
        tool: tool?,
        status: status?,
        created_ms,
        updated_ms: number(updated).unwrap_or(created_ms),
        expires_ms: created_ms + number(ttl).unwrap_or(0),
        holder,
        message,
    })
}

fn matches(filter: &Filter, row: &Row, now_ms: i64) -> bool {
    let age = now_ms - row.created_ms;
    filter.tenant.as_ref().is_none_or(|t| *t == row.tenant)
        && filter.tool.as_ref().is_none_or(|t| *t == row.tool)
        && filter.status.as_ref().is_none_or(|s| *s == row.status)
        && filter.min_age_ms.is_none_or(|min| age >= min)
        && filter.max_age_ms.is_none_or(|max| age <= max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_anything_else() {
        let id = TaskId::generate(16);
        let cursor = Cursor { expires_ms: 1_733_000_000_123, id: id.as_str().to_owned() };
        assert_eq!(Cursor::parse(&cursor.encode()), Some(cursor));
        for bad in ["", "12", "x.tsk_1", "12.not-an-id", "12.<script>"] {
            assert_eq!(Cursor::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_timeline_bound_is_the_preludes() {
        let prelude = include_str!("scripts/prelude.lua");
        assert!(prelude.contains(&format!("local TIMELINE_MAX = {TIMELINE_MAX}\n")), "the prelude's TIMELINE_MAX");
    }

    #[test]
    fn entries_before_the_cursor_are_older_expiries_or_smaller_ids() {
        let cursor = Cursor { expires_ms: 100, id: "b".into() };
        assert!(cursor.is_before(99, "z"));
        assert!(cursor.is_before(100, "a"));
        assert!(!cursor.is_before(100, "b"));
        assert!(!cursor.is_before(101, "a"));
    }
}
