//! `tasks/cancel`: an acknowledgement of intent, idempotent. Queued and parked tasks end at
//! once; a running one is flagged and its worker signalled; a terminal one stays as it is.

use serde_json::Value;
use taskgate_shared::protocol::result;
use taskgate_shared::store::CancelOutcome;

use crate::error::GatewayError;
use crate::mcp::{Call, task_id, task_not_found};

const CANCELLED_MESSAGE: &str = "The task was cancelled.";

pub(crate) async fn run(call: &Call<'_>) -> Result<Value, GatewayError> {
    let id = task_id(call.params)?;
    let owner = call.principal.owner();
    let outcome = call.state.store.cancel_task(&id, &owner, CANCELLED_MESSAGE).await;
    // Before the acknowledgement, whatever the outcome: a get on this replica after it reads
    // what was written (other replicas hear it from the event hub).
    call.state.snapshots.changed(id.as_str());
    let outcome = outcome?;
    if outcome != CancelOutcome::NotFound {
        // The client commonly polls right after cancelling: not held, whatever pub/sub's timing.
        call.state.polls.changed(id.as_str());
    }
    match outcome {
        CancelOutcome::NotFound => Err(task_not_found().into()),
        // The store freed the task's active-task slot if it ended (or had ended).
        CancelOutcome::Cancelled { .. } | CancelOutcome::AlreadyTerminal | CancelOutcome::Signalled => {
            Ok(result::ack())
        }
    }
}
