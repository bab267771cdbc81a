use serde_json::json;

use super::*;
use crate::protocol::ErrorKind;

fn params(meta: Value) -> Map<String, Value> {
    json!({ "_meta": meta }).as_object().unwrap().clone()
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
