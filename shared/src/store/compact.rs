//! Stored forms that leave out what nearly every task record repeats.
//!
//! Redis keeps a hash in its compact listpack encoding only while every value is at most
//! `hash-max-listpack-value` bytes (64 by default). One longer value converts the whole hash to
//! a hashtable for good, which for a small task record is about twice the memory. The
//! declaration of the Tasks extension alone is 49 bytes of every task's `clientCapabilities`,
//! so it is left out and put back when the task is claimed.

use serde_json::{Map, Value};

use crate::protocol::TASKS_EXTENSION;

/// `clientCapabilities` as stored, and whether the Tasks extension's plain declaration
/// (`"extensions": {"io.modelcontextprotocol/tasks": {}}`) was left out of it. A declaration
/// with settings is kept as it is.
pub fn stored_capabilities(capabilities: &Map<String, Value>) -> (String, bool) {
    let plain_declaration = capabilities
        .get("extensions")
        .and_then(Value::as_object)
        .and_then(|extensions| extensions.get(TASKS_EXTENSION))
        .and_then(Value::as_object)
        .is_some_and(Map::is_empty);
    if !plain_declaration {
        return (json_text(capabilities), false);
    }
    let mut stored = capabilities.clone();
    let Some(Value::Object(extensions)) = stored.get_mut("extensions") else {
        return (json_text(capabilities), false);
    };
    extensions.remove(TASKS_EXTENSION);
    if extensions.is_empty() {
        stored.remove("extensions");
    }
    (json_text(&stored), true)
}

/// A map as JSON text, serialised in place (it cannot fail: every key is a string).
fn json_text(map: &Map<String, Value>) -> String {
    serde_json::to_string(map).unwrap_or_default()
}

/// The stored `clientCapabilities` read back, with the declaration put back when it was left
/// out. Text that is not a JSON object is returned as it is (the worker treats it as none).
pub(super) fn restored_capabilities(stored: String, declared_tasks: bool) -> String {
    if !declared_tasks {
        return stored;
    }
    let Ok(Value::Object(mut capabilities)) = serde_json::from_str::<Value>(&stored) else {
        return stored;
    };
    let extensions = capabilities.entry("extensions").or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(extensions) = extensions {
        extensions.insert(TASKS_EXTENSION.into(), Value::Object(Map::new()));
    }
    Value::Object(capabilities).to_string()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn round_trip(capabilities: Value) -> (String, bool, Value) {
        let (stored, declared) = stored_capabilities(capabilities.as_object().unwrap());
        let restored = serde_json::from_str(&restored_capabilities(stored.clone(), declared)).unwrap();
        (stored, declared, restored)
    }

    #[test]
    fn the_plain_declaration_is_left_out_and_put_back() {
        let caps = json!({"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}});
        let (stored, declared, restored) = round_trip(caps.clone());
        assert_eq!((stored.as_str(), declared), (r#"{"elicitation":{}}"#, true));
        assert_eq!(restored, caps);

        let caps = json!({"extensions": {"io.modelcontextprotocol/tasks": {}, "x.example/other": {"a": 1}}});
        let (stored, declared, restored) = round_trip(caps.clone());
        assert_eq!((stored.as_str(), declared), (r#"{"extensions":{"x.example/other":{"a":1}}}"#, true));
        assert_eq!(restored, caps);
    }

    #[test]
    fn anything_else_is_stored_as_it_is() {
        for caps in [
            json!({}),
            json!({"elicitation": {"form": {}}}),
            json!({"extensions": {"io.modelcontextprotocol/tasks": {"v": 2}}}),
            json!({"extensions": {"x.example/other": {}}}),
            json!({"extensions": "not an object"}),
        ] {
            let (stored, declared, restored) = round_trip(caps.clone());
            assert!(!declared, "{caps}");
            assert_eq!(serde_json::from_str::<Value>(&stored).unwrap(), caps);
            assert_eq!(restored, caps);
        }
        assert_eq!(restored_capabilities("not json".into(), true), "not json");
    }
}
