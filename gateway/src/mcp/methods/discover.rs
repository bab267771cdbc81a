//! `server/discover`: versions, capabilities and cache hints. Identity goes in `_meta`, not in a
//! top-level `serverInfo` (removed from SEP-2575 by PR #3002).

use serde_json::{Value, json};
use taskgate_shared::protocol::{SUPPORTED_VERSIONS, TASKS_EXTENSION, result};

/// Discovery is the same for every caller and replica, so shared caches may keep it.
const TTL_MS: u64 = 300_000;

pub(crate) fn run() -> Value {
    let fields = json!({
        "supportedVersions": SUPPORTED_VERSIONS,
        "capabilities": { "tools": {}, "extensions": { TASKS_EXTENSION: {} } },
        "ttlMs": TTL_MS,
        "cacheScope": "public",
    });
    result::complete(fields.as_object().cloned().unwrap_or_default())
}
