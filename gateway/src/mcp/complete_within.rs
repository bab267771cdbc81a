//! A short task answered in one request: a `tools/call` made as a task waits a short budget
//! for its task to end, and answers with the tool's result when it did.
//!
//! The task is created exactly as any other: visible, and durable before anything runs
//! (invariant 5). Only its end is awaited, through the event hub as an inline call's is: the
//! wait costs one read per change that announced another status than `working` (the end, a
//! park), and nothing else in Redis, and ends with the request. A client that goes away stops
//! only the wait: the task is the client's to follow, unlike an inline call's hidden one, so it
//! runs on and stays readable with `tasks/get`.
//!
//! The answer, whatever the moment: `completed` is the result `tasks/get` would inline (tool
//! errors, `isError: true`, included) with the task's id in `_meta`; `failed` is the JSON-RPC
//! error `tasks/get` would inline; anything else (still working, asking for input, cancelled)
//! is the CreateTaskResult the call gives without waiting.

use std::time::Duration;

use serde_json::Value;
use taskgate_shared::protocol::meta::TASK_ID_META;
use taskgate_shared::protocol::result;
use taskgate_shared::task::{Snapshot, TaskId, TaskStatus};
use taskgate_shared::tools::ToolSpec;
use tokio::time::Instant;

use crate::config::Config;
use crate::error::GatewayError;
use crate::events::{Wake, Watch};
use crate::state::AppState;

/// How long a call of this tool waits: the tool's own setting, else `--complete-within-ms`;
/// never more than half the request timeout, so the reply always leaves before it.
pub(crate) fn budget(config: &Config, spec: &ToolSpec) -> Duration {
    let budget = spec.complete_within_ms.map_or(config.complete_within, Duration::from_millis);
    budget.min(config.requests.timeout / 2)
}

/// A watch on a task about to be written (or found again by its idempotency key).
pub(crate) struct Wait {
    id: TaskId,
    watch: Watch,
    budget: Duration,
}

impl Wait {
    /// Registers for the task's changes before it is written, so that none is missed; `None`
    /// for a zero budget.
    pub(crate) fn register(state: &AppState, id: &TaskId, budget: Duration) -> Option<Self> {
        if budget.is_zero() {
            return None;
        }
        Some(Self { id: id.clone(), watch: state.events.watch(&[id.as_str()], 8), budget })
    }

    /// The task as the call answers it: as it is once it ended within the budget (from now),
    /// else `handle`, the snapshot the create (or the retry) read.
    pub(crate) async fn settle(mut self, state: &AppState, handle: Snapshot) -> Snapshot {
        if handle.status != TaskStatus::Working {
            return handle;
        }
        let deadline = Instant::now() + self.budget;
        loop {
            let wake = tokio::select! {
                () = tokio::time::sleep_until(deadline) => return handle,
                () = state.shutdown.cancelled() => return handle,
                wake = self.watch.recv() => wake,
            };
            match wake {
                // Progress and logs are not changes; they reach no one on this path. A change
                // that announced `working` (the create's own, a resume) ends nothing: its read is
                // spared, and the change that ends the task announces itself.
                Some(Wake::Notice(_) | Wake::Changed(_, Some(TaskStatus::Working))) => continue,
                Some(Wake::Changed(..) | Wake::Resync) => {}
                None => return handle,
            }
            match state.store.get_task(&self.id).await {
                Ok(Some(now)) if matches!(now.status, TaskStatus::Completed | TaskStatus::Failed) => return now,
                // Parked for input or cancelled: the handle is the answer, without waiting on.
                Ok(Some(now)) if now.status != TaskStatus::Working => return handle,
                Ok(Some(_)) => {}
                // The task is durable and its handle right: a read that failed only ends the wait.
                Ok(None) | Err(_) => return handle,
            }
        }
    }
}

/// The reply to a call made as a task with a completion budget, given the task as it settled.
pub(crate) fn answer(task: &Snapshot) -> Result<Value, GatewayError> {
    match task.status {
        TaskStatus::Completed => {
            let mut answered = task.parsed_result();
            if let Some(meta) = answered.get_mut("_meta").and_then(Value::as_object_mut) {
                meta.insert(TASK_ID_META.into(), task.task_id.clone().into());
                return Ok(answered);
            }
            // A record without a result to show: the handle, and `tasks/get` tells the rest.
            Ok(handle(task))
        }
        TaskStatus::Failed => Err(super::inline::stored_error(task.error.clone()).into()),
        TaskStatus::Working | TaskStatus::InputRequired | TaskStatus::Cancelled => Ok(handle(task)),
    }
}

/// The CreateTaskResult: the whole answer of a call without a completion budget, whatever the
/// task's status (a keyed retry's included).
pub(crate) fn handle(task: &Snapshot) -> Value {
    result::with_type(result::TASK, task.task_fields())
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use taskgate_shared::task::Owner;

    use super::*;

    fn snapshot(status: TaskStatus) -> Snapshot {
        Snapshot {
            task_id: "t_1".into(),
            owner: Owner { tenant: "t".into(), principal: "p".into() },
            status,
            status_message: None,
            created_at_ms: 1,
            updated_at_ms: 2,
            ttl_ms: 60_000,
            poll_interval_ms: 1_000,
            input_requests: serde_json::Map::new(),
            result: Some(result::stored_result(r#"{"content":[],"isError":true}"#.into()).unwrap()),
            error: Some(json!({"code": -32602, "message": "bad", "data": {"x": 1}})),
            version: 3,
        }
    }

    #[test]
    fn a_completed_task_answers_its_result_with_its_id() {
        let answered = answer(&snapshot(TaskStatus::Completed)).unwrap();
        assert_eq!(answered["resultType"], "complete");
        assert_eq!(answered["isError"], true, "a tool error is a result");
        assert_eq!(answered["_meta"][TASK_ID_META], "t_1");
        assert!(answered["_meta"]["io.modelcontextprotocol/serverInfo"].is_object());
        assert!(answered.get("taskId").is_none() && answered.get("status").is_none(), "{answered}");
    }

    #[test]
    fn a_failed_task_answers_its_error_and_the_rest_their_handle() {
        let Err(GatewayError::Method(err)) = answer(&snapshot(TaskStatus::Failed)) else { panic!("an error") };
        assert_eq!((err.code(), err.data), (-32602, Some(json!({"x": 1}))));
        for status in [TaskStatus::Working, TaskStatus::InputRequired, TaskStatus::Cancelled] {
            let handle = answer(&snapshot(status)).unwrap();
            assert_eq!((handle["resultType"].as_str(), handle["taskId"].as_str()), (Some("task"), Some("t_1")));
            assert!(handle.get("result").is_none() && handle.get("inputRequests").is_none(), "{handle}");
        }
    }
}
