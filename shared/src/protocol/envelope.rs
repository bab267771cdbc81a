//! One JSON-RPC 2.0 message per POST: parsing the incoming envelope and building replies.
//!
//! The envelope is read into a struct that borrows from the body: `params` stays raw JSON
//! until the method's turn comes (see [`super::params`]).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::RpcError;
use super::params::{Params, present};

/// A request id exactly as the client sent it (string, number or `null`), echoed unchanged.
pub type RequestId = Value;

/// A parsed client message, borrowing from the body. `id: None` means a notification: the
/// `"id"` key was absent. `"id": null` is a request whose id is `null`.
#[derive(Debug, Clone)]
pub struct Incoming<'a> {
    pub id: Option<RequestId>,
    pub method: Cow<'a, str>,
    /// `params`, unread: the spec requires an object when present, checked by [`Self::params`].
    pub params: Option<&'a RawValue>,
}

impl<'a> Incoming<'a> {
    pub fn is_notification(&self) -> bool {
        self.id.is_none()
    }

    /// The params object's members. Absent params read as `{}`; anything else is `-32602`.
    pub fn params(&self) -> Result<Params<'a>, RpcError> {
        Params::parse(self.params)
    }
}

/// Why a body could not become an [`Incoming`]: the error, and the id to answer with (`null`
/// when the id itself was unreadable).
#[derive(Debug, Clone, PartialEq)]
pub struct Malformed {
    pub id: RequestId,
    pub error: RpcError,
}

/// The envelope's members, each kept whether or not it has the right type, so that each wrong
/// one gets its own error.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    method: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    params: Option<&'a RawValue>,
}

/// Parses one message. Batches (JSON arrays) are refused: 2026-07-28 carries one message per
/// POST.
pub fn parse(body: &[u8]) -> Result<Incoming<'_>, Malformed> {
    // serde reads a struct from an array too: only an object may go on.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(not_an_object(body));
    }
    let envelope: Envelope<'_> = serde_json::from_slice(body).map_err(|err| match err.is_data() {
        // A member sent twice.
        true => Malformed { id: Value::Null, error: RpcError::invalid_request(format!("invalid message: {err}")) },
        false => unparsable(&err),
    })?;
    let id = match envelope.id.map(RawValue::get) {
        None => None,
        Some(raw) if raw.starts_with(['"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 'n']) => {
            // Syntax is checked by now; a lone surrogate or an out-of-range number is not.
            Some(serde_json::from_str(raw).map_err(|_| invalid(Value::Null, "id must be a string, a number or null"))?)
        }
        Some(_) => return Err(invalid(Value::Null, "id must be a string, a number or null")),
    };
    let reply_id = id.clone().unwrap_or(Value::Null);
    if envelope.jsonrpc.map(RawValue::get) != Some(r#""2.0""#) {
        return Err(invalid(reply_id, "jsonrpc must be \"2.0\""));
    }
    let method = match envelope.method {
        Some(raw) => super::params::text(Some(raw)).ok_or_else(|| invalid(reply_id, "method must be a string"))?,
        None => return Err(invalid(reply_id, "method is required; clients send no responses")),
    };
    Ok(Incoming { id, method, params: envelope.params })
}

/// What a body that is not a JSON object gets: invalid JSON is a parse error; an array is a
/// batch, refused; any other value is an invalid request.
fn not_an_object(body: &[u8]) -> Malformed {
    match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
        Err(err) => unparsable(&err),
        Ok(_) if body.trim_ascii_start().starts_with(b"[") => invalid(Value::Null, "batch requests are not supported"),
        Ok(_) => invalid(Value::Null, "a JSON-RPC message must be an object"),
    }
}

fn unparsable(err: &serde_json::Error) -> Malformed {
    Malformed { id: Value::Null, error: RpcError::parse_error(format!("invalid JSON: {err}")) }
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
