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

#[test]
fn taskgate_codes_round_trip_through_their_kinds() {
    for kind in [ErrorKind::Unauthorized, ErrorKind::Forbidden, ErrorKind::RateLimited] {
        assert_eq!(ErrorKind::from_code(kind.code()), kind);
    }
    assert_eq!(RpcError::unauthorized().code(), -31401);
    assert_eq!(RpcError::forbidden().code(), -31403);
    assert_eq!(
        RpcError::rate_limited("poll", 250).to_value(),
        json!({"code": -31429, "message": "rate limit exceeded", "data": {"limit": "poll", "retryAfterMs": 250}})
    );
    // A tool's own code outside the reserved ranges passes through.
    assert_eq!(ErrorKind::from_code(-1), ErrorKind::Application(-1));
}
