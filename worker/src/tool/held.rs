//! A question held open while the run keeps its lease: for a question that belongs to a live
//! session and cannot be replayed.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::Value;
use taskgate_shared::protocol::{ErrorKind, RpcError};
use taskgate_shared::store::{HeldAnswer, Hold};

use super::{ToolContext, ToolError};

/// How often a held question's answer is looked up without a signal (pub/sub is lossy).
const HELD_LOOK_AGAIN: Duration = Duration::from_secs(2);

impl ToolContext {
    /// Shows `request` on the task as `input_required` while this run keeps its lease, and waits
    /// for the answer. Only for a question that cannot be replayed (one that belongs to a live
    /// session, as a mid-call `elicitation/create` from an upstream server does); everything
    /// else asks with [`input`](Self::input), which holds nothing while a human answers. If
    /// this worker stops meanwhile, the task fails. The key (`held.<fencing token>.<n>`) is
    /// this run's own, so keys stay unique over the task's life.
    ///
    /// Not cancel-safe: a tool that stops waiting early (drops the future) must end the run
    /// right after (return an error or a result), since the task still shows the question.
    pub async fn hold_input(&self, request: &Value, status_message: &str) -> Result<Value, ToolError> {
        let n = self.held.fetch_add(1, Ordering::Relaxed) + 1;
        let key = format!("held.{}.{n}", self.fence);
        let internal = |message: String| ToolError::Rpc(RpcError::new(ErrorKind::Internal, message));
        match self.store.hold_for_input(self.lease(), status_message, &key, &request.to_string()).await {
            Ok(Hold::Held) => {}
            Ok(Hold::CancelPending) => {
                // The signal may have been lost: make sure the tool's own cancel path runs.
                self.cancel.cancel();
                return Err(ToolError::Cancelled(None));
            }
            Ok(Hold::LeaseLost) => return Err(ToolError::LeaseLost),
            Ok(Hold::KeyReused(key)) => return Err(internal(format!("input key {key:?} was issued before"))),
            Err(err) => {
                // Written or not is unknown (invariant 14, docs/architecture.md); failing the run
                // ends the task either way, and a held task may be finished by its holder.
                tracing::warn!(task_id = %self.task_id, error = %err, "could not show a held question");
                return Err(internal("the question could not be shown on the task".into()));
            }
        }
        tracing::info!(task_id = %self.task_id, key = %key, "holding a question open for its answer");
        loop {
            match self.store.held_answer(self.lease(), &key).await {
                Ok(HeldAnswer::Answered(answer)) => {
                    return serde_json::from_str(&answer).map_err(|_| internal("the answer is not JSON".into()));
                }
                Ok(HeldAnswer::Waiting) => {}
                Ok(HeldAnswer::Ended) => {
                    self.cancel.cancel();
                    return Err(ToolError::Cancelled(None));
                }
                Ok(HeldAnswer::LeaseLost) => return Err(ToolError::LeaseLost),
                Err(err) => tracing::warn!(task_id = %self.task_id, error = %err, "could not look for the answer"),
            }
            tokio::select! {
                () = self.answered.notified() => {}
                () = self.cancel.cancelled() => return Err(ToolError::Cancelled(None)),
                () = tokio::time::sleep(HELD_LOOK_AGAIN) => {}
            }
        }
    }

    /// Takes back a question held with [`hold_input`](Self::hold_input) that will not be
    /// answered any more (its asker stopped waiting): the task shows `working` again.
    pub async fn withdraw_question(&self, status_message: &str) -> Result<(), ToolError> {
        match self.store.withdraw_question(self.lease(), status_message).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(ToolError::LeaseLost),
            Err(err) => {
                tracing::warn!(task_id = %self.task_id, error = %err, "could not take a held question back");
                Err(ToolError::Rpc(RpcError::new(ErrorKind::Internal, "a withdrawn question could not be taken back")))
            }
        }
    }
}
