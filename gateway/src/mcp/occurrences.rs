//! The one event type taskgate serves through the Events extension (docs/events.md, 2.2):
//! `taskgate.task.status`, its descriptor, the subscription `arguments` it takes, and an
//! occurrence as the wire has it, and the params a poll and a stream share. What `events/list`,
//! `events/poll` and `events/stream` share.

use std::collections::HashSet;

use serde_json::{Map, Value, json};
use taskgate_shared::protocol::{ErrorKind, Params, RpcError, params};
use taskgate_shared::store::{EventCursor, OutboxEntry};
use taskgate_shared::task::{TaskStatus, iso8601_ms};

use crate::config::EventsSettings;
use crate::mcp::Call;

/// The event type's name: ours, not a reserved `mcp.` one (docs/events.md, Part 5, 2).
pub(crate) const EVENT_NAME: &str = "taskgate.task.status";

/// The extension's identifier, as `server/discover` offers it.
pub(crate) const EVENTS_EXTENSION: &str = "io.modelcontextprotocol/events";

/// `taskIds` one subscription may name.
const MAX_TASK_IDS: usize = 100;

/// The events settings, or `-32601` (as an unknown method) when `--events` is off.
pub(crate) fn enabled<'a>(call: &Call<'a>) -> Result<&'a EventsSettings, RpcError> {
    call.state.config.events.as_ref().ok_or_else(RpcError::method_not_found)
}

/// The descriptor `events/list` returns. Webhook delivery is listed only with authentication
/// (the extension forbids it without an authenticated principal).
pub(crate) fn descriptor(authenticated: bool) -> Value {
    let delivery: &[&str] = if authenticated { &["poll", "push", "webhook"] } else { &["poll", "push"] };
    let statuses = ["working", "input_required", "completed", "failed", "cancelled"];
    json!({
        "name": EVENT_NAME,
        "description": "A task of yours changed status.",
        "delivery": delivery,
        "inputSchema": {
            "type": "object",
            "properties": {
                "taskIds": { "type": "array", "items": { "type": "string" }, "maxItems": MAX_TASK_IDS },
                "statuses": { "type": "array", "items": { "enum": statuses } }
            },
            "additionalProperties": false
        },
        "payloadSchema": {
            "type": "object",
            "properties": {
                "taskId": { "type": "string" },
                "status": { "type": "string" },
                "version": { "type": "integer" }
            },
            "required": ["taskId", "status", "version"]
        }
    })
}

/// A subscription's `name` and `arguments`, checked against the descriptor.
#[derive(Debug, Default)]
pub(crate) struct Subscription {
    /// `None`: every task of the caller's principal.
    task_ids: Option<HashSet<String>>,
    /// `None`: every status.
    statuses: Option<HashSet<&'static str>>,
}

impl Subscription {
    /// `params.name` must be the event type (else `-32023`, `data.kind: "event"`), and
    /// `params.arguments` absent, `null` or an object of the schema above (else `-32602`).
    pub(crate) fn parse(params: &Params<'_>) -> Result<Self, RpcError> {
        match params::text(params.name).as_deref() {
            Some(EVENT_NAME) => {}
            Some(_) => {
                return Err(
                    RpcError::new(ErrorKind::NotFound, "unknown event name").with_data(json!({ "kind": "event" }))
                );
            }
            None => return Err(RpcError::invalid_params("name must be a string")),
        }
        let arguments = match params::value(params.arguments) {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(map)) => map,
            Some(_) => return Err(RpcError::invalid_params("arguments must be an object")),
        };
        let mut subscription = Self::default();
        for (key, value) in arguments {
            match key.as_str() {
                "taskIds" => {
                    let ids = strings(&value, "taskIds")?;
                    if ids.len() > MAX_TASK_IDS {
                        return Err(RpcError::invalid_params(format!("taskIds names at most {MAX_TASK_IDS} tasks")));
                    }
                    subscription.task_ids = Some(ids.into_iter().collect());
                }
                "statuses" => {
                    let mut statuses = HashSet::new();
                    for status in strings(&value, "statuses")? {
                        let status =
                            TaskStatus::parse(&status).ok_or_else(|| RpcError::invalid_params("unknown status"))?;
                        statuses.insert(status.as_str());
                    }
                    subscription.statuses = Some(statuses);
                }
                _ => return Err(RpcError::invalid_params("arguments: unknown member")),
            }
        }
        Ok(subscription)
    }

    /// Whether the entry is one this subscription asked for. Ids of other principals' tasks
    /// never match: the caller reads only its own outboxes.
    pub(crate) fn matches(&self, entry: &OutboxEntry) -> bool {
        self.task_ids.as_ref().is_none_or(|ids| ids.contains(&entry.task_id))
            && self.statuses.as_ref().is_none_or(|s| s.contains(entry.status.as_str()))
    }
}

fn strings(value: &Value, member: &str) -> Result<Vec<String>, RpcError> {
    let not = || RpcError::invalid_params(format!("{member} must be an array of strings"));
    value.as_array().ok_or_else(not)?.iter().map(|v| v.as_str().map(str::to_owned).ok_or_else(not)).collect()
}

/// An occurrence (docs/events.md, 1.3): the same object on every path.
pub(crate) fn occurrence(entry: &OutboxEntry) -> Value {
    json!({
        "eventId": entry.event_id(),
        "name": EVENT_NAME,
        "timestamp": iso8601_ms(i64::try_from(entry.updated_ms).unwrap_or(i64::MAX)),
        "data": { "taskId": entry.task_id, "status": entry.status, "version": entry.version },
    })
}

/// `params.cursor`: absent or `null` is now; a string must be one of ours (else `-32602`).
pub(crate) fn cursor(params: &Params<'_>) -> Result<Option<EventCursor>, RpcError> {
    match params.cursor {
        None => Ok(None),
        Some(raw) if raw.get() == "null" => Ok(None),
        Some(raw) => {
            let text = params::text(Some(raw)).ok_or_else(|| RpcError::invalid_params("cursor must be a string"))?;
            EventCursor::decode(&text).map(Some).map_err(|_| RpcError::invalid_params("invalid cursor"))
        }
    }
}

/// An optional non-negative integer member (`null` reads as absent).
pub(crate) fn whole(member: Option<&serde_json::value::RawValue>, name: &str) -> Result<Option<u64>, RpcError> {
    match params::value(member) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => {
            value.as_u64().map(Some).ok_or_else(|| RpcError::invalid_params(format!("{name} must be a whole number")))
        }
    }
}
