//! A task's move from one status to another, as the store saw it happen. Each store call
//! whose script changed a status reports one from its typed reply, so every transition is
//! counted wherever it was made (a client's request, a worker, an operator, the reaper) and no
//! caller has to remember to.

use std::time::Duration;

use super::TaskStatus;

/// Who made a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Actor {
    /// The task's owner: a create, an answer, a cancel.
    Client,
    /// The lease holder: a result, a question, a release.
    Worker,
    /// An operator, through the console.
    Operator,
    /// A worker's reaper, after a lease ran out.
    Reaper,
}

impl Actor {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Client => "client",
            Self::Worker => "worker",
            Self::Operator => "operator",
            Self::Reaper => "reaper",
        }
    }
}

/// One transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    /// `None` at creation.
    pub from: Option<TaskStatus>,
    pub to: TaskStatus,
    pub by: Actor,
    /// How long the task had been in `from`, when the script knew it.
    pub spent: Option<Duration>,
}

impl Transition {
    /// A transition whose time in `from` is not known to the store.
    pub const fn new(from: Option<TaskStatus>, to: TaskStatus, by: Actor) -> Self {
        Self { from, to, by, spent: None }
    }

    /// With the time spent in `from`.
    #[must_use]
    pub const fn after(mut self, spent: Option<Duration>) -> Self {
        self.spent = spent;
        self
    }

    /// The `from` label: `none` at creation.
    pub fn from_label(&self) -> &'static str {
        self.from.map_or("none", TaskStatus::as_str)
    }
}
