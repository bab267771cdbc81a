//! The wire form of a task (`DetailedTask`), built from the stored record.
//!
//! Status-specific members appear only when they apply: `inputRequests` while
//! `input_required`, `result` when `completed`, `error` when `failed`.

use serde_json::{Map, Value};

use crate::protocol::result;

use super::{Owner, TaskStatus, iso8601_ms};

/// A task as read from the store, ready to render.
#[derive(Debug, Clone, PartialEq)]
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
    pub result: Option<Value>,
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
                m.insert("result".into(), self.result.clone().map_or(Value::Null, result::tool_result));
            }
            TaskStatus::Failed => {
                m.insert("error".into(), self.error.clone().unwrap_or(Value::Null));
            }
            TaskStatus::Working | TaskStatus::Cancelled => {}
        }
        m
    }
}
