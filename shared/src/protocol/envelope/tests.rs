use serde_json::json;

use super::*;
use crate::protocol::ErrorKind;

#[test]
fn absent_id_is_a_notification_but_null_id_is_a_request() {
    let n = parse(br#"{"jsonrpc":"2.0","method":"tasks/get"}"#).unwrap();
    assert!(n.is_notification());
    let r = parse(br#"{"jsonrpc":"2.0","id":null,"method":"tasks/get"}"#).unwrap();
    assert_eq!(r.id, Some(Value::Null));
    let r = parse(br#"{"jsonrpc":"2.0","id":"a\"b","method":"tasks/get"}"#).unwrap();
    assert_eq!(r.id, Some(json!("a\"b")));
    assert_eq!(r.method, "tasks/get");
}

#[test]
fn batches_and_garbage_are_refused() {
    let kind = |body: &[u8]| parse(body).unwrap_err().error.kind;
    assert_eq!(kind(b"[]"), ErrorKind::InvalidRequest);
    assert_eq!(kind(br#" ["2.0", 1, "tasks/get"]"#), ErrorKind::InvalidRequest, "not read as a struct");
    assert_eq!(kind(b"{nope"), ErrorKind::ParseError);
    assert_eq!(kind(b"[nope"), ErrorKind::ParseError);
    assert_eq!(kind(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":}}"#), ErrorKind::ParseError);
    assert_eq!(kind(br#"{"jsonrpc":"2.0","id":1,"method":"x"} trailing"#), ErrorKind::ParseError);
    assert_eq!(kind(b"42"), ErrorKind::InvalidRequest);
    assert_eq!(kind(br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"x"}"#), ErrorKind::InvalidRequest);
}

#[test]
fn bad_shape_keeps_a_readable_id() {
    let err = parse(br#"{"jsonrpc":"1.0","id":7,"method":"x"}"#).unwrap_err();
    assert_eq!(err.id, json!(7));
    assert_eq!(err.error.kind, ErrorKind::InvalidRequest);
    let err = parse(br#"{"jsonrpc":"2.0","id":{"a":1},"method":"x"}"#).unwrap_err();
    assert_eq!(err.id, Value::Null);
    let err = parse(br#"{"jsonrpc":"2.0","id":"\ud800","method":"x"}"#).unwrap_err();
    assert_eq!((err.id, err.error.kind), (Value::Null, ErrorKind::InvalidRequest), "an id that cannot decode");
    let err = parse(br#"{"jsonrpc":"2.0","id":"k","method":7}"#).unwrap_err();
    assert_eq!((err.id, err.error.message.as_ref()), (json!("k"), "method must be a string"));
}

#[test]
fn non_object_params_are_invalid_params() {
    let msg = parse(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#).unwrap();
    assert_eq!(msg.params().unwrap_err().message, "params must be an object");
    let msg = parse(br#"{"jsonrpc":"2.0","id":1,"method":"x"}"#).unwrap();
    assert!(msg.params().unwrap().meta.is_none());
}
