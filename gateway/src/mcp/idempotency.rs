//! Idempotent task creation: a `tools/call` that creates a task may carry an idempotency key,
//! in the `Idempotency-Key` header or in `_meta["io.taskgate/idempotencyKey"]` (for clients
//! that cannot set a header per request). The key becomes the task's id: a MAC of the caller
//! and the key under a secret every replica shares, so a retry through any replica, even one
//! sent while the first is still in flight, names the same task. A retry finds that task before
//! it is admitted as a new one, and is answered with the task as it is in Redis now (whatever
//! its status), counted neither as a create nor against the active-task cap; `create_task`,
//! idempotent for one owner, id and tool, settles a retry that races the first request. A
//! retry with the same key but another tool, other arguments or other pre-task answers is
//! refused with HTTP 422. Another caller's same key is another id, and tells it nothing.

use std::collections::BTreeMap;

use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::{Digest, Sha256};
use taskgate_shared::protocol::RpcError;
use taskgate_shared::protocol::meta::IDEMPOTENCY_KEY_META;
use taskgate_shared::store::SharedSecret;
use taskgate_shared::task::{Owner, TaskId};

use crate::error::GatewayError;
use crate::state::AppState;

/// The header, as the IETF draft names it.
const HEADER: &str = "idempotency-key";
/// The longest key taken, in bytes (the draft sets no bound; UUIDs and ULIDs are far shorter).
pub(crate) const MAX_KEY_BYTES: usize = 255;

/// The request's idempotency key, when it sent one: the header (a structured-field string,
/// quoted, or the bare text), or the `_meta` member; both must then agree. Checked: 1 to
/// [`MAX_KEY_BYTES`] visible ASCII characters.
pub(crate) fn key(headers: &HeaderMap, meta: Option<&str>) -> Result<Option<String>, RpcError> {
    let mut values = headers.get_all(HEADER).iter();
    let header = match (values.next(), values.next()) {
        (None, _) => None,
        (Some(_), Some(_)) => return Err(RpcError::invalid_params("more than one Idempotency-Key header")),
        (Some(value), None) => Some(unquote(value.to_str().map_err(|_| invalid())?)),
    };
    let key = match (header, meta) {
        (Some(header), Some(meta)) if header != meta => {
            return Err(RpcError::invalid_params(format!(
                "the Idempotency-Key header and {IDEMPOTENCY_KEY_META} differ"
            )));
        }
        (Some(key), _) => key.to_owned(),
        (None, Some(meta)) => meta.to_owned(),
        (None, None) => return Ok(None),
    };
    let plain = key.bytes().all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\');
    if key.is_empty() || key.len() > MAX_KEY_BYTES || !plain {
        return Err(invalid());
    }
    Ok(Some(key))
}

fn invalid() -> RpcError {
    RpcError::invalid_params(format!(
        "an idempotency key must be 1 to {MAX_KEY_BYTES} visible ASCII characters, without quotes or backslashes"
    ))
}

/// `"abc"` (the draft's structured-field string) or `abc`, trimmed.
fn unquote(value: &str) -> &str {
    let value = value.trim();
    value.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(value)
}

/// The task id `key` names for `owner`: the same on every replica, another for another owner.
pub(crate) async fn task_id(state: &AppState, owner: &Owner, key: &str) -> Result<TaskId, GatewayError> {
    let secret = state.secrets.get(&state.store, SharedSecret::Idempotency).await?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&secret).unwrap_or_else(|_| unreachable!("HMAC takes any key"));
    // The owner's key escapes its separator, and the NUL cannot occur in a checked key: no two
    // (owner, key) pairs feed the MAC the same bytes.
    mac.update(owner.key().as_bytes());
    mac.update(b"\0");
    mac.update(key.as_bytes());
    let digest = mac.finalize().into_bytes();
    let bits = u128::from_be_bytes(digest[1..17].try_into().unwrap_or_default());
    Ok(TaskId::derived(state.config.redis.queue_shards, u16::from(digest[0]), bits))
}

/// What a retry must repeat: the tool, its arguments and the answers gathered before the task
/// existed (MRTR rounds), each in compact form with its keys sorted, so whitespace or key
/// order in the client's text does not tell two equal calls apart, and another answer does.
pub(crate) fn fingerprint(tool: &str, arguments: &Value, answers: &BTreeMap<String, Value>) -> String {
    let mut digest =
        Sha256::new().chain_update(tool.as_bytes()).chain_update(b"\0").chain_update(arguments.to_string());
    for (key, answer) in answers {
        // A key cannot hold a NUL unescaped once serialized, and `to_string` escapes it, so the
        // separators keep two different (key, answer) lists apart.
        digest.update(b"\0");
        digest.update(serde_json::to_string(key).unwrap_or_default());
        digest.update(b"\0");
        digest.update(answer.to_string());
    }
    digest.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for value in values {
            map.append(HEADER, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn keys_come_from_the_header_or_the_meta_and_must_agree() {
        assert_eq!(key(&headers(&[]), None).unwrap(), None);
        assert_eq!(key(&headers(&["\"k-1\""]), None).unwrap().as_deref(), Some("k-1"));
        assert_eq!(key(&headers(&["k-1"]), None).unwrap().as_deref(), Some("k-1"));
        assert_eq!(key(&headers(&[]), Some("k-2")).unwrap().as_deref(), Some("k-2"));
        assert_eq!(key(&headers(&["\"k\""]), Some("k")).unwrap().as_deref(), Some("k"));
        assert!(key(&headers(&["a"]), Some("b")).is_err(), "two different keys");
        assert!(key(&headers(&["a", "a"]), None).is_err(), "two headers");
    }

    #[test]
    fn keys_are_bounded_and_plain() {
        assert!(key(&headers(&[]), Some("")).is_err());
        assert!(key(&headers(&[]), Some(&"k".repeat(MAX_KEY_BYTES))).is_ok());
        assert!(key(&headers(&[]), Some(&"k".repeat(MAX_KEY_BYTES + 1))).is_err());
        for bad in ["a b", "a\u{7}b", "é", "a\"b", "a\\b"] {
            assert!(key(&headers(&[]), Some(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn fingerprints_follow_the_tool_and_the_arguments_not_their_spelling() {
        let a: Value = serde_json::from_str(r#"{"x": 1, "y": [1, 2]}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"y":[1,2],"x":1}"#).unwrap();
        let none = BTreeMap::new();
        assert_eq!(fingerprint("t", &a, &none), fingerprint("t", &b, &none));
        assert_ne!(fingerprint("t", &a, &none), fingerprint("u", &a, &none));
        assert_ne!(fingerprint("t", &a, &none), fingerprint("t", &serde_json::json!({"x": 2, "y": [1, 2]}), &none));
    }

    #[test]
    fn fingerprints_follow_the_answers_gathered_before_the_task() {
        let args = serde_json::json!({});
        let answered = |value: Value| BTreeMap::from([("approve".to_owned(), value)]);
        let yes = answered(serde_json::json!({"action": "accept", "content": {"ok": true}}));
        let no = answered(serde_json::json!({"action": "decline"}));
        assert_ne!(fingerprint("t", &args, &BTreeMap::new()), fingerprint("t", &args, &yes));
        assert_ne!(fingerprint("t", &args, &yes), fingerprint("t", &args, &no));
        assert_eq!(fingerprint("t", &args, &yes), fingerprint("t", &args, &yes.clone()));
    }
}
