//! The task domain: ids, statuses and the wire snapshot (`DetailedTask`). No I/O here.

mod id;
mod snapshot;
mod timestamp;

pub use id::TaskId;
pub use snapshot::{Snapshot, SnapshotError};
pub use timestamp::{iso8601_ms, now_ms, parse_iso8601_ms, write_iso8601_ms};

/// A task's status. `completed`, `failed` and `cancelled` are terminal and never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskStatus {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::InputRequired => "input_required",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "working" => Self::Working,
            "input_required" => Self::InputRequired,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "cancelled" => Self::Cancelled,
            _ => return None,
        })
    }

    pub const fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who owns a task: the authenticated tenant and principal that created it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub tenant: String,
    pub principal: String,
}
