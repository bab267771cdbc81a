//! `resources/read`: a published resource (or a match of a published template), read on a
//! worker. An unknown URI gets one answer, whoever asks: -32602 naming the URI.

use serde_json::json;
use taskgate_shared::protocol::{RpcError, params};
use taskgate_shared::tools::offerings::{RESOURCES_READ, template_matches};

use super::hidden;
use crate::catalogue::Catalogue;
use crate::error::GatewayError;
use crate::mcp::{Call, Reply};

/// Contents are made per request and may differ per caller: never kept by shared caches.
const CACHE: (u64, &str) = (0, "private");

pub(crate) async fn run(call: &Call<'_>) -> Result<Reply, GatewayError> {
    let uri = params::text(call.params.uri);
    let uri = uri.as_deref();
    let catalogue = call.state.catalogue.offerings(|c| uri.is_some_and(|uri| reads(c, uri))).await;
    if !catalogue.capabilities().resources {
        return Err(GatewayError::Envelope(RpcError::method_not_found()));
    }
    let Some(uri) = uri else {
        crate::limits::admit_request(call.state, &call.principal).await?;
        return Err(RpcError::invalid_params("uri is required").into());
    };
    let known = reads(&catalogue, uri);
    if !known {
        crate::limits::admit_request(call.state, &call.principal).await?;
        return Err(RpcError::invalid_params("Resource not found").with_data(json!({ "uri": uri })).into());
    }
    hidden::run(call, RESOURCES_READ, uri, json!({ "uri": uri }), Some(CACHE)).await
}

/// Whether `uri` is a published resource or matches a published template.
fn reads(catalogue: &Catalogue, uri: &str) -> bool {
    catalogue.offering(&format!("resource/{uri}")).is_some()
        || catalogue
            .offered("template")
            .filter_map(|t| t.get("uriTemplate")?.as_str())
            .any(|t| template_matches(t, uri))
}
