//! What the lease holder's operations give back (claim, renew, mark, park, hold, release,
//! reclaim), below both the store methods and the scripts that build them from their replies.

use std::time::Duration;

use crate::task::TaskId;

/// A claimed task: what the tool runs with.
#[derive(Debug, Clone)]
pub struct Claim {
    pub task_id: TaskId,
    pub fence: u64,
    pub tool: String,
    /// Arguments as JSON text.
    pub arguments: String,
    pub traceparent: Option<String>,
    pub cancel_requested: bool,
    /// Recorded input responses, key -> JSON text.
    pub answers: Vec<(String, String)>,
    /// The creating request's `clientCapabilities` (JSON text).
    pub client_capabilities: String,
    /// What the tool saved when it last parked the task for input (JSON text).
    pub tool_state: Option<String>,
    /// The durable steps earlier runs recorded, name -> result JSON text (read by the claim
    /// itself: no extra round trip).
    pub steps: Vec<(String, String)>,
    /// How long it waited queued (since it was created, released, reclaimed or answered), by
    /// this process's clock against the record's queue time; the store has timed it already.
    pub queued_for: Option<Duration>,
    /// The owner's tenant (whether counted or not).
    pub owner_tenant: String,
    /// The owner's principal: whose identity a per-principal upstream acts as.
    pub owner_principal: String,
    /// The task ids the call named as related (`relatedTaskIds`) that its owner owned when the
    /// task was created; empty for none.
    pub related_tasks: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    Held { cancel_requested: bool },
    Lost,
}

/// What [`Store::mark_started`](crate::store::Store::mark_started) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Started {
    /// No earlier run of this task got this far.
    First,
    /// A run under an earlier fencing token got this far: its side effect may have happened.
    Before {
        fence: u64,
    },
    LeaseLost,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parked {
    Parked,
    /// A cancel was requested meanwhile; the task ended cancelled.
    CancelledInstead,
    LeaseLost,
    /// The tool asked for a key that was issued before (keys are lifetime-unique).
    KeyReused(String),
}

/// What [`Store::hold_for_input`](crate::store::Store::hold_for_input) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    /// The task shows `input_required`; this worker keeps the lease.
    Held,
    /// A cancel is pending: nothing was written.
    CancelPending,
    LeaseLost,
    KeyReused(String),
}

/// What [`Store::held_answer`](crate::store::Store::held_answer) found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeldAnswer {
    /// The answer (JSON text); the task is working again.
    Answered(String),
    Waiting,
    /// The task ended meanwhile (cancelled, or expired).
    Ended,
    LeaseLost,
}

/// What [`Store::release`](crate::store::Store::release) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    Requeued,
    /// A cancel was pending: the task ended cancelled.
    Cancelled,
    /// It held a question for its creator: the task failed.
    Failed,
    LeaseLost,
}

/// What [`Store::reclaim`](crate::store::Store::reclaim) did. A task it finds over has its
/// active-task slot freed by the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reclaimed {
    Nothing,
    Requeued,
    /// Failed past the maximum, or its held question lost.
    Failed,
    /// A cancel was pending.
    Cancelled,
    /// The task had already ended (a replay of a reclaim that ran, or a stale index entry).
    AlreadyEnded,
}
