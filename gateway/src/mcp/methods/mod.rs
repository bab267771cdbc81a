//! One file per MCP method. Each returns the result object or an in-band error; only the
//! transport encodes JSON-RPC.

pub(super) mod discover;
pub(super) mod subscriptions_listen;
pub(super) mod tasks_cancel;
pub(super) mod tasks_get;
pub(super) mod tasks_update;
pub(super) mod tools_call;
pub(super) mod tools_list;
