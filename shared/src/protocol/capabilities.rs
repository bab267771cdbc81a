//! Which client capability an input request needs. A server never asks for a kind of input the
//! current request did not declare (SEP-2322 "Capability gate"; elicitation form/URL rules from
//! client/elicitation.mdx).

use serde_json::{Map, Value, json};

use super::RpcError;

/// `Err(-32021)` naming what is missing, unless `capabilities` (a `clientCapabilities` object)
/// covers every request (`{method, params}`) in `requests`.
pub fn check_input_requests<'a>(
    capabilities: &Map<String, Value>,
    requests: impl IntoIterator<Item = &'a Value>,
) -> Result<(), RpcError> {
    let declares = |name: &str| capabilities.get(name).is_some_and(Value::is_object);
    let elicitation = capabilities.get("elicitation").and_then(Value::as_object);
    for request in requests {
        let required = match request.get("method").and_then(Value::as_str).unwrap_or_default() {
            "elicitation/create" if request.pointer("/params/mode").and_then(Value::as_str) == Some("url") => {
                (!elicitation.is_some_and(|e| e.contains_key("url"))).then(|| json!({"elicitation": {"url": {}}}))
            }
            // `elicitation: {}` and `{form: {}}` mean form support; `{url: {}}` alone does not.
            "elicitation/create" => (!elicitation.is_some_and(|e| e.is_empty() || e.contains_key("form")))
                .then(|| json!({"elicitation": {"form": {}}})),
            "sampling/createMessage" => (!declares("sampling")).then(|| json!({"sampling": {}})),
            "roots/list" => (!declares("roots")).then(|| json!({"roots": {}})),
            _ => None,
        };
        if let Some(required) = required {
            return Err(RpcError::missing_capability(required));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn caps(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn each_kind_needs_its_capability() {
        let form = json!({"method": "elicitation/create", "params": {"mode": "form"}});
        let url = json!({"method": "elicitation/create", "params": {"mode": "url"}});
        let sampling = json!({"method": "sampling/createMessage", "params": {}});
        assert!(check_input_requests(&caps(json!({"elicitation": {}})), [&form]).is_ok());
        assert!(check_input_requests(&caps(json!({"elicitation": {"url": {}}})), [&form]).is_err());
        assert!(check_input_requests(&caps(json!({"elicitation": {"url": {}}})), [&url]).is_ok());
        assert_eq!(
            check_input_requests(&caps(json!({})), [&sampling]).unwrap_err().data,
            Some(json!({"requiredCapabilities": {"sampling": {}}}))
        );
    }
}
