use serde_json::json;

use super::*;
use crate::protocol::ErrorKind;

#[test]
fn absent_id_is_a_notification_but_null_id_is_a_request() {
    let n = parse(br#"{"jsonrpc":"2.0","method":"tasks/get"}"#).unwrap();
    assert!(n.is_notification());
    let r = parse(br#"{"jsonrpc":"2.0","id":null,"method":"tasks/get"}"#).unwrap();
    assert_eq!(r.id, Some(Value::Null));
}

#[test]
fn batches_and_garbage_are_refused() {
    assert_eq!(parse(b"[]").unwrap_err().error.kind, ErrorKind::InvalidRequest);
    assert_eq!(parse(b"{nope").unwrap_err().error.kind, ErrorKind::ParseError);
    assert_eq!(parse(b"42").unwrap_err().error.kind, ErrorKind::InvalidRequest);
}

#[test]
fn bad_shape_keeps_a_readable_id() {
    let err = parse(br#"{"jsonrpc":"1.0","id":7,"method":"x"}"#).unwrap_err();
    assert_eq!(err.id, json!(7));
    assert_eq!(err.error.kind, ErrorKind::InvalidRequest);
    let err = parse(br#"{"jsonrpc":"2.0","id":{"a":1},"method":"x"}"#).unwrap_err();
    assert_eq!(err.id, Value::Null);
}

#[test]
fn non_object_params_are_invalid_params() {
    let msg = parse(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#).unwrap();
    assert_eq!(msg.params_object().unwrap_err().message, "params must be an object");
    let msg = parse(br#"{"jsonrpc":"2.0","id":1,"method":"x"}"#).unwrap();
    assert!(msg.params_object().unwrap().is_empty());
}
