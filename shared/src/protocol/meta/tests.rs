use serde_json::json;

use super::*;
use crate::protocol::ErrorKind;

/// `params._meta` as a request would carry it.
fn params(meta: Value) -> Box<RawValue> {
    RawValue::from_string(meta.to_string()).unwrap()
}

/// [`super::validate`] on a `_meta` built here.
fn validate(meta: &RawValue, check: impl FnOnce(&str) -> Result<(), RpcError>) -> Result<ValidMeta, RpcError> {
    super::validate(Some(meta), check)
}

fn ok_headers(_: &str) -> Result<(), RpcError> {
    Ok(())
}

#[test]
fn meta_is_checked_in_order_with_exact_messages() {
    let cases = [
        (json!(null), "missing request _meta"),
        (json!({}), "missing protocol version"),
        (json!({"io.modelcontextprotocol/protocolVersion": null}), "missing protocol version"),
        (json!({"io.modelcontextprotocol/protocolVersion": 7}), "missing protocol version"),
        (json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"}), "missing client capabilities"),
        (
            json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                   "io.modelcontextprotocol/clientCapabilities": []}),
            "missing client capabilities",
        ),
        (
            json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                   "io.modelcontextprotocol/clientCapabilities": {},
                   "io.modelcontextprotocol/clientInfo": {"name": "x"}}),
            "invalid client info",
        ),
    ];
    assert_eq!(super::validate(None, ok_headers).unwrap_err().message, "missing request _meta");
    for (meta, message) in cases {
        let err = validate(&params(meta.clone()), ok_headers).unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidParams, "{meta}");
        assert_eq!(err.message, message, "{meta}");
    }
}

#[test]
fn unsupported_version_comes_before_capabilities() {
    let err =
        validate(&params(json!({"io.modelcontextprotocol/protocolVersion": "2025-11-25"})), ok_headers).unwrap_err();
    assert_eq!(err.kind, ErrorKind::UnsupportedProtocolVersion);
}

#[test]
fn header_check_runs_before_version_support() {
    let err = validate(&params(json!({"io.modelcontextprotocol/protocolVersion": "1999-01-01"})), |_| {
        Err(RpcError::header_mismatch("MCP-Protocol-Version", "x"))
    })
    .unwrap_err();
    assert_eq!(err.kind, ErrorKind::HeaderMismatch);
}

#[test]
fn capabilities_are_read_from_this_request() {
    let m = validate(
        &params(json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                       "io.modelcontextprotocol/clientCapabilities":
                           {"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}},
                       "io.modelcontextprotocol/clientInfo": {"name": "x", "version": "1"}})),
        ok_headers,
    )
    .unwrap();
    let form = json!({"method": "elicitation/create", "params": {"mode": "form"}});
    assert!(m.declares_tasks());
    assert!(crate::protocol::capabilities::check_input_requests(&m.capabilities, [&form]).is_ok());
    let m = validate(
        &params(json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                       "io.modelcontextprotocol/clientCapabilities": {"extensions": {}, "elicitation": {"url": {}}}})),
        ok_headers,
    )
    .unwrap();
    assert!(!m.declares_tasks());
    assert!(crate::protocol::capabilities::check_input_requests(&m.capabilities, [&form]).is_err());
}

#[test]
fn traceparent_is_read_only_when_sent() {
    let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let meta = params(json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "traceparent": tp}));
    assert_eq!(traceparent(Some(&meta)).as_deref(), Some(tp));
    assert_eq!(traceparent(Some(&params(json!({"traceparent": 7})))), None);
    assert_eq!(traceparent(Some(&params(json!({"x": 1})))), None);
    assert_eq!(traceparent(None), None);
}

#[test]
fn related_task_ids_are_an_array_of_strings_deduplicated_and_capped() {
    let with = |ids: Value| {
        validate(
            &params(json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                           "io.modelcontextprotocol/clientCapabilities": {},
                           "io.modelcontextprotocol/relatedTaskIds": ids})),
            ok_headers,
        )
    };
    assert!(with(json!([])).unwrap().related_task_ids.is_empty(), "empty is none");
    assert_eq!(with(json!(["a", "b", "a"])).unwrap().related_task_ids, ["a", "b"]);
    let many: Vec<String> = (0..20).map(|i| format!("t{i}")).collect();
    let kept = with(json!(many)).unwrap().related_task_ids;
    assert_eq!(kept, many[..MAX_RELATED_TASK_IDS], "past the cap ignored, not refused");
    let message = "io.modelcontextprotocol/relatedTaskIds must be an array of task id strings";
    for bad in [json!("a"), json!(null), json!({}), json!(["a", 1]), json!([["a"]])] {
        let err = with(bad.clone()).unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidParams, "{bad}");
        assert_eq!(err.message, message, "{bad}");
    }
    let mut past_the_cap: Vec<Value> = many.iter().map(|s| json!(s)).collect();
    past_the_cap.push(json!(7));
    assert!(with(Value::Array(past_the_cap)).is_err(), "a non-string past the cap is refused too");
}
