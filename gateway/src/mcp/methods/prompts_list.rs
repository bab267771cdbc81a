//! `prompts/list`: the prompts live workers publish, paginated and cacheable.

use serde_json::Value;
use taskgate_shared::protocol::RpcError;

use crate::error::GatewayError;
use crate::mcp::Call;
use crate::mcp::pages;

pub(crate) async fn run(call: &Call<'_>) -> Result<Value, GatewayError> {
    let catalogue = call.state.catalogue.offerings(|c| c.capabilities().prompts).await;
    if !catalogue.capabilities().prompts {
        // Not advertised, so not served: as for any method this server does not have.
        return Err(GatewayError::Envelope(RpcError::method_not_found()));
    }
    Ok(pages::page(catalogue.offered("prompt").cloned().collect(), call.params.cursor, "prompts")?)
}
