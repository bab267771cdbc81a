//! One page of a list with an opaque cursor, and the list's cache hints.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use taskgate_shared::protocol::{RpcError, params, result};

/// Items per page.
const PAGE: usize = 100;
/// Lists are the same for every caller under one deployment, so shared caches may keep them.
const TTL_MS: u64 = 60_000;

/// The page of `items` that `cursor` (`params.cursor`) points at, as the result
/// `{<field>: [...], nextCursor?, ttlMs, cacheScope}`. Every page has the same cache scope.
pub(crate) fn page(items: Vec<Value>, cursor: Option<&RawValue>, field: &str) -> Result<Value, RpcError> {
    let start = match cursor.map(RawValue::get) {
        None | Some("null") => 0,
        // A list that shrank since the cursor was made ends with an empty page.
        Some(_) => {
            let cursor = params::text(cursor).ok_or_else(invalid)?;
            decode(&cursor).ok_or_else(invalid)?.min(items.len())
        }
    };
    let end = (start + PAGE).min(items.len());
    let mut fields = Map::with_capacity(4);
    fields.insert(field.into(), Value::Array(items[start..end].to_vec()));
    if end < items.len() {
        fields.insert("nextCursor".into(), encode(end).into());
    }
    fields.insert("ttlMs".into(), TTL_MS.into());
    fields.insert("cacheScope".into(), "public".into());
    Ok(result::complete(fields))
}

fn invalid() -> RpcError {
    RpcError::invalid_params("invalid cursor")
}

fn encode(position: usize) -> String {
    URL_SAFE_NO_PAD.encode(format!("p1:{position}"))
}

fn decode(cursor: &str) -> Option<usize> {
    let text = String::from_utf8(URL_SAFE_NO_PAD.decode(cursor).ok()?).ok()?;
    text.strip_prefix("p1:")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn raw(value: &Value) -> Box<RawValue> {
        RawValue::from_string(value.to_string()).unwrap()
    }

    #[test]
    fn pages_follow_their_cursors_to_the_end() {
        let items: Vec<Value> = (0..250).map(Value::from).collect();
        let mut cursor: Option<Box<RawValue>> = None;
        let mut seen = Vec::new();
        loop {
            let page = page(items.clone(), cursor.as_deref(), "things").unwrap();
            assert_eq!((page["ttlMs"].clone(), page["cacheScope"].clone()), (json!(TTL_MS), json!("public")));
            seen.extend(page["things"].as_array().unwrap().iter().cloned());
            match page.get("nextCursor") {
                Some(next) => cursor = Some(raw(next)),
                None => break,
            };
        }
        assert_eq!(seen, items);
    }

    #[test]
    fn a_cursor_not_made_here_is_invalid_params() {
        for cursor in [json!("nope"), json!(7), json!(URL_SAFE_NO_PAD.encode("p2:1"))] {
            assert_eq!(page(vec![json!(1)], Some(&raw(&cursor)), "x").unwrap_err().code(), -32602);
        }
        // Past the end of a list that shrank: an empty last page.
        let last = page(vec![json!(1)], Some(&raw(&json!(encode(999)))), "x").unwrap();
        assert_eq!((last["x"].clone(), last.get("nextCursor")), (json!([]), None));
    }
}
