//! `tools/call`: validate, then either create a durable task or run the tool inline.
//!
//! Whether a task is made follows the tool's declaration and this request's capabilities,
//! never timing:
//! - task-required: a task; without the Tasks extension, -32021;
//! - task-optional: a task when the request declares the extension, else inline;
//! - sync-only: inline.
//!
//! Only the reply to a call made as a task depends on timing: a task that ends within the
//! tool's completion budget is answered with its result, any other with its handle
//! (`complete_within`). The task is made the same way either way.
//!
//! Input a tool declares it needs before its task exists is gathered with MRTR rounds first.
//! An inline tool that asks for input mid-run turns the reply into an InputRequiredResult.

use std::borrow::Cow;

use serde_json::{Map, Value};
use taskgate_shared::protocol::RpcError;
use taskgate_shared::protocol::params;
use taskgate_shared::store::Created;
use taskgate_shared::task::{Snapshot, TaskId, TaskStatus};
use taskgate_shared::tools::Execution;

use crate::catalogue::Tool;
use crate::error::GatewayError;
use crate::mcp::complete_within::{self, Wait};
use crate::mcp::inline::{self, Forwarding, InlineRun};
use crate::mcp::related::{self, Named};
use crate::mcp::{Call, Durability, Reply, TaskShape, idempotency, mirror, task_not_found, write_task};
use crate::mrtr;

use crate::mcp::binding::{Binding, Finisher};

/// A JSON result, or a stream once the tool's notices had to be forwarded.
pub(crate) async fn run(call: &Call<'_>) -> Result<Reply, GatewayError> {
    let unknown = || RpcError::invalid_params("unknown tool");
    let name = params::text(call.params.name).ok_or_else(unknown)?;
    let name = name.as_ref();
    let tool = call.state.catalogue.lookup(name).await.ok_or_else(unknown)?;
    let spec = &tool.spec;
    let as_task = match spec.execution {
        Execution::TaskRequired if !call.meta.declares_tasks() => {
            return Err(RpcError::missing_tasks_extension().into());
        }
        Execution::TaskRequired => true,
        Execution::TaskOptional => call.meta.declares_tasks(),
        Execution::SyncOnly => false,
    };
    let sent = match call.params.arguments.map(|raw| raw.get()) {
        None | Some("null") => "{}",
        Some(raw) if raw.starts_with('{') => raw,
        Some(_) => return Err(RpcError::invalid_params("arguments must be an object").into()),
    };
    let arguments: Value = serde_json::from_str(sent).map_err(|_| RpcError::invalid_params("invalid arguments"))?;
    let stored = stored_arguments(sent, &arguments, call.state.config.requests.max_argument_bytes)?;
    let stored = stored.as_ref();
    tool.check_arguments(&arguments)
        .map_err(|reason| RpcError::invalid_params(format!("invalid arguments: {reason}")))?;
    mirror::check_params(call.headers, &spec.descriptor.input_schema, &arguments)?;

    let binding = Binding::new(call, "tools/call", name, &arguments);
    let gathered = mrtr::gather(
        &call.state.request_state_keys,
        call.params,
        &binding.expected(),
        taskgate_shared::task::now_ms(),
        call.state.config.requests.max_input_response_bytes,
    )?;

    // Input declared as needed before the task exists: ask for what is still missing.
    let missing: Map<String, Value> = spec
        .pre_task_inputs
        .iter()
        .filter(|(k, _)| !gathered.answers.contains_key(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !missing.is_empty() {
        crate::limits::admit_request(call.state, &call.principal).await?;
        mrtr::check_capabilities(&call.meta, &missing)?;
        return Ok(Reply::Result(mrtr::input_required(
            missing,
            binding.sign(call, gathered.answers, gathered.carried),
        )));
    }

    // Steps are reused by tasks only: an inline run's steps travel in its MRTR state, which is
    // bounded well below what a task may have recorded.
    let named = Named::new(&call.meta, name, spec.reuse_steps && as_task, &arguments);
    if as_task {
        return task(call, &tool, name, stored, &arguments, &gathered, &named).await.map(Reply::Result);
    }
    // An inline call keeps no task for the client to find again: it runs once per request and
    // ignores an idempotency key.
    let id = TaskId::generate(call.state.config.redis.queue_shards);
    crate::limits::admit_task(call.state, &call.principal, &id, inline::hidden_ttl_ms(&call.state.config)).await?;
    let resolved = named.resolve(call.state, &call.principal.owner()).await?;
    let shape = TaskShape {
        related: &resolved.owned,
        ..inline::hidden_shape(&call.state.config, &tool.pool, spec.poll_interval_ms, spec.subject_token)
    };
    let run = InlineRun::start(call, id, name, stored, shape, &gathered).await?;
    let forwarding = Forwarding::new(
        call.meta.progress_token.clone(),
        call.meta.log_level.as_deref(),
        call.state.config.streams.keep_alive,
    );
    Finisher::new(call, binding, gathered.answers, None).drive(run, forwarding).await
}

/// What is stored of the arguments: the client's own text when it is within `cap`, else their
/// compact form (so whitespace or escapes never tip a request over the limit), which must then
/// be within it. The limit is on the bytes stored, whatever was sent.
fn stored_arguments<'a>(sent: &'a str, arguments: &Value, cap: usize) -> Result<Cow<'a, str>, RpcError> {
    if sent.len() <= cap {
        return Ok(Cow::Borrowed(sent));
    }
    let compact = arguments.to_string();
    if compact.len() > cap {
        return Err(RpcError::invalid_params(format!("arguments exceed the {cap}-byte limit")));
    }
    Ok(Cow::Owned(compact))
}

/// The answer to a call made as a task. Its task is a new one, or for a retry of a keyed call,
/// the task the first request made, as it is now. With a completion budget, the answer is the
/// task's outcome when it ended within it, else its handle; without one, always its handle. A
/// key names the task (the same id on every replica); a retry is answered before admission, so
/// it takes no active-task slot and counts no create, and waits as the first request did, so
/// it answers the same once the task has ended.
async fn task(
    call: &Call<'_>,
    tool: &Tool,
    name: &str,
    arguments: &str,
    parsed: &Value,
    gathered: &mrtr::Gathered,
    named: &Named<'_>,
) -> Result<Value, GatewayError> {
    let key = idempotency::key(call.headers, call.meta.idempotency_key.as_deref())?;
    let id = match &key {
        Some(key) => idempotency::task_id(call.state, &call.principal.owner(), key).await?,
        None => TaskId::generate(call.state.config.redis.queue_shards),
    };
    let wait = Wait::register(call.state, &id, complete_within::budget(&call.state.config, &tool.spec));
    let handle = made(call, tool, name, &id, key.is_some(), arguments, parsed, gathered, named).await?;
    match wait {
        Some(wait) => complete_within::answer(&wait.settle(call.state, handle).await),
        None => Ok(complete_within::handle(&handle)),
    }
}

/// The task `id` names, made now, or (`keyed`) found again: as the create wrote it, or as a
/// retry finds it.
#[expect(clippy::too_many_arguments, reason = "one call's parts, passed on to the create")]
async fn made(
    call: &Call<'_>,
    tool: &Tool,
    name: &str,
    id: &TaskId,
    keyed: bool,
    arguments: &str,
    parsed: &Value,
    gathered: &mrtr::Gathered,
    named: &Named<'_>,
) -> Result<Snapshot, GatewayError> {
    let spec = &tool.spec;
    let shape = |fingerprint| TaskShape {
        pool: &tool.pool,
        ttl_ms: spec.ttl_ms,
        poll_interval_ms: spec.poll_interval_ms,
        status_message: spec.status_message.as_deref(),
        fingerprint,
        subject_token: spec.subject_token,
        related: &[],
    };
    if !keyed {
        return create(call, id, name, arguments, gathered, shape(None), named).await;
    }
    let owner = call.principal.owner();
    let fingerprint = idempotency::fingerprint(name, parsed, &gathered.answers);
    let Some(existing) = call.state.store.keyed_task(id, &owner).await? else {
        return create(call, id, name, arguments, gathered, shape(Some(&fingerprint)), named).await;
    };
    crate::limits::admit_request(call.state, &call.principal).await?;
    if existing.tool != name || existing.fingerprint.as_deref() != Some(fingerprint.as_str()) {
        return Err(GatewayError::KeyReused);
    }
    if call.state.config.durability.is_some() {
        // The first request's `WAIT` may have fallen short: the create script's replay writes
        // nothing new, and the `WAIT` behind it confirms the task is on the replicas before its
        // handle leaves again. (Were the task to expire in between, this would create it anew.)
        // The first request's token stays: a new one would outlive the task's expiry.
        let again = TaskShape { subject_token: false, ..shape(Some(&fingerprint)) };
        write_task(call, id, name, arguments, again, gathered, Durability::Replicated).await?;
    }
    replayed(call, id).await
}

/// Admits and writes a new task, confirmed durable before any handle leaves (a handle that
/// later answers "not found" is never acceptable). Its snapshot is the one `create_task` wrote,
/// unless another request with the same key created the task in the moment since it was looked
/// up: then it is that task, as it is now. The related ids are checked once admitted, and the
/// task starts with the steps of a failed run of the same call when its tool reuses them.
async fn create(
    call: &Call<'_>,
    id: &TaskId,
    tool: &str,
    arguments: &str,
    gathered: &mrtr::Gathered,
    shape: TaskShape<'_>,
    named: &Named<'_>,
) -> Result<Snapshot, GatewayError> {
    let (ttl_ms, poll_interval_ms) = (shape.ttl_ms, shape.poll_interval_ms);
    let status_message = shape.status_message.map(str::to_owned);
    crate::limits::admit_task(call.state, &call.principal, id, ttl_ms).await?;
    let resolved = named.resolve(call.state, &call.principal.owner()).await?;
    let reused = related::with_steps(gathered, &resolved.steps);
    let gathered = reused.as_ref().unwrap_or(gathered);
    let shape = TaskShape { related: &resolved.owned, ..shape };
    let created_at_ms = match write_task(call, id, tool, arguments, shape, gathered, Durability::Replicated).await? {
        Created::New { created_at_ms } => created_at_ms,
        Created::Replayed { .. } => return replayed(call, id).await,
    };
    Ok(Snapshot {
        task_id: id.to_string(),
        owner: call.principal.owner(),
        status: TaskStatus::Working,
        status_message,
        created_at_ms,
        updated_at_ms: created_at_ms,
        ttl_ms,
        poll_interval_ms,
        input_requests: Map::new(),
        result: None,
        error: None,
        version: 1,
    })
}

/// The task a keyed create found, as it is in Redis now. It may have ended since (the store
/// gave back the slot this request's admission took, if it had); a task that expired in the
/// meantime is not found, as any expired task.
async fn replayed(call: &Call<'_>, id: &TaskId) -> Result<Snapshot, GatewayError> {
    let owner = call.principal.owner();
    Ok(call.state.store.get_owned_task(id, &owner).await?.ok_or_else(task_not_found)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_stored_is_within_the_cap() {
        let padded = format!("{{\"a\": {}\"x\"}}", " ".repeat(100));
        let value: Value = serde_json::from_str(&padded).unwrap();
        assert_eq!(stored_arguments(&padded, &value, 1000).unwrap(), padded.as_str(), "as sent, when it fits");
        assert_eq!(stored_arguments(&padded, &value, 20).unwrap(), r#"{"a":"x"}"#, "compact, when only that fits");
        assert!(stored_arguments(&padded, &value, 8).is_err(), "refused when neither fits");
    }
}
