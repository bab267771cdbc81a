//! `tasks/get`: the full snapshot, in one Redis round trip. Unknown, foreign and expired ids
//! get the same error, byte for byte.

use serde_json::Value;
use taskgate_shared::protocol::{RpcError, result};

use crate::mcp::{Call, storage_error, task_id, task_not_found};

pub(crate) async fn run(call: &Call<'_>) -> Result<Value, RpcError> {
    let id = task_id(call.params)?;
    let snapshot = call.state.store.get_task(&id).await.map_err(storage_error)?;
    let owner = call.principal.owner();
    match snapshot {
        Some(snapshot) if snapshot.owner == owner => Ok(result::complete(snapshot.detailed_fields())),
        _ => Err(task_not_found()),
    }
}
