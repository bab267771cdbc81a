//! The wire form of a task (`DetailedTask`), built from the stored record.
//!
//! Status-specific members appear only when they apply: `inputRequests` while
//! `input_required`, `result` when `completed`, `error` when `failed`.

use std::io::Write as _;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::protocol::result;

use super::{Owner, TaskStatus, iso8601_ms, write_iso8601_ms};

/// A task as read from the store, ready to render.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub task_id: String,
    pub owner: Owner,
    pub status: TaskStatus,
    pub status_message: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub ttl_ms: u64,
    pub poll_interval_ms: u64,
    /// Outstanding input requests by key (only while `input_required`).
    pub input_requests: Map<String, Value>,
    /// The stored result (see `protocol::result::stored_result`), JSON text that is spliced
    /// into responses rather than parsed.
    pub result: Option<Box<RawValue>>,
    pub error: Option<Value>,
    pub version: u64,
}

/// A stored record that cannot be rendered: a bug or a foreign writer, never the client's fault.
#[derive(Debug, thiserror::Error)]
#[error("corrupt task record field {field}")]
pub struct SnapshotError {
    pub field: &'static str,
}

impl Snapshot {
    /// The flat `Task` members shared by CreateTaskResult, GetTaskResult and notifications.
    pub fn task_fields(&self) -> Map<String, Value> {
        let mut m = Map::with_capacity(10);
        m.insert("taskId".into(), self.task_id.clone().into());
        m.insert("status".into(), self.status.as_str().into());
        if let Some(msg) = &self.status_message {
            m.insert("statusMessage".into(), msg.clone().into());
        }
        m.insert("createdAt".into(), iso8601_ms(self.created_at_ms).into());
        m.insert("lastUpdatedAt".into(), iso8601_ms(self.updated_at_ms).into());
        m.insert("ttlMs".into(), self.ttl_ms.into());
        m.insert("pollIntervalMs".into(), self.poll_interval_ms.into());
        m
    }

    /// The `DetailedTask` members: the task fields plus whichever status-specific one applies.
    pub fn detailed_fields(&self) -> Map<String, Value> {
        let mut m = self.task_fields();
        match self.status {
            TaskStatus::InputRequired => {
                m.insert("inputRequests".into(), Value::Object(self.input_requests.clone()));
            }
            TaskStatus::Completed => {
                m.insert("result".into(), self.parsed_result());
            }
            TaskStatus::Failed => {
                m.insert("error".into(), self.error.clone().unwrap_or(Value::Null));
            }
            TaskStatus::Working | TaskStatus::Cancelled => {}
        }
        m
    }

    /// A buffer size that holds [`Self::write_detailed`]'s output with the result spliced in,
    /// so that a response is allocated once.
    pub fn encoded_len_hint(&self) -> usize {
        256 + self.result.as_ref().map_or(0, |r| r.get().len())
    }

    /// The result as the wire carries it, parsed (`null` when there is none).
    pub fn parsed_result(&self) -> Value {
        let stored = self.result.as_deref().and_then(|raw| serde_json::from_str(raw.get()).ok());
        stored.map_or(Value::Null, result::tool_result)
    }

    /// Writes the members of [`Self::detailed_fields`], without the enclosing braces, straight
    /// into `out`: no tree is built and the stored result is spliced in as it is.
    pub fn write_detailed(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(br#""taskId":"#);
        json_string(out, &self.task_id);
        out.extend_from_slice(br#","status":""#);
        out.extend_from_slice(self.status.as_str().as_bytes());
        out.push(b'"');
        if let Some(message) = &self.status_message {
            out.extend_from_slice(br#","statusMessage":"#);
            json_string(out, message);
        }
        out.extend_from_slice(br#","createdAt":""#);
        write_iso8601_ms(out, self.created_at_ms);
        out.extend_from_slice(br#"","lastUpdatedAt":""#);
        write_iso8601_ms(out, self.updated_at_ms);
        // Into a Vec: writing cannot fail.
        let _ = write!(out, r#"","ttlMs":{},"pollIntervalMs":{}"#, self.ttl_ms, self.poll_interval_ms);
        match self.status {
            TaskStatus::InputRequired => {
                out.extend_from_slice(br#","inputRequests":"#);
                let _ = serde_json::to_writer(&mut *out, &self.input_requests);
            }
            TaskStatus::Completed => {
                out.extend_from_slice(br#","result":"#);
                match &self.result {
                    Some(stored) => result::write_tool_result(stored, out),
                    None => out.extend_from_slice(b"null"),
                }
            }
            TaskStatus::Failed => {
                out.extend_from_slice(br#","error":"#);
                let _ = serde_json::to_writer(&mut *out, self.error.as_ref().unwrap_or(&Value::Null));
            }
            TaskStatus::Working | TaskStatus::Cancelled => {}
        }
    }
}

/// A JSON string literal, escaped. Into a Vec: writing cannot fail.
fn json_string(out: &mut Vec<u8>, text: &str) {
    let _ = serde_json::to_writer(out, text);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::task::Owner;

    fn snapshot(status: TaskStatus) -> Snapshot {
        let mut input_requests = Map::new();
        input_requests.insert("k".into(), json!({"method": "elicitation/create", "params": {"message": "Go?"}}));
        Snapshot {
            task_id: "tsk_0a".into(),
            owner: Owner { tenant: "t".into(), principal: "p".into() },
            status,
            status_message: Some("say \"hi\" \u{e9}\n</script>".into()),
            created_at_ms: 1_755_772_200_123,
            updated_at_ms: 1_755_772_201_000,
            ttl_ms: 60_000,
            poll_interval_ms: 500,
            input_requests,
            result: Some(result::stored_result(r#"{"content":[{"type":"text","text":"ok"}]}"#.into()).unwrap()),
            error: Some(json!({"code": -32603, "message": "boom"})),
            version: 3,
        }
    }

    #[test]
    fn the_written_form_is_the_built_one() {
        for status in [
            TaskStatus::Working,
            TaskStatus::InputRequired,
            TaskStatus::Completed,
            TaskStatus::Failed,
            TaskStatus::Cancelled,
        ] {
            let snapshot = snapshot(status);
            let written = result::encode_complete(0, |out| snapshot.write_detailed(out));
            let written: Value = serde_json::from_slice(&written).unwrap();
            assert_eq!(written, result::complete(snapshot.detailed_fields()), "{status:?}");
        }
        let mut bare = snapshot(TaskStatus::Completed);
        (bare.status_message, bare.result) = (None, None);
        let written: Value =
            serde_json::from_slice(&result::encode_complete(0, |out| bare.write_detailed(out))).unwrap();
        assert_eq!(written, result::complete(bare.detailed_fields()));
    }
}
