//! `resources/read`: a published resource (or a match of a published template), read on a
//! worker. An unknown URI gets one answer, whoever asks: -32602 naming the URI.

use serde_json::json;
use taskgate_shared::protocol::{RpcError, params};
use taskgate_shared::tools::offerings::{RESOURCES_READ, template_matches};

use crate::catalogue::Catalogue;
use crate::error::GatewayError;
use crate::mcp::hidden;
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
    let Some(key) = offering_of(&catalogue, uri) else {
        crate::limits::admit_request(call.state, &call.principal).await?;
        return Err(RpcError::invalid_params("Resource not found").with_data(json!({ "uri": uri })).into());
    };
    let pool = catalogue.offering_pool(&key).to_owned();
    hidden::run(call, RESOURCES_READ, &pool, uri, json!({ "uri": uri }), Some(CACHE)).await
}

/// Whether `uri` is a published resource or matches a published template.
fn reads(catalogue: &Catalogue, uri: &str) -> bool {
    offering_of(catalogue, uri).is_some()
}

/// The catalogue key of what serves `uri`: the resource itself, else the first template it
/// matches.
fn offering_of(catalogue: &Catalogue, uri: &str) -> Option<String> {
    let direct = format!("resource/{uri}");
    if catalogue.offering(&direct).is_some() {
        return Some(direct);
    }
    catalogue
        .offered("template")
        .filter_map(|t| t.get("uriTemplate")?.as_str())
        .find(|t| template_matches(t, uri))
        .map(|t| format!("template/{t}"))
}
