//! The MCP 2026-07-28 wire: JSON-RPC envelopes, per-request `_meta`, error codes and the
//! mirrored-header value encoding. Pure functions over borrowed JSON: no I/O here.

pub mod capabilities;
pub mod envelope;
pub mod error;
pub mod header_value;
pub mod meta;
pub mod method;
pub mod params;
pub mod result;
pub mod sse;

pub use envelope::{Incoming, RequestId};
pub use error::{ErrorKind, RpcError};
pub use meta::ValidMeta;
pub use method::Method;
pub use params::Params;

/// The one protocol revision taskgate speaks.
pub const PROTOCOL_VERSION: &str = "2026-07-28";
/// Every revision taskgate accepts, in the order it prefers them.
pub const SUPPORTED_VERSIONS: &[&str] = &[PROTOCOL_VERSION];
/// The official Tasks extension identifier.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// Reserved `_meta` keys of the 2026-07-28 revision that the server writes. (The ones it reads
/// are named where `meta::validate` parses them: serde's renames take literals only.)
pub mod meta_keys {
    pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
    pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
    /// On each `notifications/tasks` of a listen stream: 1, 2, 3… per stream, so a client sees
    /// a notification lost on the way as a hole.
    pub const SEQ: &str = "io.taskgate/seq";
    /// On each `notifications/tasks`: the task's version (a jump is coalescing, not a loss).
    pub const VERSION: &str = "io.taskgate/version";
}
