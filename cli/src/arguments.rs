//! A call's arguments from the command line: `--json`/`--json-file`, then each `--arg` typed by
//! the tool's input schema.

use serde_json::{Map, Value};

use crate::exit::CliError;

/// Builds the arguments object. `schema` is the tool's `inputSchema`.
pub(crate) fn build(
    base: Option<&str>,
    pairs: &[(String, String)],
    schema: &Value,
) -> Result<Map<String, Value>, CliError> {
    let mut arguments = match base {
        None => Map::new(),
        Some(text) => match serde_json::from_str(text) {
            Ok(Value::Object(map)) => map,
            Ok(_) => return Err(CliError::usage("--json must be a JSON object")),
            Err(err) => return Err(CliError::usage(format!("--json is not valid JSON: {err}"))),
        },
    };
    for (key, raw) in pairs {
        let property = schema.pointer(&format!("/properties/{}", key.replace('~', "~0").replace('/', "~1")));
        arguments.insert(key.clone(), typed(key, raw, property)?);
    }
    Ok(arguments)
}

/// `raw` as the type the schema asks for; a string when it asks for one (or says nothing and
/// `raw` is not JSON).
fn typed(key: &str, raw: &str, property: Option<&Value>) -> Result<Value, CliError> {
    let wanted = property.and_then(|p| p.get("type")).and_then(Value::as_str);
    let bad = |what: &str| CliError::usage(format!("--arg {key}={raw}: expected {what}"));
    match wanted {
        Some("string") => Ok(Value::from(raw)),
        Some("integer") => raw.trim().parse::<i64>().map(Value::from).map_err(|_| bad("an integer")),
        Some("number") => match serde_json::from_str::<Value>(raw.trim()) {
            Ok(n @ Value::Number(_)) => Ok(n),
            _ => Err(bad("a number")),
        },
        Some("boolean") => match raw.trim() {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Err(bad("true or false")),
        },
        Some(kind @ ("object" | "array")) => match serde_json::from_str::<Value>(raw) {
            Ok(v) if (kind == "object") == v.is_object() && (kind == "array") == v.is_array() => Ok(v),
            _ => Err(bad(&format!("a JSON {kind}"))),
        },
        // No type (or several): JSON when it parses as JSON, else the text.
        _ => Ok(serde_json::from_str(raw).unwrap_or_else(|_| Value::from(raw))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn values_take_the_type_the_schema_asks_for() {
        let schema = json!({"properties": {
            "ms": {"type": "integer"}, "size": {"type": "string"}, "ratio": {"type": "number"},
            "on": {"type": "boolean"}, "opts": {"type": "object"}, "ids": {"type": "array"}, "any": {}
        }});
        let pairs: Vec<(String, String)> = [
            ("ms", "3000"),
            ("size", "42"),
            ("ratio", "0.5"),
            ("on", "true"),
            ("opts", "{\"a\":1}"),
            ("ids", "[1,2]"),
            ("any", "[true]"),
            ("free", "hello"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        let built = build(Some("{\"ms\": 1, \"keep\": \"me\"}"), &pairs, &schema).unwrap();
        assert_eq!(
            Value::Object(built),
            json!({"ms": 3000, "size": "42", "ratio": 0.5, "on": true, "opts": {"a": 1}, "ids": [1, 2],
                   "any": [true], "free": "hello", "keep": "me"})
        );
    }

    #[test]
    fn a_value_of_the_wrong_type_is_a_usage_error() {
        let schema = json!({"properties": {"ms": {"type": "integer"}, "opts": {"type": "object"}}});
        for (k, v) in [("ms", "soon"), ("ms", "1.5"), ("opts", "[1]")] {
            let err = build(None, &[(k.into(), v.into())], &schema).unwrap_err();
            assert_eq!(err.exit, crate::exit::Exit::Usage, "{k}={v}");
        }
        assert!(build(Some("[1]"), &[], &schema).is_err());
        assert!(build(Some("{"), &[], &schema).is_err());
    }
}
