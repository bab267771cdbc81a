//! Runs one claimed task to an outcome and writes it, fenced.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use taskgate_shared::protocol::RpcError;
use taskgate_shared::store::{Claim, Finish, Lease, Parked, Released, owner_digest};
use taskgate_shared::task::{Owner, TaskId};
use taskgate_shared::telemetry::trace;
use tracing::Instrument as _;

use super::Shared;
use super::held::HeldTask;
use super::resend::Resend;
use crate::metrics::METRICS;
use crate::tool::{ToolContext, ToolError, ToolOutput};

const CANCELLED: &str = "Cancellation was acknowledged by the worker.";

/// How a run ended, before it is written.
enum Outcome {
    Done(Result<ToolOutput, ToolError>),
    Panicked,
    /// A cancel was requested and the tool did not stop within the grace period.
    CancelIgnored,
    LeaseLost,
    /// No renewal has held for so long that the lease may have run out: stop, write nothing.
    LeaseUnknown,
    /// Drain grace over: hand the task back.
    Release,
}

impl Outcome {
    /// The `outcome` label of the tool's run time.
    fn label(&self) -> &'static str {
        match self {
            Self::Done(Ok(_)) => "completed",
            Self::Done(Err(ToolError::Rpc(_))) | Self::Panicked => "failed",
            Self::Done(Err(ToolError::Cancelled(_))) | Self::CancelIgnored => "cancelled",
            Self::Done(Err(ToolError::Suspend)) => "input_required",
            Self::Done(Err(ToolError::LeaseLost)) | Self::LeaseLost | Self::LeaseUnknown => "lease_lost",
            Self::Release => "released",
        }
    }
}

/// Runs the claimed task inside its execution span, which joins the trace of the request that
/// created the task (the record's traceparent).
pub(super) async fn run(shared: Arc<Shared>, claim: Claim, sent: Instant) {
    let span = tracing::info_span!(
        "task.execute",
        otel.name = "task.execute",
        otel.kind = "consumer",
        task_id = %claim.task_id,
        tool = %claim.tool,
        fence = claim.fence,
    );
    if let Some(parent) = claim.traceparent.as_deref().and_then(trace::parse_traceparent) {
        trace::set_parent(&span, &parent);
    }
    execute(shared, claim, sent).instrument(span).await
}

/// `sent`: when the claim that took the lease was sent.
async fn execute(shared: Arc<Shared>, claim: Claim, sent: Instant) {
    let started = Instant::now();
    let task_id = claim.task_id.clone();
    let (lease, margin) = (shared.config.lease, shared.config.lease_margin());
    let owner = Owner { tenant: claim.owner_tenant.clone(), principal: claim.owner_principal.clone() };
    let outbox: Arc<str> = owner_digest(&owner).into();
    let Some(held) = shared.held.insert(task_id.clone(), claim.fence, outbox, sent, lease, margin) else {
        // The same claim answered twice (a re-sent claim whose first reply came late, and a
        // takeover of the same entry): this run is already going.
        tracing::warn!(task_id = %task_id, fence = claim.fence, "claim already running here; not run twice");
        return;
    };
    if claim.cancel_requested {
        held.cancel.cancel();
    }
    tracing::info!(task_id = %task_id, tool = %claim.tool, fence = claim.fence, "claimed");
    let outcome = match shared.served.get(&claim.tool) {
        // Claims retried until the lease's validity was used up: start nothing.
        Some(_) if held.validity_passed() => Outcome::LeaseUnknown,
        None => unserved(&shared, &claim.tool).await,
        Some(tool) => {
            let arguments: Value = serde_json::from_str(&claim.arguments).unwrap_or(Value::Null);
            let ctx = Arc::new(ToolContext::for_claim(
                &claim,
                shared.worker_id.clone(),
                shared.store.clone(),
                held.cancel.clone(),
                held.answered.clone(),
            ));
            let run_ctx = ctx.clone();
            let mut handle =
                tokio::spawn(async move { tool.call(arguments, &run_ctx).await }.instrument(tracing::Span::current()));
            let grace = shared.config.cancel_grace;
            let outcome = tokio::select! {
                joined = &mut handle => match joined {
                    Ok(result) => Outcome::Done(result),
                    Err(err) if err.is_panic() => Outcome::Panicked,
                    Err(_) => Outcome::CancelIgnored,
                },
                () = held.lost.cancelled() => Outcome::LeaseLost,
                () = held.validity_ends() => Outcome::LeaseUnknown,
                () = async { held.cancel.cancelled().await; tokio::time::sleep(grace).await } => Outcome::CancelIgnored,
                () = shared.drain_over.cancelled() => Outcome::Release,
            };
            handle.abort();
            held.ending.cancel();
            METRICS.tool_run(&claim.tool, outcome.label(), started.elapsed());
            if let Outcome::Done(Err(ToolError::Suspend)) = outcome {
                park(&shared, &held, &task_id, claim.fence, &ctx).await;
                shared.held.remove(&task_id, claim.fence);
                return;
            }
            outcome
        }
    };
    held.ending.cancel();
    // The store counts the transition, times the run and frees the task's active-task slot.
    write(&shared, &held, &task_id, claim.fence, outcome).await;
    shared.held.remove(&task_id, claim.fence);
}

/// A claimed tool this worker does not serve. Workers of a pool should all serve the same
/// tools, but during a rolling deploy (or with one worker misconfigured) one may claim a task
/// it cannot run: it hands the task back for another worker of its pool rather than failing
/// it. Only when no live worker of this pool serves the tool does the task fail: a task is
/// never moved to another pool's queue, and no other pool's worker would claim it here.
async fn unserved(shared: &Shared, tool: &str) -> Outcome {
    let pool = &shared.config.pool;
    match shared.store.tool_is_live(tool, pool).await {
        Ok(false) => {
            tracing::error!(tool, pool, "claimed a tool that no live worker of this pool serves");
            Outcome::Done(Err(ToolError::Rpc(RpcError::new(
                taskgate_shared::protocol::ErrorKind::Internal,
                format!("no worker of pool {pool:?} serves tool {tool:?}"),
            ))))
        }
        live => {
            if let Err(err) = live {
                tracing::warn!(tool, error = %err, "could not read the catalogue; releasing anyway");
            }
            tracing::warn!(tool, "claimed a tool this worker does not serve: releasing it for another worker");
            METRICS.released_unserved.with_label_values(&[tool]).inc();
            // A short pause, so that a task this worker keeps winning back cannot spin.
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            Outcome::Release
        }
    }
}

/// Parks the task, or ends it when it cannot be parked.
async fn park(shared: &Shared, held: &HeldTask, task_id: &TaskId, fence: u64, ctx: &ToolContext) {
    let crate::tool::Pending { requests: pending, message, state } = ctx.take_pending();
    if pending.is_empty() {
        // Parking with nothing to answer would strand the task: nobody could resume it.
        tracing::error!(task_id = %task_id, "the tool suspended without asking for any input");
        let err = RpcError::new(
            taskgate_shared::protocol::ErrorKind::Internal,
            "the tool suspended without asking for any input, so nothing could resume it",
        );
        write(shared, held, task_id, fence, Outcome::Done(Err(ToolError::Rpc(err)))).await;
        return;
    }
    // Never park for input the task's creator cannot give: the task fails with -32021 instead.
    let capabilities = ctx.client_capabilities().as_object().cloned().unwrap_or_default();
    if let Err(err) =
        taskgate_shared::protocol::capabilities::check_input_requests(&capabilities, pending.iter().map(|(_, r)| r))
    {
        tracing::info!(task_id = %task_id, "the client did not declare the capability this input needs");
        write(shared, held, task_id, fence, Outcome::Done(Err(ToolError::Rpc(err)))).await;
        return;
    }
    let requests: Vec<(String, String)> = pending.into_iter().map(|(k, r)| (k, r.to_string())).collect();
    let lease = Lease { task_id, worker: &shared.worker_id, fence, outbox: Some(&*held.outbox) };
    let state = state.map(|s| s.to_string());
    match shared.store.request_input(lease, message.as_deref(), &requests, state.as_deref(), CANCELLED).await {
        Ok(Parked::Parked) => tracing::info!(task_id = %task_id, keys = requests.len(), "parked for input"),
        Ok(Parked::CancelledInstead) => tracing::info!(task_id = %task_id, "cancelled while asking for input"),
        Ok(Parked::LeaseLost) => {
            tracing::warn!(task_id = %task_id, "lease lost before parking; nothing written");
            METRICS.fenced_refusals.inc();
        }
        Ok(Parked::KeyReused(key)) => {
            tracing::error!(task_id = %task_id, key = %key, "tool asked an input key that was issued before");
            let err = RpcError::new(
                taskgate_shared::protocol::ErrorKind::Internal,
                format!("tool reused input key {key:?}; keys are unique over a task's lifetime"),
            );
            write(shared, held, task_id, fence, Outcome::Done(Err(ToolError::Rpc(err)))).await;
        }
        Err(err) => {
            tracing::error!(task_id = %task_id, error = %err, "parking failed; the lease will expire and the task rerun");
        }
    }
}

/// Writes a terminal outcome. One whose reply was lost (a timeout, a dropped connection, a
/// failover under way) may have been written, so it is sent again while the lease is known
/// valid: the script answers a replay by the same worker and token with "written", and the
/// store then does what follows a write (freeing the active-task slot). A result made just
/// before a failover is thus written on the new primary, not dropped for a rerun after the
/// lease.
async fn finish(
    shared: &Shared,
    held: &HeldTask,
    lease: Lease<'_>,
    outcome: Finish<'_>,
) -> Result<bool, taskgate_shared::store::StoreError> {
    // With the ends of the tasks finishing at the same time, in one script call.
    let ending = taskgate_shared::store::Ending::new(lease.task_id, lease.fence, &outcome);
    let span = tracing::info_span!("task.finish");
    if let Some(written) = shared.finisher.finish(ending).instrument(span).await {
        return Ok(written);
    }
    let store = &shared.store;
    let mut resend = Resend::new("finish");
    loop {
        let err = match store.finish(lease, outcome.clone()).await {
            Err(err) => err,
            settled => return settled,
        };
        if !resend.again(lease.task_id, &err, held.valid_until()).await {
            return Err(err);
        }
    }
}

/// Writes the outcome.
async fn write(shared: &Shared, held: &HeldTask, task_id: &TaskId, fence: u64, outcome: Outcome) {
    let lease = Lease { task_id, worker: &shared.worker_id, fence, outbox: Some(&*held.outbox) };
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
                finish(
                    shared,
                    held,
                    lease,
                    Finish::Failed { error: &error_json, message: Some("The result was too large.") },
                )
                .await
            } else {
                finish(shared, held, lease, Finish::Completed { result: &result, message: message.as_deref() }).await
            }
        }
        Outcome::Done(Err(ToolError::Rpc(err))) => {
            let error = err.to_value().to_string();
            let cap = shared.config.max_result_bytes;
            if error.len() > cap {
                // Bounded as results are: an error's message and data are stored and read too.
                tracing::warn!(task_id = %task_id, bytes = error.len(), cap, "error over the size cap");
                let error = RpcError::new(
                    taskgate_shared::protocol::ErrorKind::Internal,
                    format!("the tool's error was {} bytes, over the {cap}-byte limit", error.len()),
                );
                let error_json = error.to_value().to_string();
                finish(
                    shared,
                    held,
                    lease,
                    Finish::Failed { error: &error_json, message: Some("The error was too large.") },
                )
                .await
            } else {
                finish(shared, held, lease, Finish::Failed { error: &error, message: Some(&err.message) }).await
            }
        }
        Outcome::Panicked => {
            tracing::error!(task_id = %task_id, "tool panicked");
            let error =
                RpcError::new(taskgate_shared::protocol::ErrorKind::Internal, "internal error: the tool panicked");
            let error_json = error.to_value().to_string();
            finish(shared, held, lease, Finish::Failed { error: &error_json, message: Some("The tool failed.") }).await
        }
        Outcome::Done(Err(ToolError::Cancelled(message))) => {
            let message = message.unwrap_or_else(|| CANCELLED.to_owned());
            finish(shared, held, lease, Finish::Cancelled { message: &message }).await
        }
        Outcome::CancelIgnored => finish(shared, held, lease, Finish::Cancelled { message: CANCELLED }).await,
        Outcome::Release => {
            match store.release(lease, &shared.config.pool, CANCELLED).await {
                Ok(Released::Requeued) => tracing::info!(task_id = %task_id, fence, "lease released"),
                Ok(Released::Cancelled) => {}
                Ok(Released::Failed) => {
                    tracing::warn!(task_id = %task_id, fence, "stopping while holding a question: the task failed");
                }
                Ok(Released::LeaseLost) => METRICS.fenced_refusals.inc(),
                Err(err) => tracing::error!(task_id = %task_id, error = %err, "release failed; the lease will expire"),
            }
            return;
        }
        Outcome::Done(Err(ToolError::LeaseLost)) | Outcome::LeaseLost => {
            tracing::warn!(task_id = %task_id, fence, "lease lost; result dropped");
            return;
        }
        Outcome::LeaseUnknown => {
            // The tool was stopped; another worker takes the task once the lease has run out.
            tracing::warn!(task_id = %task_id, fence, "lease no longer known to be valid: tool stopped, nothing written");
            METRICS.leases_expired.inc();
            return;
        }
        Outcome::Done(Err(ToolError::Suspend)) => return,
    };
    match written {
        Ok(true) => tracing::info!(task_id = %task_id, fence, "outcome written"),
        Ok(false) => {
            tracing::warn!(task_id = %task_id, fence, "write refused by fencing: lease lost");
            METRICS.fenced_refusals.inc();
        }
        Err(err) => {
            tracing::error!(task_id = %task_id, error = %err, "outcome not written; the lease will expire and the task rerun");
        }
    }
}
