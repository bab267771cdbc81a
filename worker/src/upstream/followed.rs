//! A task an upstream server created for a call (`resultType: "task"`), followed to its end:
//! `tasks/get` at the server's poll interval, its status as the task's status, its
//! `input_required` as taskgate's own (one park per round, keys `t<round>.<key>`), the answers
//! sent with `tasks/update`, a cancel passed on with `tasks/cancel`.
//!
//! The server's task id is saved on the taskgate task the moment it is known, so a run after a
//! crash follows the same task instead of calling again; it is never shown to clients, and it
//! is used only with the server that issued it.

use std::time::Duration;

use rmcp::model::{
    CancelTaskParams, ClientCapabilities, ClientRequest, ExtensionCapabilities, GetTaskParams, GetTaskResult,
    InputResponses, JsonObject, Request, RequestMetaObject, ServerResult, TASKS_EXTENSION_ID, TaskPayload,
    UpdateTaskParams,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, ServiceError};
use serde_json::Value;
use taskgate_shared::protocol::{ErrorKind, RpcError};

use super::connection::Upstream;
use super::errors;
use super::rounds::{self, Saved};
use crate::tool::{ToolContext, ToolError, ToolOutput};

/// The `_meta` key that ties a result to the server's task.
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// Bounds on the server's suggested poll interval.
const POLL_MIN_MS: u64 = 100;
const POLL_MAX_MS: u64 = 10_000;
const POLL_DEFAULT_MS: u64 = 1_000;

/// Rounds of input one followed task may ask.
const MAX_ROUNDS: u32 = 32;

/// The tool that called, as following needs it: which server and tool, and its limits.
pub(super) struct Caller<'a> {
    pub(super) upstream: &'a Upstream,
    /// The upstream's own name for the tool.
    pub(super) remote: &'a str,
    /// How long one request may go without an answer.
    pub(super) timeout: Duration,
    /// The hard limit of the whole call, following included.
    pub(super) max_timeout: Duration,
    pub(super) cancel_grace: Duration,
}

/// Where following starts: the server's task, the rounds of input it asked so far, every key
/// it asked (its keys are unique over its task's life, so an answered one shown again is
/// stale), and the answers to send first (after a park).
pub(super) struct Follow {
    pub(super) task: String,
    pub(super) round: u32,
    pub(super) asked: Vec<String>,
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
        asked: Vec<String>,
    ) -> Result<Self, ToolError> {
        if server != upstream {
            return Err(ToolError::Rpc(RpcError::new(
                ErrorKind::Internal,
                "the task was following a task of another upstream server; it cannot go on here",
            )));
        }
        let answers = if keys.is_empty() { None } else { Some(rounds::answers(ctx, 't', round, keys)?) };
        Ok(Self { task, round, asked, answers })
    }
}

pub(super) async fn follow(
    tool: &Caller<'_>,
    peer: &Peer<RoleClient>,
    ctx: &ToolContext,
    mut follow: Follow,
) -> Result<ToolOutput, ToolError> {
    let upstream = tool.upstream.name();
    let timeout = tool.timeout;
    // The hard limit of one call holds for following too.
    let hard = tokio::time::Instant::now() + tool.max_timeout;
    if let Some(answers) = follow.answers.take() {
        // Answers the server already has (a run that died after sending them) are ignored by
        // it; an error is logged and following goes on, since the task's state decides.
        let update =
            ClientRequest::UpdateTaskRequest(Request::new(UpdateTaskParams::new(follow.task.clone(), answers)));
        tokio::select! {
            sent = send(peer, update, timeout) => if let Err(err) = sent {
                tracing::warn!(upstream, tool = %tool.remote, task_id = %ctx.task_id(), error = %err, "the server refused the answers");
            },
            () = ctx.cancelled() => return Err(cancel(tool, peer, ctx, &follow.task).await),
        }
    }
    let mut last_message: Option<String> = None;
    loop {
        let got = tokio::select! {
            got = get(peer, &follow.task, timeout) => got.map_err(|err| errors::failure(tool.upstream, tool.remote, err))?,
            () = ctx.cancelled() => return Err(cancel(tool, peer, ctx, &follow.task).await),
            () = tokio::time::sleep_until(hard) => return Err(too_long(tool, peer, ctx, &follow.task).await),
        };
        let message = got.task.task.status_message.as_deref().map(super::bounds::status_text);
        match got.task.payload {
            TaskPayload::Working => {}
            TaskPayload::InputRequired { mut input_requests } => {
                // Requests already answered may show until the server has taken the answers.
                input_requests.retain(|key, _| !follow.asked.contains(key));
                if !input_requests.is_empty() {
                    follow.round += 1;
                    if follow.round > MAX_ROUNDS {
                        let _ = cancel(tool, peer, ctx, &follow.task).await;
                        return Err(ToolError::Rpc(RpcError::new(
                            ErrorKind::Internal,
                            format!("upstream tool {:?} asked for input more than {MAX_ROUNDS} times", tool.remote),
                        )));
                    }
                    let keys: Vec<String> = input_requests.keys().cloned().collect();
                    let (ours, status) = match rounds::our_requests(tool.remote, 't', follow.round, input_requests) {
                        Ok(ours) => ours,
                        Err(err) => return Err(abandon(tool, peer, ctx, &follow.task, err).await),
                    };
                    follow.asked.extend(keys.iter().cloned());
                    let saved = Saved::Task {
                        server: upstream.to_owned(),
                        task: follow.task,
                        round: follow.round,
                        keys,
                        asked: follow.asked,
                    };
                    let saved = serde_json::to_value(saved).unwrap_or(Value::Null);
                    return Err(ctx.suspend_saving(ours, &status, saved));
                }
            }
            TaskPayload::Completed { mut result } => {
                // The result's tie to the server's task stays with the server.
                if let Some(Value::Object(meta)) = result.get_mut("_meta") {
                    meta.remove(RELATED_TASK);
                }
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
            () = tokio::time::sleep(Duration::from_millis(wait)) => {}
            () = ctx.cancelled() => return Err(cancel(tool, peer, ctx, &follow.task).await),
            () = tokio::time::sleep_until(hard) => return Err(too_long(tool, peer, ctx, &follow.task).await),
        }
    }
}

/// Stops the server's task when this run cannot follow it (its id could not be saved), and
/// returns why.
pub(super) async fn abandon(
    tool: &Caller<'_>,
    peer: &Peer<RoleClient>,
    ctx: &ToolContext,
    task: &str,
    why: ToolError,
) -> ToolError {
    let _ = cancel(tool, peer, ctx, task).await;
    why
}

/// The hard limit passed: the server's task is cancelled and the call fails.
async fn too_long(tool: &Caller<'_>, peer: &Peer<RoleClient>, ctx: &ToolContext, task: &str) -> ToolError {
    let _ = cancel(tool, peer, ctx, task).await;
    ToolError::Rpc(errors::over_limit(tool.remote, tool.max_timeout))
}

/// Passes a cancel on (`tasks/cancel`), waiting for the server at most the cancel grace.
async fn cancel(tool: &Caller<'_>, peer: &Peer<RoleClient>, ctx: &ToolContext, task: &str) -> ToolError {
    tracing::info!(upstream = %tool.upstream.name(), tool = %tool.remote, task_id = %ctx.task_id(), "cancelling the upstream task");
    let request = ClientRequest::CancelTaskRequest(Request::new(CancelTaskParams::new(task.to_owned())));
    if send(peer, request, tool.cancel_grace).await.is_err() {
        tracing::warn!(upstream = %tool.upstream.name(), task_id = %ctx.task_id(), "the upstream task's cancel was not acknowledged");
    }
    ToolError::Cancelled(None)
}

/// Sends a `tasks/*` request declaring the Tasks extension, as the server requires of them,
/// waiting at most `timeout` for the answer.
async fn send(
    peer: &Peer<RoleClient>,
    request: ClientRequest,
    timeout: Duration,
) -> Result<ServerResult, ServiceError> {
    let mut meta = RequestMetaObject::default();
    let mut extensions = ExtensionCapabilities::new();
    extensions.insert(TASKS_EXTENSION_ID.to_owned(), JsonObject::new());
    let mut capabilities = ClientCapabilities::default();
    capabilities.extensions = Some(extensions);
    meta.set_client_capabilities(capabilities);
    let mut options = PeerRequestOptions::with_timeout(timeout);
    options.meta = Some(meta);
    peer.send_request_with_option(request, options).await?.await_response().await
}

async fn get(peer: &Peer<RoleClient>, task: &str, timeout: std::time::Duration) -> Result<GetTaskResult, ServiceError> {
    let request = ClientRequest::GetTaskRequest(Request::new(GetTaskParams::new(task.to_owned())));
    match send(peer, request, timeout).await? {
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
