//! Mirrored headers: `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` must agree with the
//! body (SEP-2243). Any missing (where required), duplicated, undecodable or mismatched value
//! is `-32020`.

use std::borrow::Cow;

use axum::http::HeaderMap;
use serde_json::Value;
use taskgate_shared::protocol::method::NameHeader;
use taskgate_shared::protocol::{Method, Params, RpcError, header_value, params};

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
    method: Method,
    sent: &Params<'_>,
    strict: bool,
) -> Result<(), RpcError> {
    let version = single(headers, PROTOCOL_VERSION)?.ok_or_else(|| missing(PROTOCOL_VERSION))?;
    if version != body_version {
        return Err(RpcError::header_mismatch(PROTOCOL_VERSION, "does not match _meta protocolVersion"));
    }
    let header_method = single(headers, METHOD)?.ok_or_else(|| missing(METHOD))?;
    if header_method != method.name() {
        return Err(RpcError::header_mismatch(METHOD, "does not match the body's method"));
    }
    let (field, required) = match method.name_header() {
        NameHeader::Required(field) => (field, true),
        NameHeader::Optional(field) => (field, strict),
        NameHeader::None => return Ok(()),
    };
    match single(headers, NAME)? {
        None if required => Err(missing(NAME)),
        None => Ok(()),
        // A body value of the wrong type is reported by the method as -32602.
        Some(name) => match params::text(sent.named(field)) {
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
fn single<'h>(headers: &'h HeaderMap, name: &'static str) -> Result<Option<Cow<'h, str>>, RpcError> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(RpcError::header_mismatch(name, "duplicate header"));
    }
    header_value::decode(value.as_bytes()).map(Some).map_err(|err| RpcError::header_mismatch(name, err.to_string()))
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, HeaderValue};
    use serde_json::json;
    use taskgate_shared::protocol::Method;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn params(text: &str) -> Params<'_> {
        Params::parse(Some(serde_json::from_str(text).unwrap())).unwrap()
    }

    fn reason(result: Result<(), RpcError>) -> String {
        let err = result.unwrap_err();
        assert_eq!(err.code(), -32020);
        err.message.into_owned()
    }

    const BASE: [(&str, &str); 2] = [(PROTOCOL_VERSION, "2026-07-28"), (METHOD, "tools/call")];

    #[test]
    fn mcp_name_must_match_the_body_on_tools_call() {
        let text = json!({"name": "echo"}).to_string();
        let body = params(&text);
        let ok = headers(&[BASE[0], BASE[1], (NAME, "echo")]);
        assert_eq!(check(&ok, "2026-07-28", Method::ToolsCall, &body, false), Ok(()));
        let missing = headers(&BASE);
        assert!(reason(check(&missing, "2026-07-28", Method::ToolsCall, &body, false)).contains("missing"));
        let other = headers(&[BASE[0], BASE[1], (NAME, "Echo")]);
        assert!(reason(check(&other, "2026-07-28", Method::ToolsCall, &body, false)).contains("params.name"));
        let twice = headers(&[BASE[0], BASE[1], (NAME, "echo"), (NAME, "echo")]);
        assert!(reason(check(&twice, "2026-07-28", Method::ToolsCall, &body, false)).contains("duplicate"));
    }

    #[test]
    fn encoded_names_are_compared_decoded() {
        let text = json!({"name": "héllo"}).to_string();
        let body = params(&text);
        let encoded = header_value::encode("héllo");
        let sent = headers(&[BASE[0], BASE[1], (NAME, encoded.as_str())]);
        assert_eq!(check(&sent, "2026-07-28", Method::ToolsCall, &body, false), Ok(()));
    }

    #[test]
    fn task_methods_need_mcp_name_only_when_strict() {
        let text = json!({"taskId": "t_1"}).to_string();
        let body = params(&text);
        let without = headers(&[(PROTOCOL_VERSION, "2026-07-28"), (METHOD, "tasks/get")]);
        assert_eq!(check(&without, "2026-07-28", Method::TasksGet, &body, false), Ok(()));
        assert!(reason(check(&without, "2026-07-28", Method::TasksGet, &body, true)).contains("missing"));
        let wrong = headers(&[(PROTOCOL_VERSION, "2026-07-28"), (METHOD, "tasks/get"), (NAME, "t_2")]);
        assert!(reason(check(&wrong, "2026-07-28", Method::TasksGet, &body, false)).contains("params.taskId"));
    }

    #[test]
    fn version_and_method_headers_must_agree() {
        let text = json!({}).to_string();
        let body = params(&text);
        let old = headers(&[(PROTOCOL_VERSION, "2025-11-25"), (METHOD, "tools/list")]);
        assert!(reason(check(&old, "2026-07-28", Method::ToolsList, &body, false)).contains("protocolVersion"));
        let other = headers(&[(PROTOCOL_VERSION, "2026-07-28"), (METHOD, "tools/call")]);
        assert!(reason(check(&other, "2026-07-28", Method::ToolsList, &body, false)).contains("method"));
    }

    #[test]
    fn param_headers_compare_numbers_and_booleans_by_value() {
        let schema = json!({"properties": {"n": {"x-mcp-header": "N"}, "b": {"x-mcp-header": "B"}}});
        let sent = headers(&[("Mcp-Param-N", "42"), ("Mcp-Param-B", "true")]);
        assert_eq!(check_params(&sent, &schema, &json!({"n": 42, "b": true})), Ok(()));
        assert_eq!(check_params(&headers(&[("Mcp-Param-N", "42.0")]), &schema, &json!({"n": 42.0})), Ok(()));
        assert!(check_params(&sent, &schema, &json!({"n": 41, "b": true})).is_err());
        assert!(check_params(&HeaderMap::new(), &schema, &json!({"n": 1})).is_err(), "required with the argument");
        assert!(check_params(&sent, &schema, &json!({})).is_err(), "sent without the argument");
    }
}
