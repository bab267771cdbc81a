//! `tools/call`: validate against the tool's schema, then create a durable task.
//!
//! Creation is server-directed: the tool's execution policy decides, and a CreateTaskResult is
//! only ever sent to a request that declared the Tasks extension itself.

use serde_json::{Map, Value};
use taskgate_shared::protocol::{RpcError, result};
use taskgate_shared::store::NewTask;
use taskgate_shared::task::{Owner, Snapshot, TaskId, TaskStatus};
use taskgate_shared::tools::Execution;

use crate::mcp::{Call, storage_error};

pub(crate) async fn run(call: &Call<'_>) -> Result<Value, RpcError> {
    let unknown = || RpcError::invalid_params("unknown tool");
    let name = call.params.get("name").and_then(Value::as_str).ok_or_else(unknown)?;
    let tool = call.state.catalogue.lookup(name).await.ok_or_else(unknown)?;
    let arguments = match call.params.get("arguments") {
        None => Value::Object(Map::new()),
        Some(Value::Object(args)) => Value::Object(args.clone()),
        Some(_) => return Err(RpcError::invalid_params("arguments must be an object")),
    };
    match tool.spec.execution {
        // Inline execution (sync-only tools, optional ones without the extension) is not
        // served yet: every tool runs as a task.
        Execution::TaskRequired | Execution::TaskOptional | Execution::SyncOnly => {
            if !call.meta.declares_tasks() {
                return Err(RpcError::missing_tasks_extension());
            }
        }
    }
    tool.check_arguments(&arguments)
        .map_err(|reason| RpcError::invalid_params(format!("invalid arguments: {reason}")))?;
    let snapshot = create(call, name, &arguments, &tool.spec).await?;
    Ok(result::with_type(result::TASK, snapshot.task_fields()))
}

/// Writes the task and confirms it is durable before any handle leaves (invariant 5).
async fn create(
    call: &Call<'_>,
    tool: &str,
    arguments: &Value,
    spec: &taskgate_shared::tools::ToolSpec,
) -> Result<Snapshot, RpcError> {
    let state = call.state;
    let id = TaskId::generate(state.config.queue_shards);
    let owner: Owner = call.principal.owner();
    let arguments = arguments.to_string();
    let created = state
        .store
        .create_task(NewTask {
            id: &id,
            owner: &owner,
            tool,
            arguments: &arguments,
            ttl_ms: spec.ttl_ms,
            poll_interval_ms: spec.poll_interval_ms,
            status_message: spec.status_message.as_deref(),
            traceparent: call.meta.traceparent.as_deref(),
        })
        .await
        .map_err(storage_error)?;
    let replicas = state.config.durability_replicas;
    if replicas > 0 {
        let acked = state.store.wait_for_replicas(replicas, state.config.durability_timeout()).await;
        if !matches!(acked, Ok(n) if n >= replicas) {
            tracing::error!(task_id = %id, wanted = replicas, acked = ?acked.as_ref().ok(), "create not acknowledged by replicas; cancelling it");
            // Nobody holds the handle: cancel it so no work runs for it (best effort; it
            // expires by TTL otherwise).
            let _ = state.store.cancel_task(&id, &owner, "The task could not be made durable.").await;
            return Err(RpcError::new(
                taskgate_shared::protocol::ErrorKind::Internal,
                "the task could not be made durable; it was not created",
            ));
        }
    }
    Ok(Snapshot {
        task_id: id.to_string(),
        owner,
        status: TaskStatus::Working,
        status_message: spec.status_message.clone(),
        created_at_ms: created,
        updated_at_ms: created,
        ttl_ms: spec.ttl_ms,
        poll_interval_ms: spec.poll_interval_ms,
        input_requests: Map::new(),
        result: None,
        error: None,
        version: 1,
    })
}
