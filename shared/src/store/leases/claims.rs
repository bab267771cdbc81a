//! Claiming: the fairest queued task of a pool, under a fenced lease.

use std::time::Duration;

use super::{Delivery, millis};
use crate::store::outcomes::Claim;
use crate::store::scripts::claim_task::{self, ClaimStep};
use crate::store::scripts::pass_wakeup;
use crate::store::transitions::claimed;
use crate::store::{Store, StoreError, WORKER_GROUP};

/// How many times one claim follows the front of the ready set before it gives up.
pub const MAX_REDIRECTS: usize = 16;

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
            let args = claim_task::Args {
                entry_id: &delivery.entry_id,
                task_id: &delivery.task_id,
                worker,
                lease_ms: millis(lease),
                group: WORKER_GROUP,
            };
            match claim_task::call(&mut self.conn(), claim_task::Keys::new(&keys, &queue), args).await? {
                ClaimStep::Front(front) if front.shard() == delivery.task_id.shard() => delivery.task_id = front,
                ClaimStep::Front(front) => {
                    return Err(StoreError::UnexpectedReply(format!("{front} queued on another shard's ready set")));
                }
                ClaimStep::Done(claim) => {
                    if let Some(claim) = &claim {
                        claimed(claim.queued_for);
                    }
                    return Ok(claim.map(|claim| *claim));
                }
            }
        }
        let args =
            pass_wakeup::Args { entry_id: &delivery.entry_id, group: WORKER_GROUP, task_id: delivery.task_id.as_str() };
        pass_wakeup::call(&mut self.conn(), pass_wakeup::Keys { stream: &queue.stream }, args).await?;
        Ok(None)
    }
}
