//! One file per MCP method, and nothing else: each returns the result object or an in-band
//! error; only the edge encodes JSON-RPC. What several methods share sits beside this folder
//! (`binding`, `hidden`, `pages`, `create`).

pub(super) mod completion_complete;
pub(super) mod discover;
pub(super) mod events_list;
pub(super) mod events_poll;
pub(super) mod events_stream;
pub(super) mod events_subscribe;
pub(super) mod events_unsubscribe;
pub(super) mod prompts_get;
pub(super) mod prompts_list;
pub(super) mod resources_list;
pub(super) mod resources_read;
pub(super) mod subscriptions_listen;
pub(super) mod tasks_cancel;
pub(super) mod tasks_get;
pub(super) mod tasks_update;
pub(super) mod tools_call;
pub(super) mod tools_list;
