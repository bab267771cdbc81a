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

mod binding;
mod complete_within;
mod create;
mod event_stream;
mod hidden;
pub(crate) mod hooks;
pub(crate) mod idempotency;
mod inline;
pub(crate) mod listen;
mod methods;
pub(crate) mod mirror;
pub(crate) mod occurrences;
mod pages;
mod related;
mod reply;

use axum::http::HeaderMap;
use serde_json::Value;
use taskgate_shared::protocol::method::Admission;
use taskgate_shared::protocol::{Incoming, Method, Params, RpcError, ValidMeta, meta, params};

use taskgate_shared::task::TaskId;
use taskgate_shared::telemetry::trace;

pub(crate) use create::{Durability, TaskShape, abandon_task, write_task};
pub(crate) use reply::{Encoded, Notice, NoticeParams, Reply, Stream, StreamItem};

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
        admit(state.config.headers.strict, headers, message).map_err(GatewayError::Envelope)?;
    if method.admission() == Admission::Request {
        crate::limits::admit_request(state, &principal).await?;
    }
    let id = message.id.as_ref().unwrap_or(&Value::Null);
    let call = Call { state, headers, principal, meta, params: &params, id };
    // Every method but `tasks/get` runs boxed. The route boxes this future whole, moving it
    // into place, and a future is as large as the largest state of any method it can run: a
    // `tasks/get` paid for a copy of `tools/call`'s and the streams' state (kilobytes) on every
    // request. Boxed, each costs one allocation the size of its own future, on paths that go
    // to Redis anyway, and the hot path moves only what it uses.
    match method {
        Method::TasksGet => methods::tasks_get::run(&call).await.map(Reply::Encoded),
        Method::Discover => Ok(Reply::Result(Box::pin(methods::discover::run(&call)).await)),
        Method::ToolsList => Box::pin(methods::tools_list::run(&call)).await.map(Reply::Result),
        Method::ToolsCall => Box::pin(methods::tools_call::run(&call)).await,
        Method::TasksUpdate => Box::pin(methods::tasks_update::run(&call)).await.map(Reply::Result),
        Method::TasksCancel => Box::pin(methods::tasks_cancel::run(&call)).await.map(Reply::Result),
        Method::SubscriptionsListen => Box::pin(methods::subscriptions_listen::run(&call)).await.map(Reply::Stream),
        Method::PromptsList => Box::pin(methods::prompts_list::run(&call)).await.map(Reply::Result),
        Method::PromptsGet => Box::pin(methods::prompts_get::run(&call)).await,
        Method::ResourcesList => Box::pin(methods::resources_list::resources(&call)).await.map(Reply::Result),
        Method::ResourcesTemplatesList => Box::pin(methods::resources_list::templates(&call)).await.map(Reply::Result),
        Method::ResourcesRead => Box::pin(methods::resources_read::run(&call)).await,
        Method::CompletionComplete => Box::pin(methods::completion_complete::run(&call)).await,
        Method::EventsSubscribe => Box::pin(methods::events_subscribe::run(&call)).await.map(Reply::Result),
        Method::EventsUnsubscribe => Box::pin(methods::events_unsubscribe::run(&call)).await.map(Reply::Result),
        Method::EventsList => methods::events_list::run(&call).map(Reply::Result),
        Method::EventsPoll => Box::pin(methods::events_poll::run(&call)).await.map(Reply::Result),
        Method::EventsStream => Box::pin(methods::events_stream::run(&call)).await.map(Reply::Stream),
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

/// The client's W3C trace context: `_meta.traceparent`, else the `traceparent` header; only
/// if well formed.
pub(crate) fn client_traceparent(call: &Call<'_>) -> Option<String> {
    call.meta
        .traceparent
        .as_deref()
        .or_else(|| call.headers.get("traceparent").and_then(|v| v.to_str().ok()))
        .and_then(trace::parse_traceparent)
}
