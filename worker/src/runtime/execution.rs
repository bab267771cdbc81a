//! Runs one claimed task to an outcome and writes it, fenced.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use taskgate_shared::protocol::RpcError;
use taskgate_shared::store::{Claim, Finish, Lease, Parked};
use taskgate_shared::task::TaskId;

use super::Shared;
use crate::tool::{ToolContext, ToolError, ToolOutput};

const CANCELLED: &str = "Cancellation was acknowledged by the worker.";

/// How a run ended, before it is written.
enum Outcome {
    Done(Result<ToolOutput, ToolError>),
    Panicked,
    /// A cancel was requested and the tool did not stop within the grace period.
    CancelIgnored,
    LeaseLost,
    /// Drain grace over: hand the task back.
    Release,
}

pub(super) async fn run(shared: Arc<Shared>, claim: Claim) {
    let task_id = claim.task_id.clone();
    let held = shared.held.insert(task_id.clone(), claim.fence);
    if claim.cancel_requested {
        held.cancel.cancel();
    }
    tracing::info!(task_id = %task_id, tool = %claim.tool, fence = claim.fence, "claimed");
    let outcome = match shared.tools.get(&claim.tool).cloned() {
        None => Outcome::Done(Err(ToolError::Rpc(RpcError::new(
            taskgate_shared::protocol::ErrorKind::Internal,
            format!("no worker serves tool {:?}", claim.tool),
        )))),
        Some(tool) => {
            let arguments: Value = serde_json::from_str(&claim.arguments).unwrap_or(Value::Null);
            let answers: HashMap<String, Value> =
                claim.answers.iter().filter_map(|(k, v)| Some((k.clone(), serde_json::from_str(v).ok()?))).collect();
            let ctx = Arc::new(ToolContext::new(
                task_id.clone(),
                claim.fence,
                shared.worker_id.clone(),
                shared.store.clone(),
                answers,
                serde_json::from_str(&claim.client_capabilities).unwrap_or(Value::Null),
                held.cancel.clone(),
            ));
            let run_ctx = ctx.clone();
            let mut handle = tokio::spawn(async move { tool.call(arguments, &run_ctx).await });
            let grace = shared.config.cancel_grace();
            let outcome = tokio::select! {
                joined = &mut handle => match joined {
                    Ok(result) => Outcome::Done(result),
                    Err(err) if err.is_panic() => Outcome::Panicked,
                    Err(_) => Outcome::CancelIgnored,
                },
                () = held.lost.cancelled() => Outcome::LeaseLost,
                () = async { held.cancel.cancelled().await; tokio::time::sleep(grace).await } => Outcome::CancelIgnored,
                () = shared.drain_over.cancelled() => Outcome::Release,
            };
            handle.abort();
            if let Outcome::Done(Err(ToolError::Suspend)) = outcome {
                if park(&shared, &task_id, claim.fence, &ctx).await {
                    super::reaper::release_active(&shared, &claim.tenant, &task_id).await;
                }
                shared.held.remove(&task_id);
                return;
            }
            outcome
        }
    };
    if write(&shared, &task_id, claim.fence, outcome).await {
        super::reaper::release_active(&shared, &claim.tenant, &task_id).await;
    }
    shared.held.remove(&task_id);
}

/// Parks the task; `true` when it ended instead (cancelled, or failed on a reused key).
async fn park(shared: &Shared, task_id: &TaskId, fence: u64, ctx: &ToolContext) -> bool {
    let (pending, message) = ctx.take_pending();
    // Never park for input the task's creator cannot give: the task fails with -32021 instead.
    let capabilities = ctx.client_capabilities().as_object().cloned().unwrap_or_default();
    if let Err(err) =
        taskgate_shared::protocol::capabilities::check_input_requests(&capabilities, pending.iter().map(|(_, r)| r))
    {
        tracing::info!(task_id = %task_id, "the client did not declare the capability this input needs");
        return write(shared, task_id, fence, Outcome::Done(Err(ToolError::Rpc(err)))).await;
    }
    let requests: Vec<(String, String)> = pending.into_iter().map(|(k, r)| (k, r.to_string())).collect();
    let lease = Lease { task_id, worker: &shared.worker_id, fence };
    match shared.store.request_input(lease, message.as_deref(), &requests, CANCELLED).await {
        Ok(Parked::Parked) => {
            tracing::info!(task_id = %task_id, keys = requests.len(), "parked for input");
            false
        }
        Ok(Parked::CancelledInstead) => {
            tracing::info!(task_id = %task_id, "cancelled while asking for input");
            true
        }
        Ok(Parked::LeaseLost) => {
            tracing::warn!(task_id = %task_id, "lease lost before parking; nothing written");
            false
        }
        Ok(Parked::KeyReused(key)) => {
            tracing::error!(task_id = %task_id, key = %key, "tool asked an input key that was issued before");
            let err = RpcError::new(
                taskgate_shared::protocol::ErrorKind::Internal,
                format!("tool reused input key {key:?}; keys are unique over a task's lifetime"),
            );
            write(shared, task_id, fence, Outcome::Done(Err(ToolError::Rpc(err)))).await
        }
        Err(err) => {
            tracing::error!(task_id = %task_id, error = %err, "parking failed; the lease will expire and the task rerun");
            false
        }
    }
}

/// Writes the outcome; `true` when the task is now terminal.
async fn write(shared: &Shared, task_id: &TaskId, fence: u64, outcome: Outcome) -> bool {
    let lease = Lease { task_id, worker: &shared.worker_id, fence };
    let store = &shared.store;
    let written = match outcome {
        Outcome::Done(Ok(output)) => {
            let (result, message) = output.into_stored();
            let result = result.to_string();
            let cap = shared.config.max_result_bytes;
            if result.len() > cap {
                // Never stored in part: the task fails with the reason instead.
                tracing::warn!(task_id = %task_id, bytes = result.len(), cap, "result over the size cap");
                let error = RpcError::new(
                    taskgate_shared::protocol::ErrorKind::Internal,
                    format!("the tool's result was {} bytes, over the {cap}-byte limit", result.len()),
                );
                let error_json = error.to_value().to_string();
                store
                    .finish(lease, Finish::Failed { error: &error_json, message: Some("The result was too large.") })
                    .await
            } else {
                store.finish(lease, Finish::Completed { result: &result, message: message.as_deref() }).await
            }
        }
        Outcome::Done(Err(ToolError::Rpc(err))) => {
            let error = err.to_value().to_string();
            store.finish(lease, Finish::Failed { error: &error, message: Some(&err.message) }).await
        }
        Outcome::Panicked => {
            tracing::error!(task_id = %task_id, "tool panicked");
            let error =
                RpcError::new(taskgate_shared::protocol::ErrorKind::Internal, "internal error: the tool panicked");
            let error_json = error.to_value().to_string();
            store.finish(lease, Finish::Failed { error: &error_json, message: Some("The tool failed.") }).await
        }
        Outcome::Done(Err(ToolError::Cancelled(message))) => {
            let message = message.unwrap_or_else(|| CANCELLED.to_owned());
            store.finish(lease, Finish::Cancelled { message: &message }).await
        }
        Outcome::CancelIgnored => store.finish(lease, Finish::Cancelled { message: CANCELLED }).await,
        Outcome::Release => {
            return match store.release(lease, CANCELLED).await {
                Ok(Some(ended)) => {
                    tracing::info!(task_id = %task_id, fence, "lease released");
                    ended
                }
                Ok(None) => false,
                Err(err) => {
                    tracing::error!(task_id = %task_id, error = %err, "release failed; the lease will expire");
                    false
                }
            };
        }
        Outcome::Done(Err(ToolError::LeaseLost)) | Outcome::LeaseLost => {
            tracing::warn!(task_id = %task_id, fence, "lease lost; result dropped");
            return false;
        }
        Outcome::Done(Err(ToolError::Suspend)) => return false,
    };
    match written {
        Ok(true) => {
            tracing::info!(task_id = %task_id, fence, "outcome written");
            true
        }
        Ok(false) => {
            tracing::warn!(task_id = %task_id, fence, "write refused by fencing: lease lost");
            false
        }
        Err(err) => {
            tracing::error!(task_id = %task_id, error = %err, "outcome not written; the lease will expire and the task rerun");
            false
        }
    }
}
