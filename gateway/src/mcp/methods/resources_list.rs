//! `resources/list` and `resources/templates/list`: what live workers publish, paginated and
//! cacheable.

use serde_json::Value;
use taskgate_shared::protocol::RpcError;

use crate::error::GatewayError;
use crate::mcp::Call;
use crate::mcp::pages;

pub(crate) async fn resources(call: &Call<'_>) -> Result<Value, GatewayError> {
    list(call, "resource", "resources").await
}

pub(crate) async fn templates(call: &Call<'_>) -> Result<Value, GatewayError> {
    list(call, "template", "resourceTemplates").await
}

async fn list(call: &Call<'_>, kind: &str, field: &str) -> Result<Value, GatewayError> {
    let catalogue = call.state.catalogue.offerings(|c| c.capabilities().resources).await;
    if !catalogue.capabilities().resources {
        return Err(GatewayError::Envelope(RpcError::method_not_found()));
    }
    Ok(pages::page(catalogue.offered(kind).cloned().collect(), call.params.cursor, field)?)
}
