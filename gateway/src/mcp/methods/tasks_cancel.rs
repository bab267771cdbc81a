//! `tasks/cancel`: an acknowledgement of intent, idempotent. Queued and parked tasks end at
//! once; a running one is flagged and its worker signalled; a terminal one stays as it is.

use serde_json::Value;
use taskgate_shared::protocol::{RpcError, result};
use taskgate_shared::store::CancelOutcome;

use crate::mcp::{Call, storage_error, task_id, task_not_found};

const CANCELLED_MESSAGE: &str = "The task was cancelled.";

pub(crate) async fn run(call: &Call<'_>) -> Result<Value, RpcError> {
    let id = task_id(call.params)?;
    let owner = call.principal.owner();
    let outcome = call.state.store.cancel_task(&id, &owner, CANCELLED_MESSAGE).await.map_err(storage_error)?;
    match outcome {
        CancelOutcome::NotFound => Err(task_not_found()),
        CancelOutcome::Cancelled { .. } => {
            crate::metrics::count_cancel(outcome);
            if let Err(err) = call.state.store.release_active(&owner.tenant, &id).await {
                tracing::warn!(task_id = %id, error = %err, "active-task count not updated; it heals at expiry");
            }
            Ok(result::ack())
        }
        CancelOutcome::AlreadyTerminal | CancelOutcome::Signalled => Ok(result::ack()),
    }
}
