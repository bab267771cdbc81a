//! Where the store's [`Transition`]s go: the lifecycle metrics of the process that made them
//! (`taskgate_task_transitions_total`, and the time spent in the state left), and a debug
//! line. Called from each typed reply that changed a status, never from a caller.

use crate::task::{TaskId, Transition};
use crate::telemetry::metrics::TASKS;

pub(super) fn emit(task: &TaskId, transition: Transition) {
    TASKS.transition(transition.from_label(), transition.to.as_str());
    if let (Some(from), Some(spent)) = (transition.from, transition.spent) {
        TASKS.left_state(from.as_str(), spent);
    }
    tracing::debug!(
        task_id = %task,
        from = transition.from_label(),
        to = transition.to.as_str(),
        by = transition.by.as_str(),
        "task transition"
    );
}
