//! `tasks/cancel`: an acknowledgement of intent, idempotent. Queued and parked tasks end at
//! once; a running one is flagged and its worker signalled; a terminal one stays as it is.

use serde_json::Value;
use taskgate_shared::protocol::result;
use taskgate_shared::store::CancelOutcome;

use crate::error::GatewayError;
use crate::mcp::{Call, release_active, task_id, task_not_found};

const CANCELLED_MESSAGE: &str = "The task was cancelled.";

pub(crate) async fn run(call: &Call<'_>) -> Result<Value, GatewayError> {
    let id = task_id(call.params)?;
    let owner = call.principal.owner();
    let outcome = call.state.store.cancel_task(&id, &owner, CANCELLED_MESSAGE).await?;
    if outcome != CancelOutcome::NotFound {
        // The client commonly polls right after cancelling: not held, whatever pub/sub's timing.
        call.state.polls.changed(id.as_str());
    }
    match outcome {
        CancelOutcome::NotFound => Err(task_not_found().into()),
        // Already terminal may be this same cancel re-sent after a lost reply: releasing again
        // is harmless, and skipping it could leave the slot held.
        CancelOutcome::Cancelled { .. } | CancelOutcome::AlreadyTerminal => {
            release_active(call.state, &id, &owner.tenant).await;
            Ok(result::ack())
        }
        CancelOutcome::Signalled => Ok(result::ack()),
    }
}
