//! Mirrored headers: `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` must agree with the
//! body (SEP-2243). Any missing (where required), duplicated, undecodable or mismatched value
//! is `-32020`.

use axum::http::HeaderMap;
use serde_json::{Map, Value};
use taskgate_shared::protocol::{RpcError, header_value};

const PROTOCOL_VERSION: &str = "MCP-Protocol-Version";
const METHOD: &str = "Mcp-Method";
const NAME: &str = "Mcp-Name";

/// Checks the mirrored headers against the body.
///
/// `Mcp-Name` is required on `tools/call`. On the task methods it is checked when present and
/// required only with `strict`: fastmcp-tasks 4.1.4 omits it, and any replica serves any task,
/// so taskgate does not need it for routing.
pub(crate) fn check(
    headers: &HeaderMap,
    body_version: &str,
    method: &str,
    params: &Map<String, Value>,
    strict: bool,
) -> Result<(), RpcError> {
    let version = single(headers, PROTOCOL_VERSION)?.ok_or_else(|| missing(PROTOCOL_VERSION))?;
    if version != body_version {
        return Err(RpcError::header_mismatch(PROTOCOL_VERSION, "does not match _meta protocolVersion"));
    }
    let header_method = single(headers, METHOD)?.ok_or_else(|| missing(METHOD))?;
    if header_method != method {
        return Err(RpcError::header_mismatch(METHOD, "does not match the body's method"));
    }
    let (field, required) = match method {
        "tools/call" => ("name", true),
        "tasks/get" | "tasks/update" | "tasks/cancel" => ("taskId", strict),
        _ => return Ok(()),
    };
    match single(headers, NAME)? {
        None if required => Err(missing(NAME)),
        None => Ok(()),
        // A body value of the wrong type is reported by the method as -32602.
        Some(name) => match params.get(field).and_then(Value::as_str) {
            Some(body) if body != name => {
                Err(RpcError::header_mismatch(NAME, format!("does not match params.{field}")))
            }
            _ => Ok(()),
        },
    }
}

/// `Mcp-Param-{Name}` headers of a `tools/call` whose tool declares `x-mcp-header: Name` on a
/// top-level argument: present exactly when the argument is, and equal to it (integers compared
/// numerically, booleans as `true`/`false`).
pub(crate) fn check_params(headers: &HeaderMap, input_schema: &Value, arguments: &Value) -> Result<(), RpcError> {
    let Some(properties) = input_schema.get("properties").and_then(Value::as_object) else { return Ok(()) };
    for (property, schema) in properties {
        let Some(name) = schema.get("x-mcp-header").and_then(Value::as_str) else { continue };
        let header = format!("Mcp-Param-{name}");
        let label: &'static str = "Mcp-Param-*";
        let value = arguments.get(property).filter(|v| !v.is_null());
        let mut values = headers.get_all(header.as_str()).iter();
        let sent = values.next();
        if values.next().is_some() {
            return Err(RpcError::header_mismatch(label, format!("duplicate {header} header")));
        }
        let sent = sent
            .map(|raw| header_value::decode(raw.as_bytes()))
            .transpose()
            .map_err(|err| RpcError::header_mismatch(label, format!("{header}: {err}")))?;
        match (value, sent) {
            (None, None) => {}
            (Some(_), None) => return Err(RpcError::header_mismatch(label, format!("{header} is required"))),
            (None, Some(_)) => {
                return Err(RpcError::header_mismatch(label, format!("{header} sent without the argument")));
            }
            (Some(value), Some(sent)) => {
                if !same_value(value, &sent) {
                    return Err(RpcError::header_mismatch(
                        label,
                        format!("{header} does not match arguments.{property}"),
                    ));
                }
            }
        }
    }
    Ok(())
}

fn same_value(value: &Value, header: &str) -> bool {
    match value {
        Value::String(s) => s == header,
        Value::Bool(b) => header == if *b { "true" } else { "false" },
        Value::Number(n) => match (n.as_i64(), header.parse::<i64>()) {
            (Some(a), Ok(b)) => a == b,
            _ => n.as_f64().zip(header.parse::<f64>().ok()).is_some_and(|(a, b)| a == b),
        },
        _ => false,
    }
}

fn missing(header: &'static str) -> RpcError {
    RpcError::header_mismatch(header, "required header is missing")
}

/// The decoded value of a header that may appear at most once.
fn single(headers: &HeaderMap, name: &'static str) -> Result<Option<String>, RpcError> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(RpcError::header_mismatch(name, "duplicate header"));
    }
    header_value::decode(value.as_bytes()).map(Some).map_err(|err| RpcError::header_mismatch(name, err.to_string()))
}
