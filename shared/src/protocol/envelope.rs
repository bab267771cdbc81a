//! One JSON-RPC 2.0 message per POST: parsing the incoming envelope and building replies.

use serde_json::{Map, Value};

use super::RpcError;

/// A request id exactly as the client sent it (string, number or `null`), echoed unchanged.
pub type RequestId = Value;

/// A parsed client message. `id: None` means a notification: the `"id"` key was absent.
/// `"id": null` is a request whose id is `null`.
#[derive(Debug, Clone, PartialEq)]
pub struct Incoming {
    pub id: Option<RequestId>,
    pub method: String,
    /// `params`, which the spec requires to be an object when present.
    pub params: Option<Value>,
}

impl Incoming {
    pub fn is_notification(&self) -> bool {
        self.id.is_none()
    }

    /// The params object. Absent params read as `{}`; anything else is `-32602`.
    pub fn params_object(&self) -> Result<&Map<String, Value>, RpcError> {
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        match &self.params {
            None => Ok(EMPTY.get_or_init(Map::new)),
            Some(Value::Object(map)) => Ok(map),
            Some(_) => Err(RpcError::invalid_params("params must be an object")),
        }
    }
}

/// Why a body could not become an [`Incoming`]: the error, and the id to answer with (`null`
/// when the id itself was unreadable).
#[derive(Debug, Clone, PartialEq)]
pub struct Malformed {
    pub id: RequestId,
    pub error: RpcError,
}

/// Parses one message. Batches (JSON arrays) are refused: 2026-07-28 carries one message per
/// POST.
pub fn parse(body: &[u8]) -> Result<Incoming, Malformed> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|err| Malformed { id: Value::Null, error: RpcError::parse_error(format!("invalid JSON: {err}")) })?;
    let mut obj = match value {
        Value::Object(obj) => obj,
        Value::Array(_) => return Err(invalid(Value::Null, "batch requests are not supported")),
        _ => return Err(invalid(Value::Null, "a JSON-RPC message must be an object")),
    };
    let id = match obj.remove("id") {
        None => None,
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => Some(id),
        Some(_) => {
            return Err(invalid(Value::Null, "id must be a string, a number or null"));
        }
    };
    let reply_id = id.clone().unwrap_or(Value::Null);
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid(reply_id, "jsonrpc must be \"2.0\""));
    }
    let method = match obj.remove("method") {
        Some(Value::String(method)) => method,
        Some(_) => return Err(invalid(reply_id, "method must be a string")),
        None => {
            return Err(invalid(reply_id, "method is required; clients send no responses"));
        }
    };
    Ok(Incoming { id, method, params: obj.remove("params") })
}

fn invalid(id: RequestId, message: &'static str) -> Malformed {
    Malformed { id, error: RpcError::invalid_request(message) }
}

/// `{"jsonrpc":"2.0","id":…,"result":…}`
pub fn success(id: &RequestId, result: Value) -> Value {
    let mut obj = Map::with_capacity(3);
    obj.insert("jsonrpc".into(), "2.0".into());
    obj.insert("id".into(), id.clone());
    obj.insert("result".into(), result);
    Value::Object(obj)
}

/// [`success`] as bytes, written into one buffer sized up front, with a result that is
/// already encoded (`result` must be one JSON value).
pub fn encode_success(id: &RequestId, result: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(result.len() + 64);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    // Into a Vec, of a Value: writing cannot fail.
    let _ = serde_json::to_writer(&mut out, id);
    out.extend_from_slice(br#","result":"#);
    out.extend_from_slice(result);
    out.push(b'}');
    out
}

/// `{"jsonrpc":"2.0","id":…,"error":{…}}`
pub fn failure(id: &RequestId, error: &RpcError) -> Value {
    let mut obj = Map::with_capacity(3);
    obj.insert("jsonrpc".into(), "2.0".into());
    obj.insert("id".into(), id.clone());
    obj.insert("error".into(), error.to_value());
    Value::Object(obj)
}

/// [`notification`] as JSON text, written into one buffer: `write_params` writes the members of
/// `params` (without braces); `size_hint` is their expected length.
pub fn encode_notification(method: &str, size_hint: usize, write_params: impl FnOnce(&mut Vec<u8>)) -> String {
    let mut out = Vec::with_capacity(size_hint + method.len() + 48);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","method":"#);
    // Into a Vec: writing cannot fail.
    let _ = serde_json::to_writer(&mut out, method);
    out.extend_from_slice(br#","params":{"#);
    write_params(&mut out);
    out.extend_from_slice(b"}}");
    // What serde_json writes is UTF-8; a writer that broke that gets an empty message, which
    // the client refuses, rather than a panic.
    String::from_utf8(out).unwrap_or_default()
}

/// A server-to-client notification (no id).
pub fn notification(method: &str, params: Value) -> Value {
    let mut obj = Map::with_capacity(3);
    obj.insert("jsonrpc".into(), "2.0".into());
    obj.insert("method".into(), method.into());
    obj.insert("params".into(), params);
    Value::Object(obj)
}

#[cfg(test)]
mod tests;
