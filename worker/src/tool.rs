//! The tool runtime contract.
//!
//! # Replay contract
//!
//! Asking for input never holds a worker slot. When a tool asks for an answer it does not have,
//! [`ToolContext::input`] returns [`ToolError::Suspend`]; the tool must propagate it (`?`). The
//! worker then parks the task durably in `input_required` and moves on. When every outstanding
//! key is answered, the task is queued again and the tool runs **again from the start**, with
//! the recorded answers: `input` returns a recorded answer at once and suspends only on the
//! first key that has none. Therefore:
//!
//! - for the same arguments and answers, a tool must ask the same keys in the same order;
//! - keys are unique over the task's lifetime: a key once asked is never asked with a new
//!   request (ask a new key instead);
//! - side effects before a suspension must be idempotent, keyed by the task id (the fencing
//!   token changes on every run), or checkpointed: in a durable step ([`ToolContext::step`]),
//!   or elsewhere.
//!
//! A tool that would rather continue than replay saves a small JSON state with its requests
//! ([`ToolContext::suspend_saving`]); the run after the answers reads it back with
//! [`ToolContext::saved_state`] and the answers with [`ToolContext::answer`]. The upstream
//! bridge does this with a 2026-07-28 server's `requestState`: each round of the server's input
//! requests parks the task once, under keys of that round, and the next run sends the answers
//! and the state back to the server instead of starting the call over.
//!
//! # Durable steps
//!
//! [`ToolContext::step`] runs a piece of work once per task rather than once per run: its
//! result (JSON) is recorded with the task under the run's fenced lease, and every later run
//! (after a crash and reclaim, a release, or the replay after an answer) gets the recorded
//! result instead of running the work again. The recorded steps come with the claim.
//!
//! - **Exactly-once: the recorded result.** Once a step is recorded, every run of the task sees
//!   that value, and a run whose lease was lost cannot record anything.
//! - **Not exactly-once: the side effect inside a step.** A run that stops after the effect
//!   and before the record (its worker died, its lease was lost) leaves no record, and the next
//!   run does the step again: at-least-once within a step. Give effects on other systems an
//!   idempotency key such as `(task id, step name)`.
//! - Errors are not recorded: a step that fails runs again on the next run.
//! - Step names are unique per task (the same name twice in one run fails the task); at most
//!   [`MAX_STEPS`] steps per task, [`MAX_STEP_BYTES`] per result.
//!
//! Cancellation is cooperative: watch [`ToolContext::cancelled`] or call
//! [`ToolContext::checkpoint`]. A tool that ignores a cancel is stopped after the worker's cancel
//! grace period.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use taskgate_shared::protocol::{ErrorKind, RpcError};
use taskgate_shared::store::{Claim, HeldAnswer, Hold, Lease, Started, Store};
use taskgate_shared::task::TaskId;
use taskgate_shared::tools::ToolSpec;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How often a held question's answer is looked up without a signal (pub/sub is lossy).
const HELD_LOOK_AGAIN: Duration = Duration::from_secs(2);

/// The largest serialized result one durable step may record ([`ToolContext::step`]).
pub const MAX_STEP_BYTES: usize = 256 * 1024;
/// The most durable steps one task may record over its lifetime.
pub const MAX_STEPS: usize = 1_000;
/// The most bytes of step results one task may record in all: what every claim of the task
/// reads back.
pub const MAX_STEPS_TOTAL_BYTES: usize = 8 * 1024 * 1024;
/// The longest step name, in bytes.
pub const MAX_STEP_NAME_BYTES: usize = 256;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A tool a worker can run.
///
/// A call may run more than once for one task: after its worker dies (the lease runs out and
/// another worker claims it), after a release, and after every answered question (the replay
/// contract, above). Work that must not be repeated goes in durable steps
/// ([`ToolContext::step`]): exactly-once is the recorded result of a step, while the effect
/// inside a step is at-least-once (a run that died before the record repeats it); keep work
/// before a suspension idempotent or in steps.
pub trait Tool: Send + Sync + 'static {
    /// What gateways list and validate against.
    fn spec(&self) -> ToolSpec;

    /// Runs the tool. `arguments` already satisfy the spec's `inputSchema` (the gateway checked).
    fn call<'a>(&'a self, arguments: Value, ctx: &'a ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>>;
}

/// A finished call: the CallToolResult and, optionally, the task's final status message.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub result: Value,
    pub status_message: Option<String>,
}

impl ToolOutput {
    /// A CallToolResult with one text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            result: json!({ "content": [{ "type": "text", "text": text.into() }], "isError": false }),
            status_message: None,
        }
    }

    /// A CallToolResult with these content blocks.
    pub fn content(blocks: Vec<Value>) -> Self {
        Self { result: json!({ "content": blocks, "isError": false }), status_message: None }
    }

    pub fn structured(mut self, content: Value) -> Self {
        self.result["structuredContent"] = content;
        self
    }

    /// A tool-level error: the task still ends `completed`, with `isError: true`.
    pub fn error(mut self) -> Self {
        self.result["isError"] = Value::Bool(true);
        self
    }

    pub fn with_status(mut self, message: impl Into<String>) -> Self {
        self.status_message = Some(message.into());
        self
    }

    /// The result as stored: without `resultType` and `_meta`, which the gateway sets when it
    /// answers (the same for every result; `protocol::result::tool_result`). A tool's own
    /// `_meta` is dropped: the gateway's serverInfo takes its place.
    pub(crate) fn into_stored(self) -> (Value, Option<String>) {
        let mut result = match self.result {
            Value::Object(map) => map,
            other => serde_json::Map::from_iter([(
                "content".to_owned(),
                json!([{ "type": "text", "text": other.to_string() }]),
            )]),
        };
        result.remove("resultType");
        result.remove("_meta");
        (Value::Object(result), self.status_message)
    }
}

/// Why a call did not produce a result.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolError {
    /// Input is needed: the task parks and the tool runs again once it is answered.
    Suspend,
    /// The tool honoured a cancellation (or a user refused): the task ends `cancelled`.
    Cancelled(Option<String>),
    /// A JSON-RPC error: the task ends `failed` with it.
    Rpc(RpcError),
    /// This worker lost the lease; nothing it writes will be accepted.
    LeaseLost,
}

/// What a running tool may do with its task.
pub struct ToolContext {
    task_id: TaskId,
    fence: u64,
    worker: String,
    store: Store,
    answers: HashMap<String, Value>,
    client_capabilities: Value,
    saved_state: Option<Value>,
    pending: Mutex<Vec<(String, Value)>>,
    park_message: Mutex<Option<String>>,
    pending_state: Mutex<Option<Value>>,
    cancel: CancellationToken,
    answered: Arc<Notify>,
    /// Questions held open by this run so far (they number its keys).
    held: AtomicU32,
    /// Durable steps recorded by earlier runs (returned with the claim), name -> result JSON.
    recorded_steps: HashMap<String, String>,
    /// Step names this run has reached (replayed, running or recorded), and how many steps it
    /// ran or is running (new records, against [`MAX_STEPS`]).
    steps_seen: Mutex<(HashSet<String>, usize)>,
    /// Bytes of step results recorded so far, the claim's and this run's (against
    /// [`MAX_STEPS_TOTAL_BYTES`]).
    steps_bytes: Mutex<usize>,
}

/// What a suspended call leaves for the park: its requests, the status message, the state.
pub(crate) struct Pending {
    pub(crate) requests: Vec<(String, Value)>,
    pub(crate) message: Option<String>,
    pub(crate) state: Option<Value>,
}

impl ToolContext {
    /// The context of a run of `claim`: the answers, capabilities and state its record holds.
    pub(crate) fn for_claim(
        claim: &Claim,
        worker: String,
        store: Store,
        cancel: CancellationToken,
        answered: Arc<Notify>,
    ) -> Self {
        let answers =
            claim.answers.iter().filter_map(|(k, v)| Some((k.clone(), serde_json::from_str(v).ok()?))).collect();
        Self {
            task_id: claim.task_id.clone(),
            fence: claim.fence,
            worker,
            store,
            answers,
            client_capabilities: serde_json::from_str(&claim.client_capabilities).unwrap_or(Value::Null),
            saved_state: claim.tool_state.as_deref().and_then(|s| serde_json::from_str(s).ok()),
            pending: Mutex::default(),
            park_message: Mutex::default(),
            pending_state: Mutex::default(),
            cancel,
            answered,
            held: AtomicU32::new(0),
            recorded_steps: claim.steps.iter().cloned().collect(),
            steps_seen: Mutex::default(),
            steps_bytes: Mutex::new(claim.steps.iter().map(|(name, result)| name.len() + result.len()).sum()),
        }
    }

    fn lease(&self) -> Lease<'_> {
        Lease { task_id: &self.task_id, worker: &self.worker, fence: self.fence }
    }

    /// The `clientCapabilities` of the request that created the task. Ask only for input the
    /// caller declared (`elicitation`, `sampling`, `roots`); the gateway refuses the rest with
    /// -32021.
    pub fn client_capabilities(&self) -> &Value {
        &self.client_capabilities
    }

    /// Whether the caller declared a top-level capability.
    pub fn client_declares(&self, capability: &str) -> bool {
        self.client_capabilities.get(capability).is_some_and(Value::is_object)
    }

    pub fn task_id(&self) -> &str {
        self.task_id.as_str()
    }

    /// The fencing token of this run: larger on every claim. Use `(task id, token)` as the
    /// idempotency key of side effects that must happen once per run.
    pub fn fencing_token(&self) -> u64 {
        self.fence
    }

    /// Sets the task's status message (visible to `tasks/get`).
    pub async fn set_status(&self, message: &str) -> Result<(), ToolError> {
        let lease = self.lease();
        match self.store.set_status(lease, message).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(ToolError::LeaseLost),
            Err(err) => {
                tracing::warn!(task_id = %self.task_id, error = %err, "status message not written");
                Ok(())
            }
        }
    }

    /// Records that this run is about to cause a side effect that must not happen twice
    /// unasked (a call to another system), and answers whether it is the first run to get
    /// here. `false` means an earlier run (one that lost its lease, as when its worker died)
    /// got this far and may have caused the effect already.
    pub async fn mark_started(&self) -> Result<bool, ToolError> {
        let lease = self.lease();
        match self.store.mark_started(lease).await {
            Ok(Started::First) => Ok(true),
            Ok(Started::Before { .. }) => Ok(false),
            Ok(Started::LeaseLost) => Err(ToolError::LeaseLost),
            Err(err) => {
                // Written or not is unknown: start nothing. The lease runs out and the next run
                // decides, at worst refusing a call that never went out.
                tracing::warn!(task_id = %self.task_id, error = %err, "could not record the start of a side effect");
                Err(ToolError::LeaseLost)
            }
        }
    }

    /// Runs `work` as the durable step `name`: once per task, not once per run.
    ///
    /// The first run to finish the step records its result (serialized as JSON) with one
    /// fenced write; every later run of the task (after a crash and reclaim, a release, or the
    /// replay after an answered question) gets the recorded result back without polling `work`
    /// at all (a future does nothing until polled, so `ctx.step("charge", async { … })` is
    /// enough). The recorded steps come with the claim: a replayed step costs no Redis round
    /// trip, a step that runs costs one (its record).
    ///
    /// What is exactly-once is the *recorded result*: every run after the record sees the same
    /// value. The side effect inside `work` is at-least-once: a run that stops (its worker
    /// dies, its lease is lost) after the effect and before the record leaves nothing, and the
    /// next run does the step again. Key such effects by `(task id, step name)` where the other
    /// system takes an idempotency key.
    ///
    /// - An error from `work` is returned and **not** recorded: the next run runs the step
    ///   again, and this run may call the same step again to retry it (a failure is usually
    ///   worth retrying; return a value describing the failure when it should stick).
    /// - Names are unique per task: reaching a step name again in one run after it succeeded
    ///   (or while it runs) is a programming error and fails the task. Names are 1 to
    ///   [`MAX_STEP_NAME_BYTES`] bytes.
    /// - A result is at most [`MAX_STEP_BYTES`] serialized; a task records at most
    ///   [`MAX_STEPS`] steps and [`MAX_STEPS_TOTAL_BYTES`] in all (every claim reads them
    ///   back). Over any, the step fails the task (nothing is recorded).
    /// - A record refused by fencing ends the run as a lost lease ([`ToolError::LeaseLost`]);
    ///   a record whose outcome is unknown (Redis unreachable) does too, so the lease runs out
    ///   and the next run decides from what Redis holds.
    /// - Steps compose with [`input`](Self::input): a tool that asks after its third step is
    ///   replayed after the answer with steps 1–3 returned from the record.
    pub async fn step<T, F>(&self, name: &str, work: F) -> Result<T, ToolError>
    where
        T: Serialize + DeserializeOwned,
        F: Future<Output = Result<T, ToolError>>,
    {
        let internal = |message: String| ToolError::Rpc(RpcError::new(ErrorKind::Internal, message));
        if name.is_empty() || name.len() > MAX_STEP_NAME_BYTES {
            return Err(internal(format!("a step name must be 1 to {MAX_STEP_NAME_BYTES} bytes; got {name:?}")));
        }
        {
            let mut seen = self.steps_seen.lock().expect("lock poisoned: a holder panicked");
            if !seen.0.insert(name.to_owned()) {
                return Err(internal(format!("step {name:?} ran twice in one run; step names are unique per task")));
            }
            if !self.recorded_steps.contains_key(name) {
                if self.recorded_steps.len() + seen.1 >= MAX_STEPS {
                    return Err(internal(format!("step {name:?} is over the limit of {MAX_STEPS} steps per task")));
                }
                // Reserved now, so steps run side by side stay within the bound too.
                seen.1 += 1;
            }
        }
        if let Some(recorded) = self.recorded_steps.get(name) {
            tracing::debug!(task_id = %self.task_id, step = name, "step replayed from its record");
            return serde_json::from_str(recorded)
                .map_err(|err| internal(format!("the recorded result of step {name:?} does not fit its type: {err}")));
        }
        let value = match work.await {
            Ok(value) => value,
            Err(err) => {
                // Not recorded: the step may be tried again, in this run or the next.
                let mut seen = self.steps_seen.lock().expect("lock poisoned: a holder panicked");
                seen.0.remove(name);
                seen.1 -= 1;
                return Err(err);
            }
        };
        let text = serde_json::to_string(&value)
            .map_err(|err| internal(format!("the result of step {name:?} could not be serialized: {err}")))?;
        if text.len() > MAX_STEP_BYTES {
            return Err(internal(format!(
                "the result of step {name:?} was {} bytes, over the {MAX_STEP_BYTES}-byte limit",
                text.len()
            )));
        }
        {
            let mut total = self.steps_bytes.lock().expect("lock poisoned: a holder panicked");
            if *total + name.len() + text.len() > MAX_STEPS_TOTAL_BYTES {
                return Err(internal(format!(
                    "step {name:?} would take the task's recorded steps over {MAX_STEPS_TOTAL_BYTES} bytes"
                )));
            }
            *total += name.len() + text.len();
        }
        match self.store.record_step(self.lease(), name, &text).await {
            Ok(true) => Ok(value),
            Ok(false) => Err(ToolError::LeaseLost),
            Err(err) => {
                // Recorded or not is unknown: go no further. The lease runs out and the next
                // run replays the step or runs it again, from what Redis holds.
                tracing::warn!(task_id = %self.task_id, step = name, error = %err, "could not record a step");
                Err(ToolError::LeaseLost)
            }
        }
    }

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

    /// Reports progress. Forwarded as `notifications/progress` to an inline caller that sent a
    /// `progressToken`; values must increase. Best effort: never stored.
    pub async fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        self.notice(json!({ "kind": "progress", "progress": progress, "total": total, "message": message })).await;
    }

    /// Logs to the caller. Forwarded as `notifications/message` to an inline caller whose
    /// request set `io.modelcontextprotocol/logLevel` at or below `level`. Never put secrets or
    /// user content here. Best effort: never stored.
    pub async fn log(&self, level: &str, data: Value) {
        self.notice(json!({ "kind": "log", "level": level, "data": data })).await;
    }

    async fn notice(&self, mut notice: Value) {
        notice["taskId"] = Value::String(self.task_id.to_string());
        if let Err(err) = self.store.notify(&notice).await {
            tracing::debug!(task_id = %self.task_id, error = %err, "notice not published");
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Resolves when a cancel is requested.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await;
    }

    /// `Err(Cancelled)` once a cancel is requested.
    pub fn checkpoint(&self) -> Result<(), ToolError> {
        if self.is_cancelled() { Err(ToolError::Cancelled(None)) } else { Ok(()) }
    }

    /// What a suspended call recorded.
    pub(crate) fn take_pending(&self) -> Pending {
        Pending {
            requests: std::mem::take(&mut *self.pending.lock().expect("lock poisoned: a holder panicked")),
            message: self.park_message.lock().expect("lock poisoned: a holder panicked").take(),
            state: self.pending_state.lock().expect("lock poisoned: a holder panicked").take(),
        }
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use taskgate_shared::store::{Claim, Endpoint, Store};
    use taskgate_shared::task::TaskId;

    use super::*;

    /// A context whose claim returned `steps`; its store points nowhere (these checks come
    /// before any write).
    fn context(steps: Vec<(String, String)>) -> ToolContext {
        let claim = Claim {
            task_id: TaskId::generate(16),
            fence: 3,
            tool: "t".into(),
            arguments: "{}".into(),
            traceparent: None,
            cancel_requested: false,
            answers: Vec::new(),
            client_capabilities: "{}".into(),
            tenant: None,
            tool_state: None,
            steps,
            queued_ms: None,
            owner_tenant: "t".into(),
        };
        let store = Store::connect_lazy(&Endpoint::new("redis://127.0.0.1:1"), "t", Duration::from_millis(50))
            .expect("a lazy store");
        ToolContext::for_claim(&claim, "w".into(), store, CancellationToken::new(), Arc::default())
    }

    fn is_internal(result: &Result<impl std::fmt::Debug, ToolError>, needle: &str) -> bool {
        matches!(result, Err(ToolError::Rpc(err)) if err.message.contains(needle))
    }

    #[tokio::test]
    async fn a_recorded_step_is_replayed_without_running() {
        let ctx = context(vec![("count".into(), "42".into())]);
        let value: u32 = ctx.step("count", async { panic!("a recorded step must not run") }).await.unwrap();
        assert_eq!(value, 42);
        let again = ctx.step("count", async { Ok(1_u32) }).await;
        assert!(is_internal(&again, "unique per task"), "{again:?}");
        let wrong: Result<String, _> = ctx.step("other", async { Ok("x".to_owned()) }).await;
        assert!(matches!(wrong, Err(ToolError::LeaseLost)), "an unreachable store ends the run: {wrong:?}");
    }

    #[tokio::test]
    async fn steps_are_bounded() {
        let ctx = context(Vec::new());
        let big = ctx.step("big", async { Ok("x".repeat(MAX_STEP_BYTES)) }).await;
        assert!(is_internal(&big, "-byte limit"), "{big:?}");
        let unnamed = ctx.step("", async { Ok(1_u8) }).await;
        assert!(is_internal(&unnamed, "step name"), "{unnamed:?}");
        let full = context((0..MAX_STEPS).map(|n| (format!("s{n}"), "1".to_owned())).collect());
        let over = full.step("one-more", async { Ok(1_u8) }).await;
        assert!(is_internal(&over, "steps per task"), "{over:?}");
        let heavy = context((0..32).map(|n| (format!("s{n}"), "x".repeat(MAX_STEP_BYTES - 8))).collect());
        let over = heavy.step("one-more", async { Ok("y".repeat(1_000)) }).await;
        assert!(is_internal(&over, "recorded steps over"), "{over:?}");
    }

    #[tokio::test]
    async fn a_failed_step_may_be_tried_again() {
        let ctx = context(Vec::new());
        let failed: Result<u32, _> = ctx.step("flaky", async { Err(ToolError::Cancelled(None)) }).await;
        assert_eq!(failed, Err(ToolError::Cancelled(None)));
        let retried: Result<u32, _> = ctx.step("flaky", async { Err(ToolError::Cancelled(None)) }).await;
        assert_eq!(retried, Err(ToolError::Cancelled(None)), "not refused as a second use of the name");
    }
}
