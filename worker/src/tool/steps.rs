//! Durable steps: work run once per task, its result recorded under the run's fenced lease.

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;
use taskgate_shared::protocol::{ErrorKind, RpcError};

use super::{ToolContext, ToolError};

/// The largest serialized result one durable step may record ([`ToolContext::step`]).
pub const MAX_STEP_BYTES: usize = 256 * 1024;
/// The most durable steps one task may record over its lifetime.
pub const MAX_STEPS: usize = 1_000;
/// The most bytes of step results one task may record in all: what every claim of the task
/// reads back.
pub const MAX_STEPS_TOTAL_BYTES: usize = 8 * 1024 * 1024;
/// The longest step name, in bytes.
pub const MAX_STEP_NAME_BYTES: usize = 256;

impl ToolContext {
    /// Runs `work` as the durable step `name`: once per task, not once per run.
    ///
    /// The first run to finish the step records its result (serialized as JSON) with one
    /// fenced write; every later run of the task (after a crash and reclaim, a release, or the
    /// replay after an answered question) gets the recorded result back without polling `work`
    /// at all (a future does nothing until polled, so `ctx.step("charge", async { … })` is
    /// enough). The recorded steps come with the claim: a replayed step costs no Redis round
    /// trip, a step that runs costs one (its record).
    ///
    /// What is exactly-once is the *recorded result*: every run after the record sees the same
    /// value. The side effect inside `work` is at-least-once: a run that stops (its worker
    /// dies, its lease is lost) after the effect and before the record leaves nothing, and the
    /// next run does the step again. Key such effects by `(task id, step name)` where the other
    /// system takes an idempotency key.
    ///
    /// - An error from `work` is returned and **not** recorded: the next run runs the step
    ///   again, and this run may call the same step again to retry it (a failure is usually
    ///   worth retrying; return a value describing the failure when it should stick).
    /// - Names are unique per task: reaching a step name again in one run after it succeeded
    ///   (or while it runs) is a programming error and fails the task. Names are 1 to
    ///   [`MAX_STEP_NAME_BYTES`] bytes.
    /// - A result is at most [`MAX_STEP_BYTES`] serialized; a task records at most
    ///   [`MAX_STEPS`] steps and [`MAX_STEPS_TOTAL_BYTES`] in all (every claim reads them
    ///   back). Over any, the step fails the task (nothing is recorded).
    /// - A record refused by fencing ends the run as a lost lease ([`ToolError::LeaseLost`]);
    ///   a record whose outcome is unknown (Redis unreachable) does too, so the lease runs out
    ///   and the next run decides from what Redis holds.
    /// - Steps compose with [`input`](Self::input): a tool that asks after its third step is
    ///   replayed after the answer with steps 1–3 returned from the record.
    pub async fn step<T, F>(&self, name: &str, work: F) -> Result<T, ToolError>
    where
        T: Serialize + DeserializeOwned,
        F: Future<Output = Result<T, ToolError>>,
    {
        let internal = |message: String| ToolError::Rpc(RpcError::new(ErrorKind::Internal, message));
        if name.is_empty() || name.len() > MAX_STEP_NAME_BYTES {
            return Err(internal(format!("a step name must be 1 to {MAX_STEP_NAME_BYTES} bytes; got {name:?}")));
        }
        {
            let mut seen = self.steps_seen.lock().expect("lock poisoned: a holder panicked");
            if !seen.0.insert(name.to_owned()) {
                return Err(internal(format!("step {name:?} ran twice in one run; step names are unique per task")));
            }
            if !self.recorded_steps.contains_key(name) {
                if self.recorded_steps.len() + seen.1 >= MAX_STEPS {
                    return Err(internal(format!("step {name:?} is over the limit of {MAX_STEPS} steps per task")));
                }
                // Reserved now, so steps run side by side stay within the bound too.
                seen.1 += 1;
            }
        }
        if let Some(recorded) = self.recorded_steps.get(name) {
            tracing::debug!(task_id = %self.task_id, step = name, "step replayed from its record");
            return serde_json::from_str(recorded)
                .map_err(|err| internal(format!("the recorded result of step {name:?} does not fit its type: {err}")));
        }
        let value = match work.await {
            Ok(value) => value,
            Err(err) => {
                // Not recorded: the step may be tried again, in this run or the next.
                let mut seen = self.steps_seen.lock().expect("lock poisoned: a holder panicked");
                seen.0.remove(name);
                seen.1 -= 1;
                return Err(err);
            }
        };
        let text = serde_json::to_string(&value)
            .map_err(|err| internal(format!("the result of step {name:?} could not be serialized: {err}")))?;
        if text.len() > MAX_STEP_BYTES {
            return Err(internal(format!(
                "the result of step {name:?} was {} bytes, over the {MAX_STEP_BYTES}-byte limit",
                text.len()
            )));
        }
        {
            let mut total = self.steps_bytes.lock().expect("lock poisoned: a holder panicked");
            if *total + name.len() + text.len() > MAX_STEPS_TOTAL_BYTES {
                return Err(internal(format!(
                    "step {name:?} would take the task's recorded steps over {MAX_STEPS_TOTAL_BYTES} bytes"
                )));
            }
            *total += name.len() + text.len();
        }
        match self.store.record_step(self.lease(), name, &text).await {
            Ok(true) => Ok(value),
            Ok(false) => Err(ToolError::LeaseLost),
            Err(err) => {
                // Recorded or not is unknown: go no further. The lease runs out and the next
                // run replays the step or runs it again, from what Redis holds.
                tracing::warn!(task_id = %self.task_id, step = name, error = %err, "could not record a step");
                Err(ToolError::LeaseLost)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use taskgate_shared::store::{Claim, Endpoint, Store};
    use taskgate_shared::task::TaskId;

    use std::sync::Arc;

    use tokio_util::sync::CancellationToken;

    use super::*;

    /// A context whose claim returned `steps`; its store points nowhere (these checks come
    /// before any write).
    fn context(steps: Vec<(String, String)>) -> ToolContext {
        let claim = Claim {
            task_id: TaskId::generate(16),
            fence: 3,
            tool: "t".into(),
            arguments: "{}".into(),
            traceparent: None,
            cancel_requested: false,
            answers: Vec::new(),
            client_capabilities: "{}".into(),
            tool_state: None,
            steps,
            queued_for: None,
            owner_tenant: "t".into(),
            owner_principal: "p".into(),
            related_tasks: Vec::new(),
        };
        let store = Store::connect_lazy(&Endpoint::new("redis://127.0.0.1:1"), "t", Duration::from_millis(50))
            .expect("a lazy store");
        ToolContext::for_claim(&claim, "w".into(), store, CancellationToken::new(), Arc::default())
    }

    fn is_internal(result: &Result<impl std::fmt::Debug, ToolError>, needle: &str) -> bool {
        matches!(result, Err(ToolError::Rpc(err)) if err.message.contains(needle))
    }

    #[tokio::test]
    async fn a_recorded_step_is_replayed_without_running() {
        let ctx = context(vec![("count".into(), "42".into())]);
        let value: u32 = ctx.step("count", async { panic!("a recorded step must not run") }).await.unwrap();
        assert_eq!(value, 42);
        let again = ctx.step("count", async { Ok(1_u32) }).await;
        assert!(is_internal(&again, "unique per task"), "{again:?}");
        let wrong: Result<String, _> = ctx.step("other", async { Ok("x".to_owned()) }).await;
        assert!(matches!(wrong, Err(ToolError::LeaseLost)), "an unreachable store ends the run: {wrong:?}");
    }

    #[tokio::test]
    async fn steps_are_bounded() {
        let ctx = context(Vec::new());
        let big = ctx.step("big", async { Ok("x".repeat(MAX_STEP_BYTES)) }).await;
        assert!(is_internal(&big, "-byte limit"), "{big:?}");
        let unnamed = ctx.step("", async { Ok(1_u8) }).await;
        assert!(is_internal(&unnamed, "step name"), "{unnamed:?}");
        let full = context((0..MAX_STEPS).map(|n| (format!("s{n}"), "1".to_owned())).collect());
        let over = full.step("one-more", async { Ok(1_u8) }).await;
        assert!(is_internal(&over, "steps per task"), "{over:?}");
        let heavy = context((0..32).map(|n| (format!("s{n}"), "x".repeat(MAX_STEP_BYTES - 8))).collect());
        let over = heavy.step("one-more", async { Ok("y".repeat(1_000)) }).await;
        assert!(is_internal(&over, "recorded steps over"), "{over:?}");
    }

    #[tokio::test]
    async fn a_failed_step_may_be_tried_again() {
        let ctx = context(Vec::new());
        let failed: Result<u32, _> = ctx.step("flaky", async { Err(ToolError::Cancelled(None)) }).await;
        assert_eq!(failed, Err(ToolError::Cancelled(None)));
        let retried: Result<u32, _> = ctx.step("flaky", async { Err(ToolError::Cancelled(None)) }).await;
        assert_eq!(retried, Err(ToolError::Cancelled(None)), "not refused as a second use of the name");
    }
}
