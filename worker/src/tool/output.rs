//! What a call produces: its result, or why it has none.

use serde_json::{Value, json};
use taskgate_shared::protocol::RpcError;

/// A finished call: the CallToolResult and, optionally, the task's final status message.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub result: Value,
    pub status_message: Option<String>,
}

impl ToolOutput {
    /// A CallToolResult with one text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            result: json!({ "content": [{ "type": "text", "text": text.into() }], "isError": false }),
            status_message: None,
        }
    }

    /// A CallToolResult with these content blocks.
    pub fn content(blocks: Vec<Value>) -> Self {
        Self { result: json!({ "content": blocks, "isError": false }), status_message: None }
    }

    pub fn structured(mut self, content: Value) -> Self {
        self.result["structuredContent"] = content;
        self
    }

    /// A tool-level error: the task still ends `completed`, with `isError: true`.
    pub fn error(mut self) -> Self {
        self.result["isError"] = Value::Bool(true);
        self
    }

    pub fn with_status(mut self, message: impl Into<String>) -> Self {
        self.status_message = Some(message.into());
        self
    }

    /// The result as stored: without `resultType` and `_meta`, which the gateway sets when it
    /// answers (the same for every result; `protocol::result::tool_result`). A tool's own
    /// `_meta` is dropped: the gateway's serverInfo takes its place.
    pub(crate) fn into_stored(self) -> (Value, Option<String>) {
        let mut result = match self.result {
            Value::Object(map) => map,
            other => serde_json::Map::from_iter([(
                "content".to_owned(),
                json!([{ "type": "text", "text": other.to_string() }]),
            )]),
        };
        result.remove("resultType");
        result.remove("_meta");
        (Value::Object(result), self.status_message)
    }
}

/// Why a call did not produce a result.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolError {
    /// Input is needed: the task parks and the tool runs again once it is answered.
    Suspend,
    /// The tool honoured a cancellation (or a user refused): the task ends `cancelled`.
    Cancelled(Option<String>),
    /// A JSON-RPC error: the task ends `failed` with it.
    Rpc(RpcError),
    /// This worker lost the lease; nothing it writes will be accepted.
    LeaseLost,
}
