//! Claiming: the fairest queued task of a pool, under a fenced lease.

use std::time::Duration;

use super::{Delivery, millis};
use crate::store::outcomes::Claim;
use crate::store::scripts::claim_batch;
use crate::store::scripts::claim_task::{self, ClaimStep};
use crate::store::scripts::pass_wakeup;
use crate::store::transitions::claimed;
use crate::store::{Store, StoreError, WORKER_GROUP};

/// How many times one claim follows the front of the ready set before it gives up.
pub const MAX_REDIRECTS: usize = 16;

/// The most deliveries one batch claim takes: a bound on one script's run (and on Lua's stack,
/// which its arguments go through).
pub const MAX_BATCH: usize = 256;

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

    /// Claims, for deliveries read from `pool`'s streams (at most [`MAX_BATCH`]), the tasks at
    /// the front of the pool's fair ready set on each delivery's shard, one per delivery, in fair
    /// order, in one round trip (`claim_batch`): every entry acked and deleted, each claim fenced
    /// and leased for `lease`. The deliveries may be of several shards, except where a command
    /// must keep to one slot ([`Store::one_slot_per_command`]); each shard's take their own
    /// front, as if sent alone. Fewer claims than deliveries when fewer tasks are queued (or
    /// some were cancelled while queued). Sent again after an unknown outcome with the same
    /// deliveries, it answers the claims its first run made (a receipt per shard, kept for a
    /// lease).
    pub async fn claim_batch(
        &self,
        deliveries: &[Delivery],
        pool: &str,
        worker: &str,
        lease: Duration,
    ) -> Result<Vec<Claim>, StoreError> {
        if deliveries.is_empty() {
            return Ok(Vec::new());
        }
        // The shards in the order they first appear, each with its deliveries in stream order.
        let mut shards: Vec<(u8, Vec<&Delivery>)> = Vec::new();
        for delivery in deliveries {
            let shard = delivery.task_id.shard();
            match shards.iter_mut().find(|(s, _)| *s == shard) {
                Some((_, group)) => group.push(delivery),
                None => shards.push((shard, vec![delivery])),
            }
        }
        if deliveries.len() > MAX_BATCH || (shards.len() > 1 && self.one_slot_per_command()) {
            return Err(StoreError::UnexpectedReply(format!(
                "a batch claim takes at most {MAX_BATCH} deliveries, of one shard where a command keeps to one slot"
            )));
        }
        let mut keys = Vec::with_capacity(5 * shards.len());
        let mut groups = Vec::with_capacity(shards.len() + deliveries.len());
        for (shard, group) in &shards {
            let queue = self.keys().queue(*shard, pool);
            let receipt = self.keys().claim_receipt(&queue, worker, &group[0].entry_id);
            keys.extend([queue.stream, self.keys().shard(*shard).leases, queue.ready, queue.fair, receipt]);
            groups.push((self.keys().task_layout(*shard).prefix, group.len().to_string()));
            groups.extend(group.iter().map(|d| (d.entry_id.clone(), d.task_id.as_str().to_owned())));
        }
        // One layout's suffixes serve every shard: only the prefix carries the shard.
        let layout = self.keys().task_layout(shards[0].0);
        let args = claim_batch::Args {
            worker,
            lease_ms: millis(lease),
            group: WORKER_GROUP,
            answers: layout.answers,
            steps: layout.steps,
            args: layout.args,
            timeline: layout.timeline,
            rel: layout.rel,
            groups: &groups,
        };
        let keys = claim_batch::Keys { shards: &keys };
        let claims = claim_batch::call(&mut self.conn(), keys, args).await?;
        for claim in &claims {
            claimed(claim.queued_for);
        }
        Ok(claims)
    }
}
