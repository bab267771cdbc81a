//! The lease holder's fenced writes: renew, status, side-effect marks, saved state, durable
//! steps, and the terminal outcome.

use std::time::Duration;

use super::{Lease, millis};
use crate::store::outcomes::{Renewal, Started};
use crate::store::scripts::{extend_lease, finish_task, mark_started, record_step, save_state, set_status};
use crate::store::{Store, StoreError};
use crate::task::{Actor, TaskStatus, Transition};

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
        let (status, field, payload, message) = match outcome {
            Finish::Completed { result, message } => (TaskStatus::Completed, "result", result, message),
            Finish::Failed { error, message } => (TaskStatus::Failed, "error", error, message),
            Finish::Cancelled { message } => (TaskStatus::Cancelled, "", "", Some(message)),
        };
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
}
