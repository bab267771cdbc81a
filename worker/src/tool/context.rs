//! The context of one run of a tool: who it is (task, fencing token, caller's capabilities),
//! its status and side-effect marks, notices, and cancellation. Steps, input and held questions
//! are in their own modules.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use taskgate_shared::store::{Claim, Lease, Started, Store};
use taskgate_shared::task::TaskId;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::ToolError;

/// What a running tool may do with its task.
pub struct ToolContext {
    pub(super) task_id: TaskId,
    /// Who created the task: whose identity a per-identity upstream acts as.
    pub(super) tenant: String,
    pub(super) principal: String,
    pub(super) fence: u64,
    /// The owner's digest, naming its outbox (`Lease::outbox`).
    pub(super) outbox: String,
    pub(super) worker: String,
    pub(super) store: Store,
    pub(super) answers: HashMap<String, Value>,
    pub(super) client_capabilities: Value,
    pub(super) saved_state: Option<Value>,
    pub(super) pending: Mutex<Vec<(String, Value)>>,
    pub(super) park_message: Mutex<Option<String>>,
    pub(super) pending_state: Mutex<Option<Value>>,
    pub(super) cancel: CancellationToken,
    pub(super) answered: Arc<Notify>,
    /// Questions held open by this run so far (they number its keys).
    pub(super) held: AtomicU32,
    /// Durable steps recorded by earlier runs (returned with the claim), name -> result JSON.
    pub(super) recorded_steps: HashMap<String, String>,
    /// Step names this run has reached (replayed, running or recorded), and how many steps it
    /// ran or is running (new records, against [`MAX_STEPS`]).
    pub(super) steps_seen: Mutex<(HashSet<String>, usize)>,
    /// Bytes of step results recorded so far, the claim's and this run's (against
    /// [`MAX_STEPS_TOTAL_BYTES`]).
    pub(super) steps_bytes: Mutex<usize>,
    /// The caller's own tasks the call named as related (`relatedTaskIds`), checked by the
    /// gateway.
    pub(super) related_tasks: Vec<String>,
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
            tenant: claim.owner_tenant.clone(),
            principal: claim.owner_principal.clone(),
            fence: claim.fence,
            outbox: taskgate_shared::store::owner_digest(&taskgate_shared::task::Owner {
                tenant: claim.owner_tenant.clone(),
                principal: claim.owner_principal.clone(),
            }),
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
            related_tasks: claim.related_tasks.clone(),
        }
    }

    pub(super) fn lease(&self) -> Lease<'_> {
        Lease { task_id: &self.task_id, worker: &self.worker, fence: self.fence, outbox: Some(self.outbox.as_str()) }
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

    /// The tenant that created the task.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The principal that created the task.
    pub fn principal(&self) -> &str {
        &self.principal
    }

    /// The ids of the tasks the call named as related (`_meta["io.modelcontextprotocol/
    /// relatedTaskIds"]`), only those the task's own caller owned when it was created, in the
    /// order sent: advisory, so a tool may reuse a predecessor's work. Empty for none.
    pub fn related_tasks(&self) -> &[String] {
        &self.related_tasks
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
