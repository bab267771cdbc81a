//! `server/discover`: versions, capabilities and cache hints. Identity goes in `_meta`, not in a
//! top-level `serverInfo` (the revision's discovery result has none).

use std::time::Duration;

use serde_json::{Value, json};
use taskgate_shared::protocol::{SUPPORTED_VERSIONS, TASKS_EXTENSION, result};

use crate::catalogue::Catalogue;
use crate::mcp::Call;
use crate::mcp::occurrences::EVENTS_EXTENSION;

/// The longest discovery may be kept: as long as the lists.
const MAX_TTL: Duration = Duration::from_secs(60);

/// Prompts, resources and completions are declared by the rule the methods serve them by
/// ([`Catalogue::capabilities`]), on the catalogue they read, re-read as they re-read it: a
/// gateway that started before its workers declares what `prompts/list` would serve at the same
/// moment, not what it read before any worker had published.
pub(crate) async fn run(call: &Call<'_>) -> Value {
    let catalogue = call.state.catalogue.for_discovery().await;
    let offered = catalogue.capabilities();
    let mut capabilities = json!({ "tools": {}, "extensions": { TASKS_EXTENSION: {} } });
    if call.state.config.events.is_some() {
        capabilities["extensions"][EVENTS_EXTENSION] = json!({});
    }
    if offered.prompts {
        capabilities["prompts"] = json!({});
    }
    if offered.resources {
        capabilities["resources"] = json!({});
    }
    if offered.completions {
        capabilities["completions"] = json!({});
    }
    let fields = json!({
        "supportedVersions": SUPPORTED_VERSIONS,
        "capabilities": capabilities,
        "ttlMs": ttl_ms(&catalogue),
        "cacheScope": "public",
    });
    result::complete(fields.as_object().cloned().unwrap_or_default())
}

/// Discovery is the same for every caller, so shared caches may keep it, but its capabilities
/// follow what workers publish. Kept no longer than the catalogue has stood unchanged (in
/// whole seconds, at most [`MAX_TTL`]), and not at all while nothing is published: a cache
/// does not keep for a minute the answer of a gateway that is still waiting for its workers,
/// or that has just seen a worker join.
fn ttl_ms(catalogue: &Catalogue) -> u64 {
    if catalogue.is_empty() {
        return 0;
    }
    let stable = catalogue.age().min(MAX_TTL).as_secs();
    stable * 1000
}
