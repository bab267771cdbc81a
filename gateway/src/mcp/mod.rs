//! MCP method dispatch: the validation ladder every request climbs, then one module per method.
//!
//! Order (each step's failure is answered before the next runs):
//! 1. method known (`-32601`, 404; removed methods included) — `_meta` is not read first;
//! 2. `params` is an object (`-32602`);
//! 3. `_meta` present, version a string (`-32602`);
//! 4. mirrored headers (`-32020`);
//! 5. version supported (`-32022`); capabilities an object, `clientInfo` valid (`-32602`);
//! 6. the Tasks extension, for methods that need it (`-32021`);
//! 7. the method's own params (in-band errors).

mod inline;
pub(crate) mod listen;
mod methods;

use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::{Map, Value};
use taskgate_shared::protocol::{ErrorKind, Incoming, RpcError, ValidMeta, meta};

use taskgate_shared::store::StoreError;
use taskgate_shared::task::TaskId;
use taskgate_shared::telemetry::metrics::TASKS;
use taskgate_shared::telemetry::trace;

use crate::AppState;
use crate::auth::Principal;
use crate::http::reply::{self, Stage};

/// The methods taskgate serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Discover,
    ToolsList,
    ToolsCall,
    TasksGet,
    TasksUpdate,
    TasksCancel,
    SubscriptionsListen,
}

impl Method {
    fn route(name: &str) -> Result<Self, RpcError> {
        Ok(match name {
            "server/discover" => Self::Discover,
            "tools/list" => Self::ToolsList,
            "tools/call" => Self::ToolsCall,
            "tasks/get" => Self::TasksGet,
            "tasks/update" => Self::TasksUpdate,
            "tasks/cancel" => Self::TasksCancel,
            "subscriptions/listen" => Self::SubscriptionsListen,
            "initialize" => return Err(RpcError::initialize_removed()),
            // Removed in 2026-07-28 (ping, logging/setLevel, resources/subscribe) or in the Tasks
            // extension (tasks/status, tasks/result, tasks/list), and anything unknown.
            _ => return Err(RpcError::method_not_found()),
        })
    }

    /// Task methods need the extension on their own request. `tools/call` decides per tool.
    fn requires_tasks_extension(self) -> bool {
        matches!(self, Self::TasksGet | Self::TasksUpdate | Self::TasksCancel)
    }
}

/// What a method sees of its request.
pub(crate) struct Call<'a> {
    pub(crate) state: &'a AppState,
    pub(crate) headers: &'a HeaderMap,
    pub(crate) principal: Principal,
    pub(crate) meta: ValidMeta,
    pub(crate) params: &'a Map<String, Value>,
}

/// Runs one request through the ladder and the method.
pub(crate) async fn handle(state: &AppState, headers: &HeaderMap, principal: Principal, message: Incoming) -> Response {
    let id = message.id.clone().unwrap_or(Value::Null);
    let (method, params, meta) = match admit(state.config.strict_headers, headers, &message) {
        Ok(admitted) => admitted,
        Err(err) => return reply::rpc_error(&id, &err, Stage::Envelope),
    };
    // Creating calls are admitted with their task (one script); tasks/get runs its admission
    // alongside the read.
    if !matches!(method, Method::ToolsCall | Method::TasksGet)
        && let Err(err) = crate::limits::admit_request(state, &principal).await
    {
        return reply::rpc_error(&id, &err, Stage::Method);
    }
    let call = Call { state, headers, principal, meta, params };
    let outcome = match method {
        Method::Discover => Ok(methods::discover::run()),
        Method::ToolsList => methods::tools_list::run(&call).await,
        Method::ToolsCall => match methods::tools_call::run(&call, &id).await {
            Ok(methods::tools_call::CallOutcome::Json(result)) => Ok(result),
            Ok(methods::tools_call::CallOutcome::Stream(response)) => return response,
            Err(err) => Err(err),
        },
        Method::TasksGet => methods::tasks_get::run(&call).await,
        Method::TasksUpdate => methods::tasks_update::run(&call).await,
        Method::TasksCancel => methods::tasks_cancel::run(&call).await,
        Method::SubscriptionsListen => match methods::subscriptions_listen::run(&call, &id).await {
            Ok(response) => return response,
            Err(err) => Err(err),
        },
    };
    match outcome {
        Ok(result) => {
            reply::json(axum::http::StatusCode::OK, &taskgate_shared::protocol::envelope::success(&id, result))
        }
        Err(err) => reply::rpc_error(&id, &err, Stage::Method),
    }
}

/// Steps 1–6 of the ladder: nothing here reads Redis.
pub(crate) fn admit<'m>(
    strict_headers: bool,
    headers: &HeaderMap,
    message: &'m Incoming,
) -> Result<(Method, &'m Map<String, Value>, ValidMeta), RpcError> {
    let method = Method::route(&message.method)?;
    let params = message.params_object()?;
    let meta = meta::validate(params, |version| {
        crate::http::check_mirrored_headers(headers, version, &message.method, params, strict_headers)
    })?;
    if method.requires_tasks_extension() && !meta.declares_tasks() {
        return Err(RpcError::missing_tasks_extension());
    }
    Ok((method, params, meta))
}

/// The one answer for an unknown, foreign, expired or malformed task id.
pub(crate) fn task_not_found() -> RpcError {
    RpcError::invalid_params("task not found")
}

/// `params.taskId`, parsed. Anything that is not a well-formed id is simply not found.
/// Well-formed ids are recorded on the request's span, so every log line names the task.
pub(crate) fn task_id(params: &Map<String, Value>) -> Result<TaskId, RpcError> {
    let id = params.get("taskId").and_then(Value::as_str).and_then(TaskId::parse).ok_or_else(task_not_found)?;
    tracing::Span::current().record("task_id", id.as_str());
    Ok(id)
}

/// Storage failures are logged here, once, and reach the client as a bare -32603.
pub(crate) fn storage_error(err: StoreError) -> RpcError {
    tracing::error!(error = %err, "storage operation failed");
    RpcError::internal()
}

/// How long a new task lives, how often it may be polled, and how it starts.
pub(crate) struct TaskShape<'a> {
    pub(crate) ttl_ms: u64,
    pub(crate) poll_interval_ms: u64,
    pub(crate) status_message: Option<&'a str>,
}

/// How sure a new task must be before its handle leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// Written on the primary (hidden tasks of inline calls: their result is the reply).
    Primary,
    /// Also acknowledged by `--durability-replicas` replicas, when configured.
    Replicated,
}

/// Writes a new task for this call (owner, capabilities, trace context and the answers
/// gathered so far come from the call). Returns `createdAt`. A create that failed, or that the
/// replicas did not acknowledge, is abandoned before the error is returned: nobody holds its
/// handle, so no work may run for it and it must not hold its tenant's active-task slot.
pub(crate) async fn write_task(
    call: &Call<'_>,
    id: &TaskId,
    tool: &str,
    arguments: &Value,
    shape: TaskShape<'_>,
    answers: &std::collections::BTreeMap<String, Value>,
    durability: Durability,
) -> Result<i64, RpcError> {
    let state = call.state;
    let arguments = arguments.to_string();
    let answers: Vec<(String, String)> = answers.iter().map(|(k, v)| (k.clone(), v.to_string())).collect();
    let capabilities = Value::Object(call.meta.capabilities.clone()).to_string();
    // The worker's span joins the trace as a child of this request's span when traces are
    // exported; otherwise the client's own context is passed on.
    let traceparent = trace::traceparent_of(&tracing::Span::current()).or_else(|| client_traceparent(call));
    let owner = call.principal.owner();
    let task = taskgate_shared::store::NewTask {
        id,
        owner: &owner,
        tool,
        arguments: &arguments,
        ttl_ms: shape.ttl_ms,
        poll_interval_ms: shape.poll_interval_ms,
        status_message: shape.status_message,
        traceparent: traceparent.as_deref(),
        client_capabilities: &capabilities,
        answers: &answers,
        counted: counts_active(state),
    };
    tracing::Span::current().record("task_id", id.as_str());
    let replicas = match durability {
        Durability::Replicated => state.config.durability_replicas,
        Durability::Primary => 0,
    };
    let written = if replicas == 0 {
        state.store.create_task(task).await.map(|created| (created, 0))
    } else {
        state.store.create_task_durable(task, replicas, state.config.durability_timeout()).await
    };
    let created = match written {
        Ok((created, acked)) if acked >= replicas => created,
        Ok((_, acked)) => {
            tracing::error!(task_id = %id, wanted = replicas, acked, "create not acknowledged by replicas; abandoning it");
            abandon_task(state, id, &owner, "The task could not be made durable.").await;
            return Err(RpcError::new(ErrorKind::Internal, "the task could not be made durable; it was not created"));
        }
        Err(err) => {
            // The script may or may not have run: abandon whatever it left.
            let error = storage_error(err);
            abandon_task(state, id, &owner, "The task could not be created.").await;
            return Err(error);
        }
    };
    crate::metrics::METRICS.tasks_created.with_label_values(&[tool]).inc();
    TASKS.transition("none", "working");
    Ok(created)
}

/// Whether new tasks count against their tenant's active-task cap.
pub(crate) fn counts_active(state: &AppState) -> bool {
    state.config.tenant_max_active_tasks > 0
}

/// Ends a task the gateway made and nobody follows (an inline call given up, a create that
/// failed or was not made durable), and frees its active-task slot. A task a worker is running
/// is only flagged here; that worker ends it and frees the slot. Best effort: what is left
/// behind expires with the task.
pub(crate) async fn abandon_task(state: &AppState, id: &TaskId, owner: &taskgate_shared::task::Owner, message: &str) {
    match state.store.cancel_task(id, owner, message).await {
        Ok(outcome) => {
            crate::metrics::count_cancel(outcome);
            if outcome != taskgate_shared::store::CancelOutcome::Signalled {
                release_active(state, id, &owner.tenant).await;
            }
        }
        Err(err) => tracing::warn!(task_id = %id, error = %err, "could not abandon the task; it expires by its TTL"),
    }
}

/// The task is over: it no longer counts against its tenant's cap. Idempotent.
pub(crate) async fn release_active(state: &AppState, id: &TaskId, tenant: &str) {
    if !counts_active(state) {
        return;
    }
    if let Err(err) = state.store.release_active(tenant, id).await {
        tracing::warn!(task_id = %id, error = %err, "active-task count not updated; it heals at the task's expiry");
    }
}

/// The client's W3C trace context: `_meta.traceparent`, else the `traceparent` header; only
/// if well formed.
pub(crate) fn client_traceparent(call: &Call<'_>) -> Option<String> {
    call.meta
        .traceparent
        .as_deref()
        .or_else(|| call.headers.get("traceparent").and_then(|v| v.to_str().ok()))
        .and_then(trace::parse_traceparent)
}
