//! Asking for input, the replay contract's side (see the module above), and the state a run
//! saves for the next; and the request builders tools ask with.

use serde_json::{Value, json};
use taskgate_shared::protocol::{ErrorKind, RpcError};

use super::{ToolContext, ToolError};

impl ToolContext {
    /// The answer to input request `key`, or [`ToolError::Suspend`] after recording the request
    /// (`{method, params}`, e.g. from [`elicitation_form`]). `status_message` is shown while
    /// the task waits.
    pub fn input(&self, key: &str, request: Value, status_message: &str) -> Result<Value, ToolError> {
        self.inputs(vec![(key.to_owned(), request)], status_message).map(|mut answers| answers.remove(0))
    }

    /// Several answers at once: every unanswered key is asked in the same parking, so they are
    /// outstanding together.
    pub fn inputs(&self, requests: Vec<(String, Value)>, status_message: &str) -> Result<Vec<Value>, ToolError> {
        let mut answers = Vec::with_capacity(requests.len());
        let mut missing = Vec::new();
        for (key, request) in requests {
            match self.answers.get(&key) {
                Some(answer) => answers.push(answer.clone()),
                None => missing.push((key, request)),
            }
        }
        if missing.is_empty() {
            return Ok(answers);
        }
        self.pending.lock().expect("lock poisoned: a holder panicked").extend(missing);
        *self.park_message.lock().expect("lock poisoned: a holder panicked") = Some(status_message.to_owned());
        Err(ToolError::Suspend)
    }

    /// The recorded answer to input request `key`, if it has one.
    pub fn answer(&self, key: &str) -> Option<&Value> {
        self.answers.get(key)
    }

    /// What the run that last parked this task saved with its requests.
    pub fn saved_state(&self) -> Option<&Value> {
        self.saved_state.as_ref()
    }

    /// Saves `state` for the task's next run at once, without parking: what a run after a
    /// crash needs to continue rather than start over (the id of a task another system
    /// created for this one, say). The next run finds it in [`saved_state`](Self::saved_state).
    pub async fn save_state(&self, state: &Value) -> Result<(), ToolError> {
        match self.store.save_state(self.lease(), &state.to_string()).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(ToolError::LeaseLost),
            Err(err) => {
                tracing::warn!(task_id = %self.task_id, error = %err, "could not save the run's state");
                Err(ToolError::Rpc(RpcError::new(ErrorKind::Internal, "the run's state could not be saved")))
            }
        }
    }

    /// Asks every request of `requests` (keys never asked before) and saves `state` with the
    /// park; return the [`ToolError::Suspend`] it gives. The next run finds the state in
    /// [`saved_state`](Self::saved_state).
    pub fn suspend_saving(&self, requests: Vec<(String, Value)>, status_message: &str, state: Value) -> ToolError {
        self.pending.lock().expect("lock poisoned: a holder panicked").extend(requests);
        *self.park_message.lock().expect("lock poisoned: a holder panicked") = Some(status_message.to_owned());
        *self.pending_state.lock().expect("lock poisoned: a holder panicked") = Some(state);
        ToolError::Suspend
    }
}

/// An `elicitation/create` form request.
pub fn elicitation_form(message: &str, requested_schema: Value) -> Value {
    json!({
        "method": "elicitation/create",
        "params": { "mode": "form", "message": message, "requestedSchema": requested_schema }
    })
}

/// A `sampling/createMessage` request with one user message.
pub fn sampling_request(text: &str, max_tokens: u32) -> Value {
    json!({
        "method": "sampling/createMessage",
        "params": { "messages": [{ "role": "user", "content": { "type": "text", "text": text } }], "maxTokens": max_tokens }
    })
}

/// A `roots/list` request.
pub fn roots_request() -> Value {
    json!({ "method": "roots/list", "params": {} })
}

/// The content of an accepted elicitation answer.
pub fn accepted(answer: &Value) -> Option<&serde_json::Map<String, Value>> {
    (answer_action(answer) == Some("accept")).then(|| answer.get("content").and_then(Value::as_object)).flatten()
}

/// The action of an elicitation answer (`accept`, `decline` or `cancel`).
pub fn answer_action(answer: &Value) -> Option<&str> {
    answer.get("action").and_then(Value::as_str)
}
