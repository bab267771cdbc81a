//! `events/unsubscribe` (Events extension): ends the caller's subscription for a key; the
//! principal comes from authentication (docs/events.md, 1.6).

use serde_json::{Map, Value, json};
use taskgate_shared::protocol::{ErrorKind, RpcError, result};

use crate::error::GatewayError;
use crate::mcp::Call;
use crate::mcp::hooks;

pub(crate) async fn run(call: &Call<'_>) -> Result<Value, GatewayError> {
    let state = call.state;
    let Some(egress) = state.egress.as_ref() else {
        return Err(RpcError::method_not_found().into());
    };
    let principal = hooks::subscriber(call)?;
    let key = hooks::key(call.params, egress)?;
    let id = hooks::subscription_id(call, &principal, &key).await?;
    let owner = hooks::owner_digest(&principal);
    if !state.store.drop_hook(&principal.tenant, &owner, &id).await? {
        return Err(RpcError::new(ErrorKind::NotFound, "no such subscription")
            .with_data(json!({ "kind": "subscription" }))
            .into());
    }
    tracing::info!(subscription = %id, "webhook subscription ended");
    Ok(result::complete(Map::new()))
}
