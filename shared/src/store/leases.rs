//! The worker's operations: read deliveries, claim with a fenced lease, renew, report status,
//! park for input, finish, release, and reap expired leases.

use std::collections::HashMap;
use std::time::Duration;

use redis::Value;
use redis::streams::StreamReadReply;

use super::reply::{Fenced, Reply, Withdrawn};
use super::{Conn, MAX_BLOCK, QueueKeys, Store, StoreError, WORKER_GROUP, scripts};
use crate::task::{TaskId, TaskStatus};

/// A stream entry: a wake-up for one claim on its shard. `task_id` is the claim's candidate,
/// first the task the entry was written for ([`Store::claim`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub entry_id: String,
    pub task_id: TaskId,
}

/// How many times one claim follows the front of the ready set before it gives up.
pub const MAX_REDIRECTS: usize = 16;

/// One `claim_task` run: a claim or nothing, or the task at the front to ask for instead.
pub(super) enum ClaimStep {
    Done(Option<Box<Claim>>),
    Front(TaskId),
}

/// A claimed task: what the tool runs with.
#[derive(Debug, Clone)]
pub struct Claim {
    pub task_id: TaskId,
    pub fence: u64,
    pub tool: String,
    /// Arguments as JSON text.
    pub arguments: String,
    pub traceparent: Option<String>,
    pub cancel_requested: bool,
    /// Recorded input responses, key -> JSON text.
    pub answers: Vec<(String, String)>,
    /// The creating request's `clientCapabilities` (JSON text).
    pub client_capabilities: String,
    /// The owner's tenant when the task counts against its active-task cap.
    pub tenant: Option<String>,
    /// What the tool saved when it last parked the task for input (JSON text).
    pub tool_state: Option<String>,
    /// The durable steps earlier runs recorded, name -> result JSON text (read by the claim
    /// itself: no extra round trip).
    pub steps: Vec<(String, String)>,
    /// When the task was last queued (ms): created, released, reclaimed or answered.
    pub queued_ms: Option<u64>,
    /// The owner's tenant (whether counted or not).
    pub owner_tenant: String,
}

/// The identity every fenced write carries.
#[derive(Debug, Clone, Copy)]
pub struct Lease<'a> {
    pub task_id: &'a TaskId,
    pub worker: &'a str,
    pub fence: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    Held { cancel_requested: bool },
    Lost,
}

/// What [`Store::mark_started`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Started {
    /// No earlier run of this task got this far.
    First,
    /// A run under an earlier fencing token got this far: its side effect may have happened.
    Before {
        fence: u64,
    },
    LeaseLost,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parked {
    Parked,
    /// A cancel was requested meanwhile; the task ended cancelled.
    CancelledInstead,
    LeaseLost,
    /// The tool asked for a key that was issued before (keys are lifetime-unique).
    KeyReused(String),
}

/// The outcome of a held question whose worker stopped: the upstream session it belonged to is
/// gone, so nobody can take the answer any more.
const HELD_LOST: &str = "The worker holding the upstream server's session for this question stopped, so the question can no longer be answered; call the tool again.";
static HELD_LOST_ERROR: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| serde_json::json!({ "code": -32603, "message": HELD_LOST }).to_string());

/// What [`Store::release`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    Requeued,
    /// A cancel was pending: the task ended cancelled.
    Cancelled,
    /// It held a question for its creator: the task failed.
    Failed,
    LeaseLost,
}

/// What [`Store::hold_for_input`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    /// The task shows `input_required`; this worker keeps the lease.
    Held,
    /// A cancel is pending: nothing was written.
    CancelPending,
    LeaseLost,
    KeyReused(String),
}

/// What [`Store::held_answer`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeldAnswer {
    /// The answer (JSON text); the task is working again.
    Answered(String),
    Waiting,
    /// The task ended meanwhile (cancelled, or expired).
    Ended,
    LeaseLost,
}

/// A terminal outcome written by the lease holder.
#[derive(Debug, Clone)]
pub enum Finish<'a> {
    /// The CallToolResult, as JSON text.
    Completed {
        result: &'a str,
        message: Option<&'a str>,
    },
    /// The JSON-RPC error object, as JSON text.
    Failed {
        error: &'a str,
        message: Option<&'a str>,
    },
    Cancelled {
        message: &'a str,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reclaimed {
    Nothing,
    Requeued,
    /// Failed past the maximum; the owner's tenant if the task counted against its cap.
    Failed {
        tenant: Option<String>,
    },
    /// A cancel was pending; the owner's tenant.
    Cancelled {
        tenant: Option<String>,
    },
    /// The task had already ended (a replay of a reclaim that ran, or a stale index entry);
    /// the owner's tenant, so that its active-task slot is released.
    AlreadyEnded {
        tenant: Option<String>,
    },
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
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(WORKER_GROUP)
            .arg(consumer)
            .arg("COUNT")
            .arg(count)
            .arg("BLOCK")
            .arg(u64::try_from(block.min(MAX_BLOCK).as_millis()).unwrap_or(u64::MAX))
            .arg("STREAMS");
        for shard in shards {
            cmd.arg(self.keys().queue(*shard, pool).stream);
        }
        for _ in shards {
            cmd.arg(">");
        }
        let reply: Option<StreamReadReply> = cmd.query_async(conn).await?;
        Ok(reply.map(deliveries).unwrap_or_default())
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
        let deleted: u64 = scripts::REAP_CONSUMERS
            .key(self.keys().queue(shard, pool).stream)
            .arg(WORKER_GROUP)
            .arg(millis(min_idle))
            .arg(own.unwrap_or(""))
            .invoke_async(&mut self.conn())
            .await?;
        Ok(deleted)
    }

    /// Claims the fairest task queued on `pool`'s queue of the delivery's shard: fenced lease
    /// for `lease`, stream entry acked. `delivery.task_id` is the candidate: first the entry's
    /// own task, then whichever task the script finds at the front (one more round trip each;
    /// docs/design.md, "Fair dispatch"). It follows the redirects, so a claim re-sent after an
    /// error resumes with the task the lost one named, and a replayed claim for the same worker
    /// and entry answers the same claim. `None`: nothing claimable, or the front kept moving for
    /// [`MAX_REDIRECTS`] tries: the wake-up is then written again at the end of the stream
    /// (`pass_wakeup`), never left pending where only a takeover would find it.
    pub async fn claim(
        &self,
        delivery: &mut Delivery,
        pool: &str,
        worker: &str,
        lease: Duration,
    ) -> Result<Option<Claim>, StoreError> {
        let queue = self.keys().queue(delivery.task_id.shard(), pool);
        for _ in 0..MAX_REDIRECTS {
            let keys = self.keys().task(&delivery.task_id);
            let reply: Vec<Value> = scripts::CLAIM_TASK
                .key(&keys.record)
                .key(&queue.stream)
                .key(&keys.leases)
                .key(&keys.answers)
                .key(&keys.timeline)
                .key(&keys.steps)
                .key(&queue.ready)
                .key(&queue.fair)
                .key(&keys.args)
                .arg(&delivery.entry_id)
                .arg(delivery.task_id.as_str())
                .arg(worker)
                .arg(millis(lease))
                .arg(WORKER_GROUP)
                .invoke_async(&mut self.conn())
                .await?;
            match Reply::new(reply).claim(&delivery.task_id)? {
                ClaimStep::Front(front) if front.shard() == delivery.task_id.shard() => delivery.task_id = front,
                ClaimStep::Front(front) => {
                    return Err(StoreError::UnexpectedReply(format!("{front} queued on another shard's ready set")));
                }
                ClaimStep::Done(claim) => return Ok(claim.map(|claim| *claim)),
            }
        }
        let _passed: u8 = scripts::PASS_WAKEUP
            .key(&queue.stream)
            .arg(&delivery.entry_id)
            .arg(WORKER_GROUP)
            .arg(delivery.task_id.as_str())
            .invoke_async(&mut self.conn())
            .await?;
        Ok(None)
    }

    pub async fn renew(&self, lease: Lease<'_>, duration: Duration) -> Result<Renewal, StoreError> {
        let keys = self.keys().task(lease.task_id);
        let reply: Vec<Value> = scripts::EXTEND_LEASE
            .key(&keys.record)
            .key(&keys.leases)
            .arg(lease.task_id.as_str())
            .arg(lease.worker)
            .arg(lease.fence)
            .arg(millis(duration))
            .invoke_async(&mut self.conn())
            .await?;
        Renewal::try_from(Reply::new(reply))
    }

    /// Sets the status message. `false` when the lease was lost.
    pub async fn set_status(&self, lease: Lease<'_>, message: &str) -> Result<bool, StoreError> {
        let keys = self.keys().task(lease.task_id);
        let reply: Vec<Value> = scripts::SET_STATUS
            .key(&keys.record)
            .arg(lease.task_id.as_str())
            .arg(lease.worker)
            .arg(lease.fence)
            .arg(message)
            .arg(self.events_channel(lease.task_id))
            .invoke_async(&mut self.conn())
            .await?;
        Ok(Fenced::try_from(Reply::new(reply))?.written())
    }

    /// Records, fenced, that this run is about to cause a side effect that must not repeat
    /// unasked, and reports whether an earlier run already got that far. Asking again with
    /// the same lease answers `First` again.
    pub async fn mark_started(&self, lease: Lease<'_>) -> Result<Started, StoreError> {
        let keys = self.keys().task(lease.task_id);
        let reply: Vec<Value> = scripts::MARK_STARTED
            .key(&keys.record)
            .arg(lease.worker)
            .arg(lease.fence)
            .invoke_async(&mut self.conn())
            .await?;
        Started::try_from(Reply::new(reply))
    }

    /// Shows the task as `input_required` with one request (key, request JSON) while this
    /// worker keeps the lease: for a question asked on a live upstream session, which cannot be
    /// replayed. The answer comes back through [`held_answer`](Self::held_answer).
    pub async fn hold_for_input(
        &self,
        lease: Lease<'_>,
        message: &str,
        key: &str,
        request: &str,
    ) -> Result<Hold, StoreError> {
        let keys = self.keys().task(lease.task_id);
        let reply: Vec<Value> = scripts::HOLD_FOR_INPUT
            .key(&keys.record)
            .key(&keys.inputs)
            .key(&keys.issued)
            .key(&keys.timeline)
            .arg(lease.task_id.as_str())
            .arg(lease.worker)
            .arg(lease.fence)
            .arg(message)
            .arg(self.events_channel(lease.task_id))
            .arg(key)
            .arg(request)
            .invoke_async(&mut self.conn())
            .await?;
        Hold::try_from(Reply::new(reply))
    }

    /// Saves a state for the task's next run (returned by the next claim). `false` when the
    /// lease was lost.
    pub async fn save_state(&self, lease: Lease<'_>, state: &str) -> Result<bool, StoreError> {
        let keys = self.keys().task(lease.task_id);
        let reply: Vec<Value> = scripts::SAVE_STATE
            .key(&keys.record)
            .arg(lease.worker)
            .arg(lease.fence)
            .arg(state)
            .invoke_async(&mut self.conn())
            .await?;
        Ok(Fenced::try_from(Reply::new(reply))?.written())
    }

    /// Records the result (JSON text) of durable step `name`, fenced, in the task's steps hash
    /// (expiring with the record); the next claim returns it. `false` when the lease was lost
    /// (nothing written). A step already recorded keeps its first result.
    pub async fn record_step(&self, lease: Lease<'_>, name: &str, result: &str) -> Result<bool, StoreError> {
        let keys = self.keys().task(lease.task_id);
        let reply: Vec<Value> = scripts::RECORD_STEP
            .key(&keys.record)
            .key(&keys.steps)
            .arg(lease.worker)
            .arg(lease.fence)
            .arg(name)
            .arg(result)
            .invoke_async(&mut self.conn())
            .await?;
        Ok(Fenced::try_from(Reply::new(reply))?.written())
    }

    /// Takes a held question back (its asker stopped waiting); the task is working again.
    /// `Ok(false)` when the lease was lost; answered meanwhile counts as taken back.
    pub async fn withdraw_question(&self, lease: Lease<'_>, message: &str) -> Result<bool, StoreError> {
        let keys = self.keys().task(lease.task_id);
        let reply: Vec<Value> = scripts::WITHDRAW_QUESTION
            .key(&keys.record)
            .key(&keys.inputs)
            .key(&keys.timeline)
            .arg(lease.task_id.as_str())
            .arg(lease.worker)
            .arg(lease.fence)
            .arg(message)
            .arg(self.events_channel(lease.task_id))
            .invoke_async(&mut self.conn())
            .await?;
        Ok(Withdrawn::try_from(Reply::new(reply))? == Withdrawn::Withdrawn)
    }

    /// The answer to a held request, if it came.
    pub async fn held_answer(&self, lease: Lease<'_>, key: &str) -> Result<HeldAnswer, StoreError> {
        let keys = self.keys().task(lease.task_id);
        let reply: Vec<Value> = scripts::HELD_ANSWER
            .key(&keys.record)
            .key(&keys.answers)
            .arg(lease.worker)
            .arg(lease.fence)
            .arg(key)
            .invoke_async(&mut self.conn())
            .await?;
        HeldAnswer::try_from(Reply::new(reply))
    }

    /// Parks the task in `input_required` with these requests (key, request JSON) and
    /// releases the lease.
    pub async fn request_input(
        &self,
        lease: Lease<'_>,
        message: Option<&str>,
        requests: &[(String, String)],
        tool_state: Option<&str>,
        cancelled_message: &str,
    ) -> Result<Parked, StoreError> {
        let keys = self.keys().task(lease.task_id);
        let mut call = scripts::REQUEST_INPUT.key(&keys.record);
        call.key(&keys.leases)
            .key(&keys.inputs)
            .key(&keys.issued)
            .key(&keys.timeline)
            .arg(lease.task_id.as_str())
            .arg(lease.worker)
            .arg(lease.fence)
            .arg(message.unwrap_or(""))
            .arg(self.events_channel(lease.task_id))
            .arg(cancelled_message)
            .arg(tool_state.unwrap_or(""));
        for (key, request) in requests {
            call.arg(key).arg(request);
        }
        Parked::try_from(Reply::new(call.invoke_async(&mut self.conn()).await?))
    }

    /// Writes a terminal outcome. `false` when the lease was lost (the write was refused).
    pub async fn finish(&self, lease: Lease<'_>, outcome: Finish<'_>) -> Result<bool, StoreError> {
        let keys = self.keys().task(lease.task_id);
        let (status, field, payload, message) = match outcome {
            Finish::Completed { result, message } => (TaskStatus::Completed, "result", result, message),
            Finish::Failed { error, message } => (TaskStatus::Failed, "error", error, message),
            Finish::Cancelled { message } => (TaskStatus::Cancelled, "", "", Some(message)),
        };
        let reply: Vec<Value> = scripts::FINISH_TASK
            .key(&keys.record)
            .key(&keys.leases)
            .key(&keys.inputs)
            .key(&keys.timeline)
            .key(&keys.outcome)
            .arg(lease.task_id.as_str())
            .arg(lease.worker)
            .arg(lease.fence)
            .arg(status.as_str())
            .arg(field)
            .arg(payload)
            .arg(message.unwrap_or(""))
            .arg(self.events_channel(lease.task_id))
            .invoke_async(&mut self.conn())
            .await?;
        Ok(Fenced::try_from(Reply::new(reply))?.written())
    }

    /// Hands a held task back to its pool's queue (draining), or ends it: cancelled when a
    /// cancel was pending, failed when it holds a question that cannot outlive this worker.
    /// `pool`: the releasing worker's, where the task came from (checked by the script).
    pub async fn release(&self, lease: Lease<'_>, pool: &str, cancelled_message: &str) -> Result<Released, StoreError> {
        let keys = self.keys().task(lease.task_id);
        let reply = self
            .on_pool_queue(lease.task_id, pool, |queue: QueueKeys, pool: &str| {
                let mut call = scripts::RELEASE_TASK.key(&keys.record);
                call.key(&keys.leases)
                    .key(queue.stream)
                    .key(&keys.inputs)
                    .key(&keys.timeline)
                    .key(queue.ready)
                    .key(queue.fair)
                    .arg(lease.task_id.as_str())
                    .arg(lease.worker)
                    .arg(lease.fence)
                    .arg(cancelled_message)
                    .arg(self.events_channel(lease.task_id))
                    .arg(HELD_LOST_ERROR.as_str())
                    .arg(HELD_LOST)
                    .arg(pool);
                call
            })
            .await?;
        Released::try_from(reply)
    }

    /// Task ids in a shard's lease index whose lease is due by the caller's clock. A hint:
    /// `reclaim` re-checks against Redis time.
    pub async fn due_leases(&self, shard: u8, now_ms: u64, limit: usize) -> Result<Vec<TaskId>, StoreError> {
        let ids: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(self.keys().shard(shard).leases)
            .arg("-inf")
            .arg(now_ms)
            .arg("LIMIT")
            .arg(0)
            .arg(limit)
            .query_async(&mut self.conn())
            .await?;
        Ok(ids.iter().filter_map(|id| TaskId::parse(id)).collect())
    }

    /// Requeues (or fails, past `max_reclaims`) a task whose lease expired, onto the queue of
    /// the task's own pool (the record's), whichever pool the reaping worker is in: `pool` is
    /// only the first guess (the reaper's own, right for most of what it finds).
    pub async fn reclaim(
        &self,
        task_id: &TaskId,
        pool: &str,
        max_reclaims: u32,
        failure_error: &str,
        failure_message: &str,
        cancelled_message: &str,
    ) -> Result<Reclaimed, StoreError> {
        let keys = self.keys().task(task_id);
        let reply = self
            .on_pool_queue(task_id, pool, |queue: QueueKeys, pool: &str| {
                let mut call = scripts::RECLAIM_TASK.key(&keys.record);
                call.key(&keys.leases)
                    .key(queue.stream)
                    .key(&keys.inputs)
                    .key(&keys.timeline)
                    .key(queue.ready)
                    .key(queue.fair)
                    .arg(task_id.as_str())
                    .arg(max_reclaims)
                    .arg(failure_error)
                    .arg(failure_message)
                    .arg(cancelled_message)
                    .arg(self.events_channel(task_id))
                    .arg(HELD_LOST_ERROR.as_str())
                    .arg(HELD_LOST)
                    .arg(pool);
                call
            })
            .await?;
        Reclaimed::try_from(reply)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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
    let entry_id = super::reply::as_string(parts.first()?)?;
    let Value::Array(fields) = parts.get(1)? else {
        return None;
    };
    let fields: Vec<String> = fields.iter().filter_map(super::reply::as_string).collect();
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
