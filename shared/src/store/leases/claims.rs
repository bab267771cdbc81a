//! Claiming: the fairest queued task of a pool, under a fenced lease.

use std::time::Duration;

use redis::Value;

use super::{Delivery, millis};
use crate::store::reply::Reply;
use crate::store::{Store, StoreError, WORKER_GROUP, scripts};
use crate::task::TaskId;

/// How many times one claim follows the front of the ready set before it gives up.
pub const MAX_REDIRECTS: usize = 16;

/// One `claim_task` run: a claim or nothing, or the task at the front to ask for instead.
pub(in crate::store) enum ClaimStep {
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

impl Store {
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
                .keys([
                    &keys.record,
                    &queue.stream,
                    &keys.leases,
                    &keys.answers,
                    &keys.timeline,
                    &keys.steps,
                    &queue.ready,
                    &queue.fair,
                    &keys.args,
                ])
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
            .keys([&queue.stream])
            .arg(&delivery.entry_id)
            .arg(WORKER_GROUP)
            .arg(delivery.task_id.as_str())
            .invoke_async(&mut self.conn())
            .await?;
        Ok(None)
    }
}
