//! `resources/read`: a published resource (or a match of a published template), read on a
//! worker. An unknown URI gets one answer, whoever asks: -32602 naming the URI.

use serde_json::{Value, json};
use taskgate_shared::protocol::RpcError;
use taskgate_shared::tools::offerings::{RESOURCES_READ, template_matches};

use super::{hidden, resources_list};
use crate::error::GatewayError;
use crate::mcp::{Call, Reply};

/// Contents are made per request and may differ per caller: never kept by shared caches.
const CACHE: (u64, &str) = (0, "private");

pub(crate) async fn run(call: &Call<'_>) -> Result<Reply, GatewayError> {
    let catalogue = call.state.catalogue.listing().await;
    if !resources_list::offered(&catalogue) {
        return Err(GatewayError::Envelope(RpcError::method_not_found()));
    }
    let Some(uri) = call.params.get("uri").and_then(Value::as_str) else {
        crate::limits::admit_request(call.state, &call.principal).await?;
        return Err(RpcError::invalid_params("uri is required").into());
    };
    let known = catalogue.offering(&format!("resource/{uri}")).is_some()
        || catalogue
            .offered("template")
            .filter_map(|t| t.get("uriTemplate")?.as_str())
            .any(|t| template_matches(t, uri));
    if !known {
        crate::limits::admit_request(call.state, &call.principal).await?;
        return Err(RpcError::invalid_params("Resource not found").with_data(json!({ "uri": uri })).into());
    }
    hidden::run(call, RESOURCES_READ, uri, json!({ "uri": uri }), Some(CACHE)).await
}
