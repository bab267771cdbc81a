//! `tasks/get`: the full snapshot, in one Redis round trip (ownership and the poll rate are
//! checked in the same script; the tenant's request rate is checked concurrently). Unknown,
//! foreign and expired ids get the same error, byte for byte.

use serde_json::Value;
use taskgate_shared::protocol::{RpcError, result};
use taskgate_shared::store::{Limit, Polled};

use crate::limits;
use crate::mcp::{Call, storage_error, task_id, task_not_found};

pub(crate) async fn run(call: &Call<'_>) -> Result<Value, RpcError> {
    let id = task_id(call.params);
    let owner = call.principal.owner();
    let tolerance = call.state.config.poll_tolerance;
    let read = async {
        match &id {
            // Without a poll limit, a plain pipelined read is cheaper for Redis than the script.
            Ok(id) if tolerance <= 0.0 => match call.state.store.get_task(id).await.map_err(storage_error)? {
                Some(snapshot) if snapshot.owner == owner => Ok(Polled::Found(Box::new(snapshot))),
                _ => Ok(Polled::NotFound),
            },
            Ok(id) => call.state.store.poll_task(id, &owner, tolerance).await.map_err(storage_error),
            Err(_) => Ok(Polled::NotFound),
        }
    };
    let (admitted, polled) = tokio::join!(limits::admit_request(call.state, &call.principal), read);
    admitted?;
    match polled? {
        Polled::Found(snapshot) => Ok(result::complete(snapshot.detailed_fields())),
        Polled::NotFound => Err(task_not_found()),
        Polled::TooSoon { retry_after_ms } => Err(limits::refused(Limit::Poll, retry_after_ms)),
    }
}
