//! Result objects: every result carries `resultType` and the server's identity in `_meta`.

use serde_json::{Map, Value, json};

use super::meta_keys;

/// `resultType` values. `task` belongs to the Tasks extension and appears only on a
/// CreateTaskResult.
pub const COMPLETE: &str = "complete";
pub const INPUT_REQUIRED: &str = "input_required";
pub const TASK: &str = "task";

/// The server's `Implementation` object.
pub fn server_info() -> Value {
    json!({ "name": "taskgate", "version": env!("CARGO_PKG_VERSION") })
}

/// `{"io.modelcontextprotocol/serverInfo": {...}}`
pub fn server_meta() -> Value {
    json!({ meta_keys::SERVER_INFO: server_info() })
}

/// Adds `resultType` and the serverInfo `_meta` to a result's fields.
pub fn with_type(result_type: &str, mut fields: Map<String, Value>) -> Value {
    fields.insert("resultType".into(), result_type.into());
    fields.insert("_meta".into(), server_meta());
    Value::Object(fields)
}

/// A complete result with these fields.
pub fn complete(fields: Map<String, Value>) -> Value {
    with_type(COMPLETE, fields)
}

/// A tool's result as the wire carries it, from its stored form. The stored form leaves out
/// `resultType` and the serverInfo `_meta`: they are the same for every result, and without them
/// a small result keeps its task's Redis hash in the compact encoding (docs/performance.md).
pub fn tool_result(stored: Value) -> Value {
    match stored {
        Value::Object(fields) => complete(fields),
        other => other,
    }
}

/// The empty acknowledgement `{"resultType":"complete","_meta":{serverInfo}}`.
pub fn ack() -> Value {
    complete(Map::new())
}
