use serde_json::json;

use super::*;

#[test]
fn unsupported_version_data_is_exact() {
    let err = RpcError::unsupported_version("2025-11-25");
    assert_eq!(
        err.to_value(),
        json!({"code": -32022, "message": "unsupported protocol version",
               "data": {"supported": ["2026-07-28"], "requested": "2025-11-25"}})
    );
}

#[test]
fn missing_extension_data_is_exact() {
    assert_eq!(
        RpcError::missing_tasks_extension().to_value()["data"],
        json!({"requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}})
    );
}

#[test]
fn data_member_is_absent_when_empty() {
    assert!(RpcError::method_not_found().to_value().get("data").is_none());
}
