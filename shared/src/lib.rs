//! taskgate's common crate.
//!
//! - [`protocol`]: the MCP 2026-07-28 wire (JSON-RPC envelopes, `_meta`, errors, header values).
//!   It knows nothing of Redis or HTTP frameworks.
//! - [`tools`]: tool descriptors and execution policy, shared by the worker that runs a tool and
//!   the gateway that lists and validates it.
//! - [`task`]: the task domain (statuses, ids, wire snapshots).
//! - [`store`]: the Redis layer: keys, Lua scripts and their typed wrappers.
//! - [`credentials`]: per-tenant upstream credentials, sealed at rest.
//! - [`telemetry`]: logging setup.

pub mod backoff;
pub mod config;
pub mod credentials;
pub mod protocol;
pub mod runtime;
pub mod shutdown;
pub mod store;
pub mod task;
pub mod telemetry;
pub mod tools;
