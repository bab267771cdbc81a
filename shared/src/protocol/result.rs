//! Result objects: every result carries `resultType` and the server's identity in `_meta`.

use serde_json::value::RawValue;
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

/// `{"io.modelcontextprotocol/serverInfo": {...}}` as JSON text, for responses written
/// straight into bytes.
pub const SERVER_META_JSON: &str = concat!(
    r#"{"io.modelcontextprotocol/serverInfo":{"name":"taskgate","version":""#,
    env!("CARGO_PKG_VERSION"),
    r#""}}"#
);

/// A complete result written straight into bytes: `{`, the members `write_members` writes
/// (without braces), then `resultType` and the serverInfo `_meta`, `}`. `size_hint` is the
/// members' expected length, so that the buffer is allocated once.
pub fn encode_complete(size_hint: usize, write_members: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::with_capacity(size_hint + 48 + SERVER_META_JSON.len());
    out.push(b'{');
    write_members(&mut out);
    out.extend_from_slice(br#","resultType":"complete","_meta":"#);
    out.extend_from_slice(SERVER_META_JSON.as_bytes());
    out.push(b'}');
    out
}

/// A stored result as read from Redis, checked to be JSON but not parsed into a tree: it is
/// spliced into responses as it is ([`write_tool_result`]). A record written before results
/// were stored without `resultType` and `_meta` (they were the same values) has them taken
/// out here, so that they are never written twice; so does text that spells a key with escapes
/// (serde_json never does), which could otherwise hide one.
pub fn stored_result(text: String) -> Result<Box<RawValue>, serde_json::Error> {
    if !(text.contains("\"resultType\"") || text.contains("\"_meta\"") || text.contains("\\u")) {
        return RawValue::from_string(text);
    }
    let value = match serde_json::from_str::<Value>(&text)? {
        Value::Object(mut fields) => {
            fields.remove("resultType");
            fields.remove("_meta");
            Value::Object(fields)
        }
        other => other,
    };
    RawValue::from_string(value.to_string())
}

/// Writes a stored result (from [`stored_result`]) as the wire carries it: [`tool_result`]
/// without parsing it, the shared members first and the stored ones spliced after them.
pub fn write_tool_result(stored: &RawValue, out: &mut Vec<u8>) {
    let text = stored.get().trim();
    let Some(members) = text.strip_prefix('{').and_then(|t| t.strip_suffix('}')) else {
        out.extend_from_slice(text.as_bytes());
        return;
    };
    out.extend_from_slice(br#"{"resultType":"complete","_meta":"#);
    out.extend_from_slice(SERVER_META_JSON.as_bytes());
    let members = members.trim();
    if !members.is_empty() {
        out.push(b',');
        out.extend_from_slice(members.as_bytes());
    }
    out.push(b'}');
}

/// The empty acknowledgement `{"resultType":"complete","_meta":{serverInfo}}`.
pub fn ack() -> Value {
    complete(Map::new())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spliced(stored: &str) -> Value {
        let raw = stored_result(stored.to_owned()).unwrap();
        let mut out = Vec::new();
        write_tool_result(&raw, &mut out);
        serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)))
    }

    #[test]
    fn a_spliced_result_is_the_parsed_one() {
        for stored in [
            json!({"content": [{"type": "text", "text": "ok"}], "isError": false}),
            json!({}),
            json!({"structuredContent": {"a": [1, 2, {"b": null}]}, "content": []}),
            // Written before results were stored without them: never written twice.
            json!({"content": [], "resultType": "complete", "_meta": {"x": 1}}),
            json!({"content": [{"type": "text", "text": "caf\u{e9} \u{1F600}"}]}),
            json!("not an object"),
        ] {
            assert_eq!(spliced(&stored.to_string()), tool_result(stored.clone()), "{stored}");
        }
        assert_eq!(spliced(" { } "), ack());
        // A key spelled with escapes is still the key: it must not follow ours and win.
        assert_eq!(spliced(r#"{"\u005fmeta":{"x":1}}"#), ack());
        assert_eq!(spliced(r#"{"resultTyp\u0065":"task"}"#), ack());
        assert_eq!(serde_json::from_str::<Value>(SERVER_META_JSON).unwrap(), server_meta());
    }

    #[test]
    fn a_stored_result_must_be_json() {
        assert!(stored_result("{\"content\": [".into()).is_err());
        assert!(stored_result("{} {}".into()).is_err());
    }
}
