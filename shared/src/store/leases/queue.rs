//! The queues' side: consumer groups, deliveries (new and stale), dead consumers, the backlog.

use std::collections::HashMap;
use std::time::Duration;

use redis::Value;
use redis::streams::StreamReadReply;

use super::millis;
use crate::store::scripts::reap_consumers;
use crate::store::{Conn, MAX_BLOCK, Store, StoreError, WORKER_GROUP};
use crate::task::TaskId;

/// A stream entry: a wake-up for one claim on its shard. `task_id` is the claim's candidate,
/// first the task the entry was written for ([`Store::claim`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub entry_id: String,
    pub task_id: TaskId,
}

impl Store {
    /// Creates the worker consumer group on each shard's queue of `pool` (from the start, so
    /// entries written before the group existed are delivered too).
    pub async fn ensure_groups(&self, shards: u16, pool: &str) -> Result<(), StoreError> {
        let mut conn = self.conn();
        for shard in 0..shards.min(256) {
            let stream = self.keys().queue(shard as u8, pool).stream;
            let created: Result<(), _> = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(&stream)
                .arg(WORKER_GROUP)
                .arg("0")
                .arg("MKSTREAM")
                .query_async(&mut conn)
                .await;
            match created {
                Ok(()) => {}
                Err(err) if err.code() == Some("BUSYGROUP") => {}
                Err(err) => return Err(err.into()),
            }
        }
        Ok(())
    }

    /// Blocks up to `block` (at most [`MAX_BLOCK`]) for at most `count` new deliveries on
    /// `pool`'s queues of the given shards. Runs on a dedicated connection (see
    /// [`Store::blocking_connection`]).
    pub async fn read_deliveries(
        &self,
        conn: &mut Conn,
        shards: &[u8],
        pool: &str,
        consumer: &str,
        count: usize,
        block: Duration,
    ) -> Result<Vec<Delivery>, StoreError> {
        let cmd = self.read_group(shards, pool, consumer, count, Some(block), ">");
        let reply: Option<StreamReadReply> = cmd.query_async(conn).await?;
        Ok(reply.map(deliveries).unwrap_or_default())
    }

    /// The deliveries pending under `consumer` on `pool`'s queues of the given shards (at most
    /// `count` per shard): read by it and not yet claimed. Among them are those of a read whose
    /// reply it never got (it timed out, or the connection dropped, after Redis had delivered),
    /// which nothing else would look at before they idled a whole lease. Does not block.
    pub async fn own_pending_deliveries(
        &self,
        shards: &[u8],
        pool: &str,
        consumer: &str,
        count: usize,
    ) -> Result<Vec<Delivery>, StoreError> {
        // The ID 0 reads this consumer's own history instead of new entries.
        let reply: Option<StreamReadReply> =
            self.read_group(shards, pool, consumer, count, None, "0").query_async(&mut self.conn()).await?;
        Ok(reply.map(deliveries).unwrap_or_default())
    }

    /// `XREADGROUP` of the worker group on `pool`'s queues of `shards`, from `id` on each.
    fn read_group(
        &self,
        shards: &[u8],
        pool: &str,
        consumer: &str,
        count: usize,
        block: Option<Duration>,
        id: &str,
    ) -> redis::Cmd {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP").arg(WORKER_GROUP).arg(consumer).arg("COUNT").arg(count);
        if let Some(block) = block {
            cmd.arg("BLOCK").arg(u64::try_from(block.min(MAX_BLOCK).as_millis()).unwrap_or(u64::MAX));
        }
        cmd.arg("STREAMS");
        for shard in shards {
            cmd.arg(self.keys().queue(*shard, pool).stream);
        }
        for _ in shards {
            cmd.arg(id);
        }
        cmd
    }

    /// Takes over deliveries on `pool`'s queue of a shard that a dead consumer read but never
    /// claimed (idle longer than `min_idle`), so they are claimed by the normal path.
    pub async fn take_stale_deliveries(
        &self,
        shard: u8,
        pool: &str,
        consumer: &str,
        min_idle: Duration,
        count: usize,
    ) -> Result<Vec<Delivery>, StoreError> {
        let stream = self.keys().queue(shard, pool).stream;
        let reply: Value = redis::cmd("XAUTOCLAIM")
            .arg(&stream)
            .arg(WORKER_GROUP)
            .arg(consumer)
            .arg(u64::try_from(min_idle.as_millis()).unwrap_or(u64::MAX))
            .arg("0-0")
            .arg("COUNT")
            .arg(count)
            .query_async(&mut self.conn())
            .await?;
        // Reply: [next-cursor, [[id, [field, value…]] …], [deleted ids…]]
        let Value::Array(parts) = reply else {
            return Ok(Vec::new());
        };
        let Some(Value::Array(entries)) = parts.get(1) else {
            return Ok(Vec::new());
        };
        Ok(entries.iter().filter_map(stream_entry).collect())
    }

    /// Deletes the consumers of the group on `pool`'s queue of a shard that have nothing
    /// pending: `own` (this worker's, on a clean exit) whatever its idle time, others idle for at
    /// least `min_idle`. Returns how many went.
    pub async fn reap_consumers(
        &self,
        shard: u8,
        pool: &str,
        own: Option<&str>,
        min_idle: Duration,
    ) -> Result<u64, StoreError> {
        let stream = self.keys().queue(shard, pool).stream;
        let args = reap_consumers::Args { group: WORKER_GROUP, min_idle_ms: millis(min_idle), own: own.unwrap_or("") };
        reap_consumers::call(&mut self.conn(), reap_consumers::Keys { stream: &stream }, args).await
    }
}

fn deliveries(reply: StreamReadReply) -> Vec<Delivery> {
    reply
        .keys
        .into_iter()
        .flat_map(|key| key.ids)
        .filter_map(|entry| {
            let id = entry.get::<String>("id")?;
            Some(Delivery { task_id: TaskId::parse(&id)?, entry_id: entry.id })
        })
        .collect()
}

fn stream_entry(v: &Value) -> Option<Delivery> {
    let Value::Array(parts) = v else { return None };
    let entry_id = crate::store::reply::as_string(parts.first()?)?;
    let Value::Array(fields) = parts.get(1)? else {
        return None;
    };
    let fields: Vec<String> = fields.iter().filter_map(crate::store::reply::as_string).collect();
    let id = fields.chunks_exact(2).find(|kv| kv[0] == "id").map(|kv| kv[1].clone())?;
    Some(Delivery { task_id: TaskId::parse(&id)?, entry_id })
}

/// The dispatch backlog: tasks enqueued and not yet claimed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    /// Entries not yet claimed (delivered or not).
    pub depth: u64,
    /// Enqueue time (ms, from the stream entry id) of the oldest such entry.
    pub oldest_ms: Option<u64>,
}

impl Store {
    /// Reads the backlog of `pool`'s queues on every shard: one round trip per shard, the
    /// shards concurrently.
    pub async fn backlog(&self, shards: u16, pool: &str) -> Result<Backlog, StoreError> {
        let reads = (0..shards.min(256)).map(|shard| self.shard_backlog(shard as u8, pool));
        let mut total = Backlog::default();
        for shard in futures::future::join_all(reads).await {
            let shard = shard?;
            total.depth += shard.depth;
            total.oldest_ms = match (total.oldest_ms, shard.oldest_ms) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        Ok(total)
    }

    /// `claim_task` deletes every entry it takes (claimed or skipped), so a shard's stream holds
    /// exactly the entries not yet claimed, oldest first: one pipeline, within the shard's slot.
    async fn shard_backlog(&self, shard: u8, pool: &str) -> Result<Backlog, StoreError> {
        let stream = self.keys().queue(shard, pool).stream;
        type Entries = Vec<(String, HashMap<String, String>)>;
        let (depth, oldest): (u64, Entries) = redis::pipe()
            .cmd("XLEN")
            .arg(&stream)
            .cmd("XRANGE")
            .arg(&stream)
            .arg("-")
            .arg("+")
            .arg("COUNT")
            .arg(1)
            .query_async(&mut self.conn())
            .await?;
        Ok(Backlog { depth, oldest_ms: oldest.first().and_then(|(id, _)| entry_ms(id)) })
    }
}

/// The milliseconds part of a stream entry id (`<ms>-<seq>`): when it was added.
pub fn entry_ms(id: &str) -> Option<u64> {
    id.split_once('-').and_then(|(ms, _)| ms.parse().ok())
}
