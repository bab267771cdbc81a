//! The task domain: ids, statuses and the wire snapshot (`DetailedTask`). No I/O here.

mod id;
mod snapshot;
mod timestamp;
mod transition;

pub use id::TaskId;
pub use snapshot::{Snapshot, SnapshotError};
pub use timestamp::{iso8601_ms, now_ms, parse_iso8601_ms, write_iso8601_ms};
pub use transition::{Actor, Transition};

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

impl Owner {
    /// One string naming the pair, for per-principal bookkeeping (stream slots, poll pacing)
    /// and the subject a `requestState` is bound to. Unambiguous whatever the names hold:
    /// each part has `%` and `/` percent-escaped before the two are joined with `/`, so
    /// (`a/b`, `c`) and (`a`, `b/c`) differ. Names with neither character read exactly as the
    /// plain `tenant/principal` join.
    pub fn key(&self) -> String {
        let mut key = String::with_capacity(self.tenant.len() + self.principal.len() + 1);
        escape_into(&mut key, &self.tenant);
        key.push('/');
        escape_into(&mut key, &self.principal);
        key
    }
}

fn escape_into(out: &mut String, part: &str) {
    for c in part.chars() {
        match c {
            '%' => out.push_str("%25"),
            '/' => out.push_str("%2F"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Owner;

    fn owner(tenant: &str, principal: &str) -> Owner {
        Owner { tenant: tenant.into(), principal: principal.into() }
    }

    #[test]
    fn an_owner_key_is_unambiguous() {
        assert_ne!(owner("a/b", "c").key(), owner("a", "b/c").key());
        assert_ne!(owner("a%2Fb", "c").key(), owner("a/b", "c").key());
        assert_ne!(owner("a%", "2F").key(), owner("a", "%2F").key());
        assert_eq!(owner("acme", "alice").key(), "acme/alice", "plain names keep the plain join");
    }
}
