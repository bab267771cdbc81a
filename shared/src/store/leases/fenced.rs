//! The lease holder's fenced writes: renew, status, side-effect marks, saved state, durable
//! steps, and the terminal outcome.

use std::time::Duration;

use redis::Value;

use super::{Lease, millis};
use crate::store::reply::{Fenced, Reply};
use crate::store::transitions::emit;
use crate::store::{Store, StoreError, scripts};
use crate::task::{Actor, TaskStatus, Transition};

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
        let reply: Vec<Value> = scripts::EXTEND_LEASE
            .keys([&keys.record, &keys.leases])
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
            .keys([&keys.record])
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
            .keys([&keys.record])
            .arg(lease.worker)
            .arg(lease.fence)
            .invoke_async(&mut self.conn())
            .await?;
        Started::try_from(Reply::new(reply))
    }

    /// Saves a state for the task's next run (returned by the next claim). `false` when the
    /// lease was lost.
    pub async fn save_state(&self, lease: Lease<'_>, state: &str) -> Result<bool, StoreError> {
        let keys = self.keys().task(lease.task_id);
        let reply: Vec<Value> = scripts::SAVE_STATE
            .keys([&keys.record])
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
            .keys([&keys.record, &keys.steps])
            .arg(lease.worker)
            .arg(lease.fence)
            .arg(name)
            .arg(result)
            .invoke_async(&mut self.conn())
            .await?;
        Ok(Fenced::try_from(Reply::new(reply))?.written())
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
            .keys([&keys.record, &keys.leases, &keys.inputs, &keys.timeline, &keys.outcome])
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
        let written = Fenced::try_from(Reply::new(reply))?.written();
        if written {
            // From `working` as far as the store knows: a held task (showing `input_required`)
            // finished by its holder is counted from `working` too.
            emit(lease.task_id, Transition::new(Some(TaskStatus::Working), status, Actor::Worker));
        }
        Ok(written)
    }
}
