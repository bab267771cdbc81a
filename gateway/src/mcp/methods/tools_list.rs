//! `tools/list`: the published catalogue, deterministic and cacheable.

use serde_json::{Map, Value};
use taskgate_shared::protocol::result;

use crate::error::GatewayError;
use crate::mcp::Call;

/// The catalogue is the same for every caller under one deployment, so shared caches may keep
/// it. (Per-tenant catalogues would make this `private`.)
const TTL_MS: u64 = 60_000;

pub(crate) async fn run(call: &Call<'_>) -> Result<Value, GatewayError> {
    let catalogue = call.state.catalogue.listing().await;
    let mut fields = Map::with_capacity(3);
    fields.insert("tools".into(), catalogue.listing().clone());
    fields.insert("ttlMs".into(), TTL_MS.into());
    fields.insert("cacheScope".into(), "public".into());
    Ok(result::complete(fields))
}
