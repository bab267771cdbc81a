//! What the task operations take and give back. Here, below both the store methods and the
//! scripts: a script builds these from its reply, so they cannot live beside the method that
//! calls the script without a circle.

use crate::task::{Owner, TaskId, TaskStatus};

/// What `create_task` writes.
#[derive(Debug, Clone)]
pub struct NewTask<'a> {
    pub id: &'a TaskId,
    pub owner: &'a Owner,
    pub tool: &'a str,
    /// The worker pool whose queue the task goes on (the catalogue's route for the tool); kept
    /// in the record, so every requeue goes to the same pool.
    pub pool: &'a str,
    /// The arguments as JSON text.
    pub arguments: &'a str,
    pub ttl_ms: u64,
    pub poll_interval_ms: u64,
    pub status_message: Option<&'a str>,
    pub traceparent: Option<&'a str>,
    /// The creating request's `clientCapabilities`, as JSON text in the form
    /// [`stored_capabilities`](crate::store::stored_capabilities) gives: tools may only ask for input
    /// the caller declared.
    pub client_capabilities: &'a str,
    /// Whether the Tasks extension's declaration was left out of `client_capabilities` (the
    /// claim puts it back).
    pub declares_tasks: bool,
    /// Answers gathered before the task existed (key, answer JSON).
    pub answers: &'a [(String, String)],
    /// Durable steps recorded before the task existed (step name, result JSON): those an
    /// inline call's earlier round recorded before it parked for input.
    pub steps: &'a [(String, String)],
    /// Whether related task ids were kept beside the task ([`Store::put_related`](crate::store::Store::put_related)) before
    /// this create: the claim reads them only then.
    pub related: bool,
    /// The tool's saved state to start from (what [`Store::tool_state`](crate::store::Store::tool_state) read from an earlier
    /// run that parked): an inline call resumed by an MRTR retry.
    pub tool_state: Option<&'a str>,
    /// Whether the task was admitted into its tenant's active-task count (so that whoever
    /// ends it knows to remove it).
    pub counted: bool,
    /// Keep its history for the operator console: a timeline, and entries in the task indexes
    /// (the gateway's `--console`; docs/console.md).
    pub history: bool,
    /// A keyed create's fingerprint (a digest of the tool and its arguments): a retry with the
    /// same key but another tool or other arguments is refused ([`StoreError::KeyReused`](crate::store::StoreError::KeyReused)).
    pub fingerprint: Option<&'a str>,
    /// The tenant's share of its pool while several tenants have tasks queued (positive;
    /// 1 unless configured: docs/design.md, "Fair dispatch").
    pub weight: f64,
    /// The tenant has events on (`--events`, `--events-tenants`): the task's status changes go
    /// to its owner's outbox, kept this long and this far (docs/events.md, 2.3). `None`: the
    /// task never has an outbox, and its transitions pay nothing.
    pub events: Option<super::OutboxLimits>,
}

/// What a create did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// A new task, created at this time (ms, Redis time).
    New { created_at_ms: i64 },
    /// The same owner made this task with this id before (a re-sent create, or a retry with
    /// the same idempotency key): nothing was changed, counted or published.
    Replayed { created_at_ms: i64 },
}

impl Created {
    pub fn created_at_ms(self) -> i64 {
        match self {
            Self::New { created_at_ms } | Self::Replayed { created_at_ms } => created_at_ms,
        }
    }
}

/// The outcome of `tasks/update`'s write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
    NotFound,
    /// Nothing applied: the task was not waiting, or no answer matched an outstanding key.
    Ignored,
    Applied {
        version: u64,
        resumed: bool,
        /// When resumed: how long the task waited in `input_required`.
        waited: Option<std::time::Duration>,
    },
}

/// The outcome of `tasks/cancel`'s write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    NotFound,
    AlreadyTerminal,
    /// Queued or parked: cancelled at once, from this status (`waited`: how long it had been
    /// parked, when it was).
    Cancelled {
        from: TaskStatus,
        waited: Option<std::time::Duration>,
    },
    /// Running: flagged, and the lease holder signalled.
    Signalled,
}
