//! `events/list`: the one event type, `taskgate.task.status` (docs/events.md, 2.2). No pages:
//! the list never changes while a gateway runs (`listChanged` is not offered).

use serde_json::{Map, Value};
use taskgate_shared::protocol::{RpcError, result};

use crate::config::Auth;
use crate::error::GatewayError;
use crate::mcp::Call;
use crate::mcp::occurrences::{descriptor, enabled};

pub(crate) fn run(call: &Call<'_>) -> Result<Value, GatewayError> {
    enabled(call)?;
    // There is only ever one page: any cursor is one this server never gave.
    if call.params.cursor.is_some_and(|c| c.get() != "null") {
        return Err(RpcError::invalid_params("invalid cursor").into());
    }
    let authenticated = !matches!(call.state.config.auth, Auth::None);
    let mut fields = Map::with_capacity(1);
    fields.insert("events".into(), Value::Array(vec![descriptor(authenticated)]));
    Ok(result::complete(fields))
}
