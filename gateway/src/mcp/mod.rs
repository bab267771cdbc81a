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

pub(crate) mod idempotency;
mod inline;
pub(crate) mod listen;
mod methods;
pub(crate) mod mirror;
mod reply;

use axum::http::HeaderMap;
use serde_json::Value;
use taskgate_shared::protocol::method::Admission;
use taskgate_shared::protocol::{ErrorKind, Incoming, Method, Params, RpcError, ValidMeta, meta, params};

use taskgate_shared::task::TaskId;
use taskgate_shared::telemetry::trace;

pub(crate) use reply::{Notice, NoticeParams, Reply, Stream, StreamItem};

use crate::auth::Principal;
use crate::error::GatewayError;
use crate::state::AppState;

/// What a method sees of its request.
pub(crate) struct Call<'a> {
    pub(crate) state: &'a AppState,
    pub(crate) headers: &'a HeaderMap,
    pub(crate) principal: Principal,
    pub(crate) meta: ValidMeta,
    pub(crate) params: &'a Params<'a>,
    /// The JSON-RPC id, for the response that ends a stream.
    pub(crate) id: &'a Value,
}

/// Authenticates one parsed message, runs it through the ladder and its method.
pub(crate) async fn handle(
    state: &AppState,
    headers: &HeaderMap,
    message: &Incoming<'_>,
) -> Result<Reply, GatewayError> {
    let principal = state
        .auth
        .authenticate(headers)
        .await
        .map_err(|error| GatewayError::Auth { error, challenge: state.challenge.clone() })?;
    tracing::Span::current().record("tenant", principal.tenant.as_str());
    if message.is_notification() {
        // Core defines no client-to-server notifications over HTTP; accepting is all there is.
        return Ok(Reply::Accepted);
    }
    let (method, params, meta) =
        admit(state.config.strict_headers, headers, message).map_err(GatewayError::Envelope)?;
    if method.admission() == Admission::Request {
        crate::limits::admit_request(state, &principal).await?;
    }
    let id = message.id.as_ref().unwrap_or(&Value::Null);
    let call = Call { state, headers, principal, meta, params: &params, id };
    match method {
        Method::Discover => Ok(Reply::Result(methods::discover::run(&call).await)),
        Method::ToolsList => methods::tools_list::run(&call).await.map(Reply::Result),
        Method::ToolsCall => methods::tools_call::run(&call).await,
        Method::TasksGet => methods::tasks_get::run(&call).await.map(Reply::Encoded),
        Method::TasksUpdate => methods::tasks_update::run(&call).await.map(Reply::Result),
        Method::TasksCancel => methods::tasks_cancel::run(&call).await.map(Reply::Result),
        Method::SubscriptionsListen => methods::subscriptions_listen::run(&call).await.map(Reply::Stream),
        Method::PromptsList => methods::prompts_list::run(&call).await.map(Reply::Result),
        Method::PromptsGet => methods::prompts_get::run(&call).await,
        Method::ResourcesList => methods::resources_list::resources(&call).await.map(Reply::Result),
        Method::ResourcesTemplatesList => methods::resources_list::templates(&call).await.map(Reply::Result),
        Method::ResourcesRead => methods::resources_read::run(&call).await,
        Method::CompletionComplete => methods::completion_complete::run(&call).await,
    }
}

/// Steps 1–6 of the ladder: nothing here reads Redis.
pub(crate) fn admit<'m>(
    strict_headers: bool,
    headers: &HeaderMap,
    message: &Incoming<'m>,
) -> Result<(Method, Params<'m>, ValidMeta), RpcError> {
    let method = Method::route(&message.method)?;
    let params = message.params()?;
    let meta = meta::validate(params.meta, |version| mirror::check(headers, version, method, &params, strict_headers))?;
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
pub(crate) fn task_id(params: &Params<'_>) -> Result<TaskId, RpcError> {
    let id = params::text(params.task_id).as_deref().and_then(TaskId::parse).ok_or_else(task_not_found)?;
    tracing::Span::current().record("task_id", id.as_str());
    Ok(id)
}

/// How long a new task lives, how often it may be polled, and how it starts.
pub(crate) struct TaskShape<'a> {
    /// The worker pool whose queue the task goes on: the catalogue's route for the tool.
    pub(crate) pool: &'a str,
    pub(crate) ttl_ms: u64,
    pub(crate) poll_interval_ms: u64,
    pub(crate) status_message: Option<&'a str>,
    /// A keyed create's fingerprint (`idempotency::fingerprint`); `None` without a key.
    pub(crate) fingerprint: Option<&'a str>,
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
    arguments: &str,
    shape: TaskShape<'_>,
    gathered: &crate::mrtr::Gathered,
    durability: Durability,
) -> Result<i64, GatewayError> {
    let state = call.state;
    let answers: Vec<(String, String)> = gathered.answers.iter().map(|(k, v)| (k.clone(), v.to_string())).collect();
    let (capabilities, declares_tasks) = taskgate_shared::store::stored_capabilities(&call.meta.capabilities);
    // The worker's span joins the trace as a child of this request's span when traces are
    // exported; otherwise the client's own context is passed on.
    let traceparent = trace::traceparent_of(&tracing::Span::current()).or_else(|| client_traceparent(call));
    let owner = call.principal.owner();
    let task = taskgate_shared::store::NewTask {
        id,
        owner: &owner,
        tool,
        pool: shape.pool,
        arguments,
        ttl_ms: shape.ttl_ms,
        poll_interval_ms: shape.poll_interval_ms,
        status_message: shape.status_message,
        traceparent: traceparent.as_deref(),
        client_capabilities: &capabilities,
        declares_tasks,
        answers: &answers,
        tool_state: gathered.resume.as_deref(),
        counted: counts_active(state),
        history: state.config.console.is_some(),
        fingerprint: shape.fingerprint,
        weight: state.config.tenant_weights.get(&owner.tenant).copied().unwrap_or(1.0),
    };
    tracing::Span::current().record("task_id", id.as_str());
    let replicas = match durability {
        Durability::Replicated => state.config.durability_replicas,
        Durability::Primary => 0,
    };
    let written = if replicas == 0 {
        state.store.create_task(task).await.map(|created| (created, 0))
    } else {
        state.store.create_task_durable(task, replicas, state.config.durability_timeout).await
    };
    let created = match written {
        Ok((created, acked)) if acked >= replicas => created,
        Ok((_, acked)) => {
            tracing::error!(task_id = %id, wanted = replicas, acked, "create not acknowledged by replicas; abandoning it");
            abandon_task(state, id, &owner, "The task could not be made durable.").await;
            let err = RpcError::new(ErrorKind::Internal, "the task could not be made durable; it was not created");
            return Err(GatewayError::Method(err));
        }
        Err(taskgate_shared::store::StoreError::KeyReused) => return Err(idempotency::reused().into()),
        // A keyed create is never abandoned: the task may be the one an earlier request with the
        // same key made (this one a retry), and a retry of this one finds it by its key.
        Err(err) if shape.fingerprint.is_some() => return Err(GatewayError::Storage(err)),
        Err(err) => {
            // The script may or may not have run: abandon whatever it left.
            abandon_task(state, id, &owner, "The task could not be created.").await;
            return Err(GatewayError::Storage(err));
        }
    };
    crate::metrics::METRICS.tasks_created.with_label_values(&[tool]).inc();
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
