//! `server/discover`: versions, capabilities and cache hints. Identity goes in `_meta`, not in a
//! top-level `serverInfo` (removed from SEP-2575 by PR #3002).

use serde_json::{Value, json};
use taskgate_shared::protocol::{SUPPORTED_VERSIONS, TASKS_EXTENSION, result};

use super::{completion_complete, resources_list};
use crate::mcp::Call;

/// Discovery is the same for every caller and replica, so shared caches may keep it; no longer
/// than the lists, since the capabilities follow what workers publish.
const TTL_MS: u64 = 60_000;

/// Prompts, resources and completions are advertised only while a live worker publishes
/// something for them, so the capabilities match what the methods answer.
///
/// It reads the catalogue as it is, without the refresh a list or a call's miss makes: a
/// discovery must not use up the refresh that a `tools/call` right after it needs.
pub(crate) fn run(call: &Call<'_>) -> Value {
    let catalogue = call.state.catalogue.current();
    let mut capabilities = json!({ "tools": {}, "extensions": { TASKS_EXTENSION: {} } });
    if catalogue.offers("prompt") {
        capabilities["prompts"] = json!({});
    }
    if resources_list::offered(&catalogue) {
        capabilities["resources"] = json!({});
    }
    if completion_complete::offered(&catalogue) {
        capabilities["completions"] = json!({});
    }
    let fields = json!({
        "supportedVersions": SUPPORTED_VERSIONS,
        "capabilities": capabilities,
        "ttlMs": TTL_MS,
        "cacheScope": "public",
    });
    result::complete(fields.as_object().cloned().unwrap_or_default())
}
