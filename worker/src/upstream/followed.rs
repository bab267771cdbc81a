//! A task an upstream server created for a call (`resultType: "task"`), followed to its end:
//! `tasks/get` at the server's poll interval, its status as the task's status, its
//! `input_required` as taskgate's own (one park per round, keys `t<round>.<key>`), the answers
//! sent with `tasks/update`, a cancel passed on with `tasks/cancel`.
//!
//! The server's task id is saved on the taskgate task the moment it is known, so a run after a
//! crash follows the same task instead of calling again; it is never shown to clients, and it
//! is used only with the server that issued it.

use rmcp::model::{
    CancelTaskParams, ClientCapabilities, ClientRequest, ExtensionCapabilities, GetTaskParams, GetTaskResult,
    InputResponses, JsonObject, Request, RequestMetaObject, ServerResult, TASKS_EXTENSION_ID, TaskPayload,
    UpdateTaskParams,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, ServiceError};
use serde_json::Value;
use taskgate_shared::protocol::{ErrorKind, RpcError};

use super::rounds::{self, Saved};
use super::tool::UpstreamTool;
use crate::tool::{ToolContext, ToolError, ToolOutput};

/// Bounds on the server's suggested poll interval.
const POLL_MIN_MS: u64 = 100;
const POLL_MAX_MS: u64 = 10_000;
const POLL_DEFAULT_MS: u64 = 1_000;

/// Where following starts: the server's task, the rounds of input it asked so far, and the
/// answers to send first (after a park).
pub(super) struct Follow {
    pub(super) task: String,
    pub(super) round: u32,
    pub(super) answers: Option<InputResponses>,
}

impl Follow {
    /// Continues from what a park or a save left; `None` when it was another server's task.
    pub(super) fn resume(
        ctx: &ToolContext,
        upstream: &str,
        server: String,
        task: String,
        round: u32,
        keys: &[String],
    ) -> Result<Self, ToolError> {
        if server != upstream {
            return Err(ToolError::Rpc(RpcError::new(
                ErrorKind::Internal,
                "the task was following a task of another upstream server; it cannot go on here",
            )));
        }
        let answers = if keys.is_empty() { None } else { Some(rounds::answers(ctx, 't', round, keys)?) };
        Ok(Self { task, round, answers })
    }
}

pub(super) async fn follow(
    tool: &UpstreamTool,
    peer: &Peer<RoleClient>,
    ctx: &ToolContext,
    mut follow: Follow,
) -> Result<ToolOutput, ToolError> {
    let upstream = tool.upstream.name();
    if let Some(answers) = follow.answers.take() {
        // Answers the server already has (a run that died after sending them) are ignored by
        // it; an error is logged and following goes on, since the task's state decides.
        let update =
            ClientRequest::UpdateTaskRequest(Request::new(UpdateTaskParams::new(follow.task.clone(), answers)));
        if let Err(err) = send(peer, update).await {
            tracing::warn!(upstream, tool = %tool.remote, task_id = %ctx.task_id(), error = %err, "the server refused the answers");
        }
    }
    let mut last_message: Option<String> = None;
    loop {
        let got = tokio::select! {
            got = get(peer, &follow.task) => got.map_err(|err| tool.failure(err))?,
            () = ctx.cancelled() => return Err(cancel(tool, peer, ctx, &follow.task).await),
        };
        let message = got.task.task.status_message.clone();
        match got.task.payload {
            TaskPayload::Working => {}
            TaskPayload::InputRequired { input_requests } => {
                follow.round += 1;
                let keys: Vec<String> = input_requests.keys().cloned().collect();
                let (ours, status) = rounds::our_requests(&tool.remote, 't', follow.round, input_requests)?;
                let saved = Saved::Task { server: upstream.to_owned(), task: follow.task, round: follow.round, keys };
                let saved = serde_json::to_value(saved).unwrap_or(Value::Null);
                return Err(ctx.suspend_saving(ours, &status, saved));
            }
            TaskPayload::Completed { result } => {
                return Ok(ToolOutput { result: Value::Object(result), status_message: None });
            }
            TaskPayload::Failed { error } => return Err(ToolError::Rpc(rpc_error(&error))),
            TaskPayload::Cancelled => {
                return Err(ToolError::Cancelled(Some("The upstream server cancelled its task.".into())));
            }
            // A status this worker does not know yet: keep following.
            _ => {}
        }
        if message.is_some() && message != last_message {
            if let Some(message) = &message {
                ctx.set_status(message).await?;
            }
            last_message = message;
        }
        let wait = got.task.task.poll_interval_ms.unwrap_or(POLL_DEFAULT_MS).clamp(POLL_MIN_MS, POLL_MAX_MS);
        tokio::select! {
            () = tokio::time::sleep(std::time::Duration::from_millis(wait)) => {}
            () = ctx.cancelled() => return Err(cancel(tool, peer, ctx, &follow.task).await),
        }
    }
}

/// Stops the server's task when this run cannot follow it (its id could not be saved), and
/// returns why.
pub(super) async fn abandon(
    tool: &UpstreamTool,
    peer: &Peer<RoleClient>,
    ctx: &ToolContext,
    task: &str,
    why: ToolError,
) -> ToolError {
    let _ = cancel(tool, peer, ctx, task).await;
    why
}

/// Passes a cancel on (`tasks/cancel`), waiting for the server at most the cancel grace.
async fn cancel(tool: &UpstreamTool, peer: &Peer<RoleClient>, ctx: &ToolContext, task: &str) -> ToolError {
    tracing::info!(upstream = %tool.upstream.name(), tool = %tool.remote, task_id = %ctx.task_id(), "cancelling the upstream task");
    let request = ClientRequest::CancelTaskRequest(Request::new(CancelTaskParams::new(task.to_owned())));
    let sent = tokio::time::timeout(tool.cancel_grace, send(peer, request)).await;
    if !matches!(sent, Ok(Ok(_))) {
        tracing::warn!(upstream = %tool.upstream.name(), task_id = %ctx.task_id(), "the upstream task's cancel was not acknowledged");
    }
    ToolError::Cancelled(None)
}

/// Sends a `tasks/*` request declaring the Tasks extension, as the server requires of them.
async fn send(peer: &Peer<RoleClient>, request: ClientRequest) -> Result<ServerResult, ServiceError> {
    let mut meta = RequestMetaObject::default();
    let mut extensions = ExtensionCapabilities::new();
    extensions.insert(TASKS_EXTENSION_ID.to_owned(), JsonObject::new());
    let mut capabilities = ClientCapabilities::default();
    capabilities.extensions = Some(extensions);
    meta.set_client_capabilities(capabilities);
    let mut options = PeerRequestOptions::no_options();
    options.meta = Some(meta);
    peer.send_request_with_option(request, options).await?.await_response().await
}

async fn get(peer: &Peer<RoleClient>, task: &str) -> Result<GetTaskResult, ServiceError> {
    match send(peer, ClientRequest::GetTaskRequest(Request::new(GetTaskParams::new(task.to_owned())))).await? {
        ServerResult::GetTaskResult(got) => Ok(got),
        _ => Err(ServiceError::UnexpectedResponse),
    }
}

/// The server's JSON-RPC error object as the task's error.
fn rpc_error(error: &serde_json::Map<String, Value>) -> RpcError {
    let code = error.get("code").and_then(Value::as_i64).unwrap_or(-32603);
    let message = error.get("message").and_then(Value::as_str).unwrap_or("the upstream task failed").to_owned();
    let mut rpc = RpcError::new(ErrorKind::from_code(code), message);
    if let Some(data) = error.get("data") {
        rpc = rpc.with_data(data.clone());
    }
    rpc
}
