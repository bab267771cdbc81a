//! Stored forms that leave out what nearly every task record repeats.
//!
//! Redis keeps a hash in its compact listpack encoding only while every value is at most
//! `hash-max-listpack-value` bytes (64 by default). One longer value converts the whole hash to
//! a hashtable for good, which for a small task record is about twice the memory. The
//! declaration of the Tasks extension alone is 49 bytes of every task's `clientCapabilities`,
//! so it is left out and put back when the task is claimed. What is left is packed
//! ([`pack`]): the names and shapes every client declares become one byte each, so a client
//! that declares elicitation, sampling and roots stores 16 bytes instead of 75.

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
        return (pack(&json_text(capabilities)), false);
    }
    let mut stored = capabilities.clone();
    let Some(Value::Object(extensions)) = stored.get_mut("extensions") else {
        return (pack(&json_text(capabilities)), false);
    };
    extensions.remove(TASKS_EXTENSION);
    if extensions.is_empty() {
        stored.remove("extensions");
    }
    (pack(&json_text(&stored)), true)
}

/// What a record holds in place of a value kept in a key of its own (`aside` in the scripts'
/// prelude, which spells it too): long arguments, results and errors.
pub(super) const ASIDE: &str = "@aside";

/// A whole record as read (`HGETALL`), with `fields` set aside put back from `value`, the
/// content of their key.
pub(crate) fn put_back(
    record: &mut std::collections::BTreeMap<String, String>,
    fields: &[&str],
    value: Option<String>,
) {
    for field in fields {
        if record.get(*field).is_some_and(|v| v == ASIDE) {
            // Gone only when the record expires with it: show nothing rather than the marker.
            match &value {
                Some(value) => record.insert((*field).to_owned(), value.clone()),
                None => record.remove(*field),
            };
        }
    }
}

/// What [`pack`] replaces, each by the control byte beside it: the members of
/// `ClientCapabilities` that real clients declare, longest first. Serialised JSON never holds a
/// raw control byte (inside strings they are escaped), so a byte of this table in stored text
/// can only be one that [`pack`] put there, and text stored before packing (plain JSON)
/// unpacks to itself. Append only: records written with a code must still unpack.
const CODES: [(char, &str); 14] = [
    ('\u{1}', r#""elicitation":"#),
    ('\u{2}', r#""experimental":"#),
    ('\u{3}', r#""listChanged":true"#),
    ('\u{4}', r#""extensions":"#),
    ('\u{5}', r#""sampling":"#),
    ('\u{6}', r#""context":{}"#),
    ('\u{7}', r#""roots":"#),
    ('\u{8}', r#""tools":{}"#),
    ('\u{b}', r#""tasks":"#),
    ('\u{c}', r#""form":{}"#),
    ('\u{e}', r#""url":{}"#),
    ('\u{f}', r#""list":{}"#),
    ('\u{10}', r#""cancel":{}"#),
    ('\u{11}', "{}"),
];

/// JSON text with every phrase of [`CODES`] replaced by its byte, in one pass: at each place
/// the first phrase of the table that starts there (the longer ones come first).
fn pack(json: &str) -> String {
    let mut packed = String::with_capacity(json.len());
    let mut rest = json;
    while let Some(c) = rest.chars().next() {
        match CODES.iter().find(|(_, phrase)| rest.starts_with(phrase)) {
            Some((code, phrase)) => {
                packed.push(*code);
                rest = &rest[phrase.len()..];
            }
            None => {
                packed.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    packed
}

/// Text [`pack`] made, as the JSON it was made from.
fn unpack(stored: &str) -> String {
    let mut json = String::with_capacity(stored.len() * 4);
    for c in stored.chars() {
        match CODES.iter().find(|(code, _)| *code == c) {
            Some((_, phrase)) => json.push_str(phrase),
            None => json.push(c),
        }
    }
    json
}

/// A map as JSON text, serialised in place (it cannot fail: every key is a string).
fn json_text(map: &Map<String, Value>) -> String {
    serde_json::to_string(map).unwrap_or_default()
}

/// The stored `clientCapabilities` read back, with the declaration put back when it was left
/// out. Text that is not a JSON object is returned as it is (the worker treats it as none).
pub(super) fn restored_capabilities(stored: String, declared_tasks: bool) -> String {
    let stored = unpack(&stored);
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

    #[test]
    fn the_scripts_spell_the_aside_marker_as_the_store_does() {
        let prelude = include_str!("scripts/prelude.lua");
        assert!(prelude.contains(&format!("local ASIDE = '{ASIDE}'")));
    }

    #[test]
    fn a_value_set_aside_is_put_back_and_nothing_else_is() {
        let mut record: std::collections::BTreeMap<String, String> =
            [("result", ASIDE), ("msg", ASIDE)].map(|(k, v)| (k.to_owned(), v.to_owned())).into();
        put_back(&mut record, &["result", "error"], Some("{\"content\":[]}".to_owned()));
        assert_eq!(record["result"], "{\"content\":[]}");
        assert_eq!(record["msg"], ASIDE, "a status message that happens to read like the marker stays");
        let mut expired: std::collections::BTreeMap<String, String> = [("args".to_owned(), ASIDE.to_owned())].into();
        put_back(&mut expired, &["args"], None);
        assert!(expired.is_empty());
    }

    fn round_trip(capabilities: Value) -> (String, bool, Value) {
        let (stored, declared) = stored_capabilities(capabilities.as_object().unwrap());
        let restored = serde_json::from_str(&restored_capabilities(stored.clone(), declared)).unwrap();
        (unpack(&stored), declared, restored)
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

    #[test]
    fn what_real_clients_declare_packs_small_and_unpacks_exactly() {
        let rich = json!({
            "elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {"listChanged": true},
            "extensions": {"io.modelcontextprotocol/tasks": {}},
        });
        let (stored, declared) = stored_capabilities(rich.as_object().unwrap());
        assert!(declared);
        assert!(stored.len() <= 20, "{} bytes: {stored:?}", stored.len());
        let restored: Value = serde_json::from_str(&restored_capabilities(stored, true)).unwrap();
        assert_eq!(restored, rich);
    }

    #[test]
    fn text_stored_before_packing_unpacks_to_itself() {
        let plain = r#"{"elicitation":{},"sampling":{"tools":{}}}"#;
        assert_eq!(restored_capabilities(plain.into(), false), plain);
    }

    proptest::proptest! {
        /// Whatever a client declares, including the phrases inside its own strings and keys,
        /// and escaped control characters, comes back exactly.
        #[test]
        fn any_capabilities_round_trip(
            keys in proptest::collection::vec("(elicitation|sampling|roots|tools|\\{\\}|\"url\":\\{\\}|[a-z\u{1}-\u{11}]{0,8})", 0..6),
            flags in proptest::collection::vec(proptest::bool::ANY, 6),
        ) {
            let mut caps = Map::new();
            for (i, key) in keys.iter().enumerate() {
                let value = if flags[i] { json!({"listChanged": true, key.clone(): {}}) } else { json!(key) };
                caps.insert(key.clone(), value);
            }
            let (stored, declared) = stored_capabilities(&caps);
            let restored: Value = serde_json::from_str(&restored_capabilities(stored, declared)).unwrap();
            proptest::prop_assert_eq!(restored, Value::Object(caps));
        }
    }
}
