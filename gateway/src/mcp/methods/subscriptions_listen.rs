//! `subscriptions/listen` with `notifications.taskIds`: a request-scoped SSE stream of task
//! snapshots (Tasks extension). Only existing tasks the caller owns are accepted; unknown and
//! foreign ids are dropped silently, so nothing leaks. Other filters (list-changed,
//! resource subscriptions) are not offered, so the acknowledgement never lists them.

use futures::future::join_all;
use serde_json::Value;
use taskgate_shared::protocol::{RpcError, params};
use taskgate_shared::store::Limit;
use taskgate_shared::task::TaskId;

use crate::error::GatewayError;
use crate::mcp::listen::{Listen, Subscription};
use crate::mcp::{Call, Stream};

/// Wake-ups queued per stream. They coalesce (a dirty set) and an overflow turns into a
/// re-read of every task, so a small queue loses nothing and keeps 10,000 streams cheap.
const WAKE_CAPACITY: usize = 8;

pub(crate) async fn run(call: &Call<'_>) -> Result<Stream, GatewayError> {
    let state = call.state;
    let Some(Value::Object(filter)) = params::value(call.params.notifications) else {
        return Err(RpcError::invalid_params("notifications must be an object").into());
    };
    let requested: Vec<String> = match filter.get("taskIds") {
        None => Vec::new(),
        Some(Value::Array(ids)) => {
            ids.iter().map(|id| id.as_str().map(str::to_owned)).collect::<Option<_>>().ok_or_else(bad_ids)?
        }
        Some(_) => return Err(bad_ids().into()),
    };
    if filter.contains_key("taskIds") && !call.meta.declares_tasks() {
        return Err(RpcError::missing_tasks_extension().into());
    }
    let max_ids = state.config.streams.max_task_ids;
    if requested.len() > max_ids {
        return Err(RpcError::invalid_params(format!("at most {max_ids} taskIds per listen")).into());
    }
    let owner = call.principal.owner();
    // Over a bound is a matter of load, not a bad request: 429, try again later.
    let slot = state
        .listen_streams
        .acquire(owner.key(), state.config.streams.max_streams_per_principal, state.config.streams.max_streams)
        .ok_or_else(|| crate::limits::refused(Limit::ListenStreams, 1_000))?;

    // Unique, well-formed ids in request order.
    let mut ids: Vec<TaskId> = Vec::new();
    for id in requested.iter().filter_map(|s| TaskId::parse(s)) {
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    // Watch before reading, so a change between the read and the subscription is not missed.
    let names: Vec<&str> = ids.iter().map(TaskId::as_str).collect();
    let watch = state.events.watch(&names, WAKE_CAPACITY);
    // Ownership is checked in each read's script before the record is read: a foreign id
    // costs what an unknown one does.
    let reads = join_all(ids.iter().map(|id| state.store.get_owned_task(id, &owner))).await;
    let mut accepted = Vec::new();
    for read in reads {
        if let Some(snapshot) = read? {
            accepted.push(snapshot);
        }
    }
    let request = Subscription { id: call.id.clone(), owner, accepted, task_filter: filter.contains_key("taskIds") };
    let listen = Listen::new(request, state.store.clone(), watch, state.shutdown.clone(), slot);
    Ok(listen.into_stream(state.config.streams.keep_alive))
}

fn bad_ids() -> RpcError {
    RpcError::invalid_params("taskIds must be an array of strings")
}
