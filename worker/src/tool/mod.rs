//! The tool runtime contract.
//!
//! # Replay contract
//!
//! Asking for input never holds a worker slot. When a tool asks for an answer it does not have,
//! [`ToolContext::input`] returns [`ToolError::Suspend`]; the tool must propagate it (`?`). The
//! worker then parks the task durably in `input_required` and moves on. When every outstanding
//! key is answered, the task is queued again and the tool runs **again from the start**, with
//! the recorded answers: `input` returns a recorded answer at once and suspends only on the
//! first key that has none. Therefore:
//!
//! - for the same arguments and answers, a tool must ask the same keys in the same order;
//! - keys are unique over the task's lifetime: a key once asked is never asked with a new
//!   request (ask a new key instead);
//! - side effects before a suspension must be idempotent, keyed by the task id (the fencing
//!   token changes on every run), or checkpointed: in a durable step ([`ToolContext::step`]),
//!   or elsewhere.
//!
//! A tool that would rather continue than replay saves a small JSON state with its requests
//! ([`ToolContext::suspend_saving`]); the run after the answers reads it back with
//! [`ToolContext::saved_state`] and the answers with [`ToolContext::answer`]. The upstream
//! bridge does this with a 2026-07-28 server's `requestState`: each round of the server's input
//! requests parks the task once, under keys of that round, and the next run sends the answers
//! and the state back to the server instead of starting the call over.
//!
//! # Durable steps
//!
//! [`ToolContext::step`] runs a piece of work once per task rather than once per run: its
//! result (JSON) is recorded with the task under the run's fenced lease, and every later run
//! (after a crash and reclaim, a release, or the replay after an answer) gets the recorded
//! result instead of running the work again. The recorded steps come with the claim.
//!
//! - **Exactly-once: the recorded result.** Once a step is recorded, every run of the task sees
//!   that value, and a run whose lease was lost cannot record anything.
//! - **Not exactly-once: the side effect inside a step.** A run that stops after the effect
//!   and before the record (its worker died, its lease was lost) leaves no record, and the next
//!   run does the step again: at-least-once within a step. Give effects on other systems an
//!   idempotency key such as `(task id, step name)`.
//! - Errors are not recorded: a step that fails runs again on the next run.
//! - Step names are unique per task (the same name twice in one run fails the task); at most
//!   [`MAX_STEPS`] steps per task, [`MAX_STEP_BYTES`] per result.
//!
//! Cancellation is cooperative: watch [`ToolContext::cancelled`] or call
//! [`ToolContext::checkpoint`]. A tool that ignores a cancel is stopped after the worker's cancel
//! grace period.
//!
//! Layout: the trait here; what a call returns in `output`; the context a run gets in
//! `context`, with what it can do split by concern: `steps` (durable steps), `input` (asking
//! and saved state) and `held` (a question held open while the run keeps its lease).

mod context;
mod held;
mod input;
mod output;
mod steps;

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;
use taskgate_shared::tools::ToolSpec;

pub(crate) use context::Pending;
pub use context::ToolContext;
pub use input::{accepted, answer_action, elicitation_form, roots_request, sampling_request};
pub use output::{ToolError, ToolOutput};
pub use steps::{MAX_STEP_BYTES, MAX_STEP_NAME_BYTES, MAX_STEPS, MAX_STEPS_TOTAL_BYTES};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A tool a worker can run.
///
/// A call may run more than once for one task: after its worker dies (the lease runs out and
/// another worker claims it), after a release, and after every answered question (the replay
/// contract, above). Work that must not be repeated goes in durable steps
/// ([`ToolContext::step`]): exactly-once is the recorded result of a step, while the effect
/// inside a step is at-least-once (a run that died before the record repeats it); keep work
/// before a suspension idempotent or in steps.
pub trait Tool: Send + Sync + 'static {
    /// What gateways list and validate against.
    fn spec(&self) -> ToolSpec;

    /// Runs the tool. `arguments` already satisfy the spec's `inputSchema` (the gateway checked).
    fn call<'a>(&'a self, arguments: Value, ctx: &'a ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>>;
}
