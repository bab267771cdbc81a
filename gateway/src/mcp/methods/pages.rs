//! One page of a list with an opaque cursor, and the list's cache hints.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value};
use taskgate_shared::protocol::{RpcError, result};

/// Items per page.
const PAGE: usize = 100;
/// Lists are the same for every caller under one deployment, so shared caches may keep them.
const TTL_MS: u64 = 60_000;

/// The page of `items` that `params.cursor` points at, as the result `{<field>: [...],
/// nextCursor?, ttlMs, cacheScope}`. Every page has the same cache scope.
pub(crate) fn page(items: Vec<Value>, params: &Map<String, Value>, field: &str) -> Result<Value, RpcError> {
    let start = match params.get("cursor") {
        None | Some(Value::Null) => 0,
        // A list that shrank since the cursor was made ends with an empty page.
        Some(Value::String(cursor)) => decode(cursor).ok_or_else(invalid)?.min(items.len()),
        Some(_) => return Err(invalid()),
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

    #[test]
    fn pages_follow_their_cursors_to_the_end() {
        let items: Vec<Value> = (0..250).map(Value::from).collect();
        let mut params = Map::new();
        let mut seen = Vec::new();
        loop {
            let page = page(items.clone(), &params, "things").unwrap();
            assert_eq!((page["ttlMs"].clone(), page["cacheScope"].clone()), (json!(TTL_MS), json!("public")));
            seen.extend(page["things"].as_array().unwrap().iter().cloned());
            match page.get("nextCursor") {
                Some(cursor) => params.insert("cursor".into(), cursor.clone()),
                None => break,
            };
        }
        assert_eq!(seen, items);
    }

    #[test]
    fn a_cursor_not_made_here_is_invalid_params() {
        for cursor in [json!("nope"), json!(7), json!(URL_SAFE_NO_PAD.encode("p2:1"))] {
            let params = Map::from_iter([("cursor".to_owned(), cursor)]);
            assert_eq!(page(vec![json!(1)], &params, "x").unwrap_err().code(), -32602);
        }
        // Past the end of a list that shrank: an empty last page.
        let params = Map::from_iter([("cursor".to_owned(), json!(encode(999)))]);
        let last = page(vec![json!(1)], &params, "x").unwrap();
        assert_eq!((last["x"].clone(), last.get("nextCursor")), (json!([]), None));
    }
}
