//! The lease holder's fenced writes: renew, status, side-effect marks, saved state, durable
//! steps, and the terminal outcome.

use std::time::Duration;

use super::{Lease, millis};
use crate::store::outcomes::{Renewal, Started};
use crate::store::scripts::{
    extend_lease, finish_batch, finish_task, mark_started, record_step, save_state, set_status,
};
use crate::store::{Store, StoreError};
use crate::task::{Actor, TaskId, TaskStatus, Transition};

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

impl Finish<'_> {
    /// The status it ends in, the record field its payload goes to ('' = none), the payload and
    /// the message.
    fn parts(&self) -> (TaskStatus, &'static str, &str, Option<&str>) {
        match *self {
            Finish::Completed { result, message } => (TaskStatus::Completed, "result", result, message),
            Finish::Failed { error, message } => (TaskStatus::Failed, "error", error, message),
            Finish::Cancelled { message } => (TaskStatus::Cancelled, "", "", Some(message)),
        }
    }
}

/// One task's terminal outcome, owned, for [`Store::finish_batch`]: the lease holder's fencing
/// token and what [`Finish`] says.
#[derive(Debug, Clone)]
pub struct Ending {
    pub task_id: TaskId,
    pub fence: u64,
    status: TaskStatus,
    field: &'static str,
    payload: String,
    message: String,
}

impl Ending {
    /// The bytes of its payload and message: what it adds to a batch's script call.
    pub fn bytes(&self) -> usize {
        self.payload.len() + self.message.len()
    }

    pub fn new(task_id: &TaskId, fence: u64, outcome: &Finish<'_>) -> Self {
        let (status, field, payload, message) = outcome.parts();
        Self {
            task_id: task_id.clone(),
            fence,
            status,
            field,
            payload: payload.to_owned(),
            message: message.unwrap_or("").to_owned(),
        }
    }
}

impl Store {
    pub async fn renew(&self, lease: Lease<'_>, duration: Duration) -> Result<Renewal, StoreError> {
        let keys = self.keys().task(lease.task_id);
        let args = extend_lease::Args { lease, lease_ms: millis(duration) };
        extend_lease::call(&mut self.conn(), (&keys).into(), args).await
    }

    /// Sets the status message. `false` when the lease was lost.
    pub async fn set_status(&self, lease: Lease<'_>, message: &str) -> Result<bool, StoreError> {
        let keys = self.keys().task(lease.task_id);
        let events = self.events_channel(lease.task_id);
        let args = set_status::Args { lease, message, events: &events };
        Ok(set_status::call(&mut self.conn(), set_status::Keys { record: &keys.record }, args).await?.written())
    }

    /// Records, fenced, that this run is about to cause a side effect that must not repeat
    /// unasked, and reports whether an earlier run already got that far. Asking again with
    /// the same lease answers `First` again.
    pub async fn mark_started(&self, lease: Lease<'_>) -> Result<Started, StoreError> {
        let keys = self.keys().task(lease.task_id);
        let args = mark_started::Args { lease };
        mark_started::call(&mut self.conn(), mark_started::Keys { record: &keys.record }, args).await
    }

    /// Saves a state for the task's next run (returned by the next claim). `false` when the
    /// lease was lost.
    pub async fn save_state(&self, lease: Lease<'_>, state: &str) -> Result<bool, StoreError> {
        let keys = self.keys().task(lease.task_id);
        let args = save_state::Args { lease, state };
        Ok(save_state::call(&mut self.conn(), save_state::Keys { record: &keys.record }, args).await?.written())
    }

    /// Records the result (JSON text) of durable step `name`, fenced, in the task's steps hash
    /// (expiring with the record); the next claim returns it. `false` when the lease was lost
    /// (nothing written). A step already recorded keeps its first result.
    pub async fn record_step(&self, lease: Lease<'_>, name: &str, result: &str) -> Result<bool, StoreError> {
        let keys = self.keys().task(lease.task_id);
        let step_keys = record_step::Keys { record: &keys.record, steps: &keys.steps };
        let args = record_step::Args { lease, name, result };
        Ok(record_step::call(&mut self.conn(), step_keys, args).await?.written())
    }

    /// Writes a terminal outcome; the store counts the transition, times the run and frees the
    /// task's active-task slot. `false` when the lease was lost (the write was refused).
    pub async fn finish(&self, lease: Lease<'_>, outcome: Finish<'_>) -> Result<bool, StoreError> {
        let (status, field, payload, message) = outcome.parts();
        let events = self.events_channel(lease.task_id);
        let args = finish_task::Args { lease, status, field, payload, message: message.unwrap_or(""), events: &events };
        let run = self
            .on_outbox(lease.task_id, lease.outbox, |keys| async move {
                finish_task::call(&mut self.conn(), (&keys).into(), args).await
            })
            .await?;
        let Some(run) = run else {
            return Ok(false);
        };
        // From `working` as far as the store knows: a held task (showing `input_required`)
        // finished by its holder is counted from `working` too, its run timed from its claim. A
        // finish re-sent after its reply was lost answers written again, and frees the slot
        // again (harmless); that run goes untimed (the first write took the claim's time with it).
        let transition = Transition::new(Some(TaskStatus::Working), status, Actor::Worker).after(run.ran);
        self.ended(lease.task_id, transition, run.slot.as_deref()).await;
        Ok(true)
    }

    /// Writes the outcomes of several tasks `worker` holds in one script call (`finish_batch`),
    /// each fenced on its own, and does for each what [`Store::finish`] does after its write.
    /// The tasks may be of several shards, except where a command must keep to one slot
    /// ([`Store::one_slot_per_command`], a Cluster): there they must be of one. Each task's answer
    /// in the order given: `false` when its lease was lost (its write refused, the others'
    /// made). On an error nothing is known of any of them; each may be sent again (a write made
    /// already answers written again, as for `finish`).
    pub async fn finish_batch(&self, worker: &str, endings: &[Ending]) -> Result<Vec<bool>, StoreError> {
        let Some(first) = endings.first() else { return Ok(Vec::new()) };
        // The shards in the order they first appear; an end names its shard by its place here.
        let mut shards: Vec<u8> = Vec::new();
        let places: Vec<usize> = endings
            .iter()
            .map(|e| {
                let shard = e.task_id.shard();
                shards.iter().position(|s| *s == shard).unwrap_or_else(|| {
                    shards.push(shard);
                    shards.len() - 1
                }) + 1
            })
            .collect();
        if shards.len() > 1 && self.one_slot_per_command() {
            return Err(StoreError::UnexpectedReply("a batch of ends takes the tasks of one shard here".into()));
        }
        // One layout's suffixes serve every shard: only the prefix carries the shard.
        let layout = self.keys().task_layout(shards[0]);
        // On a Cluster (sharded events) the batch is of one shard, so one channel serves it.
        let events = self.events_channel(&first.task_id);
        let leases: Vec<String> = shards.iter().map(|shard| self.keys().shard(*shard).leases).collect();
        let mut pairs: Vec<(String, String)> = Vec::with_capacity(shards.len() + 2 * endings.len());
        pairs.extend(
            shards.iter().map(|shard| (self.keys().task_layout(*shard).prefix, self.keys().outbox(*shard, ""))),
        );
        pairs.extend(endings.iter().zip(&places).flat_map(|(e, place)| {
            [
                (e.task_id.as_str().to_owned(), format!("{place} {} {} {}", e.fence, e.status.as_str(), e.field)),
                (e.payload.clone(), e.message.clone()),
            ]
        }));
        let args = finish_batch::Args {
            worker,
            inputs: layout.inputs,
            timeline: layout.timeline,
            outcome: layout.outcome,
            events: &events,
            endings: &pairs,
        };
        let ends = finish_batch::call(&mut self.conn(), finish_batch::Keys { leases: &leases }, args).await?;
        if ends.len() != endings.len() {
            return Err(StoreError::UnexpectedReply(format!("{} ends for {} tasks", ends.len(), endings.len())));
        }
        let after = endings.iter().zip(&ends).filter_map(|(ending, end)| {
            let run = end.as_ref()?;
            // As `finish`: counted from `working`, the run timed from its claim.
            let transition = Transition::new(Some(TaskStatus::Working), ending.status, Actor::Worker).after(run.ran);
            Some(self.ended(&ending.task_id, transition, run.slot.as_deref()))
        });
        futures::future::join_all(after).await;
        Ok(ends.iter().map(Option::is_some).collect())
    }
}
