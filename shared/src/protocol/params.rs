//! A request's `params`, borrowed from the body: each member a method reads is kept as raw
//! JSON text, and only the method that reads it decodes it, into the type it needs. Nothing
//! builds a `serde_json::Value` tree of the whole request.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_json::value::RawValue;

use super::RpcError;

/// The members of `params` that some method reads. A member sent as `null` is `Some("null")`,
/// not `None`: methods tell an absent member from a null one where the spec does.
#[derive(Debug, Default, Deserialize)]
pub struct Params<'a> {
    #[serde(rename = "_meta", default, borrow, deserialize_with = "present")]
    pub meta: Option<&'a RawValue>,
    #[serde(rename = "taskId", default, borrow, deserialize_with = "present")]
    pub task_id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub name: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub arguments: Option<&'a RawValue>,
    #[serde(rename = "inputResponses", default, borrow, deserialize_with = "present")]
    pub input_responses: Option<&'a RawValue>,
    #[serde(rename = "requestState", default, borrow, deserialize_with = "present")]
    pub request_state: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub notifications: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub uri: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub cursor: Option<&'a RawValue>,
    #[serde(rename = "ref", default, borrow, deserialize_with = "present")]
    pub reference: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub argument: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub context: Option<&'a RawValue>,
    /// `events/subscribe` and `events/unsubscribe`: where to deliver.
    #[serde(default, borrow, deserialize_with = "present")]
    pub delivery: Option<&'a RawValue>,
    /// `events/subscribe`: the suggested lifetime (`null` asks for no expiry).
    #[serde(rename = "ttlMs", default, borrow, deserialize_with = "present")]
    pub ttl_ms: Option<&'a RawValue>,
    /// `events/poll`.
    #[serde(rename = "maxAgeMs", default, borrow, deserialize_with = "present")]
    pub max_age_ms: Option<&'a RawValue>,
    #[serde(rename = "maxEvents", default, borrow, deserialize_with = "present")]
    pub max_events: Option<&'a RawValue>,
}

impl<'a> Params<'a> {
    /// `params` as sent: absent reads as `{}`; anything but an object is `-32602`.
    pub fn parse(raw: Option<&'a RawValue>) -> Result<Self, RpcError> {
        let Some(raw) = raw else { return Ok(Self::default()) };
        if !raw.get().starts_with('{') {
            return Err(RpcError::invalid_params("params must be an object"));
        }
        // The body is valid JSON by now, so the only failure left is a member sent twice.
        serde_json::from_str(raw.get()).map_err(|err| RpcError::invalid_params(format!("invalid params: {err}")))
    }

    /// The member the `Mcp-Name` header mirrors, by its wire name.
    pub fn named(&self, member: &str) -> Option<&'a RawValue> {
        match member {
            "name" => self.name,
            "uri" => self.uri,
            "taskId" => self.task_id,
            _ => None,
        }
    }
}

/// A member's text when it is a JSON string: borrowed from the body unless it has escapes.
pub fn text(member: Option<&RawValue>) -> Option<Cow<'_, str>> {
    let raw = member?.get();
    if !raw.starts_with('"') {
        return None;
    }
    match serde_json::from_str::<&str>(raw) {
        Ok(text) => Some(Cow::Borrowed(text)),
        Err(_) => serde_json::from_str::<String>(raw).ok().map(Cow::Owned),
    }
}

/// A member decoded as a JSON value, for the methods that work on one.
pub fn value(member: Option<&RawValue>) -> Option<Value> {
    // Raw members were validated as JSON when the body was parsed.
    member.and_then(|raw| serde_json::from_str(raw.get()).ok())
}

/// Keeps a member that is present, even as `null` (`Option`'s own impl would read `null` as
/// absent).
pub fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(deserializer).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(json: &str) -> Result<Params<'_>, RpcError> {
        let raw: &RawValue = serde_json::from_str(json).unwrap();
        Params::parse(Some(raw))
    }

    #[test]
    fn members_are_borrowed_raw_and_null_is_present() {
        let params = parsed(r#"{"taskId":"tsk_1","arguments":null,"other":[1,{"x":2}]}"#).unwrap();
        assert_eq!(text(params.task_id).as_deref(), Some("tsk_1"));
        assert!(matches!(text(params.task_id), Some(Cow::Borrowed(_))));
        assert_eq!(params.arguments.map(RawValue::get), Some("null"));
        assert!(params.name.is_none());
    }

    #[test]
    fn text_decodes_escapes_and_refuses_other_types() {
        let params = parsed(r#"{"name":"h\u00e9llo","uri":7}"#).unwrap();
        assert_eq!(text(params.name).as_deref(), Some("héllo"));
        assert_eq!(text(params.uri), None);
        assert_eq!(value(params.uri), Some(Value::from(7)));
    }

    #[test]
    fn non_objects_and_repeated_members_are_invalid_params() {
        assert_eq!(parsed("[1]").unwrap_err().message, "params must be an object");
        assert_eq!(parsed("null").unwrap_err().message, "params must be an object");
        let twice = parsed(r#"{"taskId":"a","taskId":"b"}"#).unwrap_err();
        assert!(twice.message.contains("duplicate field `taskId`"), "{}", twice.message);
        assert!(Params::parse(None).unwrap().meta.is_none());
    }
}
