//! `count_words`: counts the words of a text, and asks the caller to confirm first when the
//! text is long.
//!
//! # The replay contract, as this tool keeps it
//!
//! Asking for input never holds a worker. `ctx.input(key, …)?` either returns the recorded
//! answer or suspends the call: the task parks in `input_required`, and once the caller answers
//! (`tasks/update`) the tool runs again **from the start**, on whichever worker claims it, with
//! the answers recorded so far. So:
//!
//! - ask the same keys in the same order for the same arguments and answers (here: one key,
//!   asked only when the text is long);
//! - never ask a key again with a new question: keys are unique over the task's life;
//! - make whatever happens before a suspension safe to repeat (counting is), or key it by
//!   `ctx.task_id()`;
//! - ask only for input the caller declared it can give (`ctx.client_declares("elicitation")`);
//!   otherwise decide without asking.
//!
//! # A durable step
//!
//! The count is a durable step (`ctx.step("count", async { … })`): the first run records its
//! result with the task, and the replay after the confirmation gets it back without counting
//! again. A step's recorded result is exactly-once; what happens inside the step is
//! at-least-once (a run that dies before the record leaves nothing, and the next run does the
//! step again), so a step that calls another system should pass it an idempotency key such as
//! `(ctx.task_id(), step name)`.

use serde_json::{Value, json};
use taskgate_shared::tools::{Execution, ToolSpec};
use taskgate_worker::tool::{BoxFuture, Tool, ToolContext, ToolError, ToolOutput, accepted, elicitation_form};

/// Texts longer than this many words need the caller's confirmation.
const CONFIRM_ABOVE: usize = 50;

pub(crate) struct CountWords;

impl Tool for CountWords {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            "count_words",
            "Counts the words of a text; asks for confirmation first when it is long.",
            json!({
                "type": "object",
                "properties": { "text": { "type": "string", "maxLength": 100000 } },
                "required": ["text"]
            }),
            Execution::TaskOptional,
            3_600_000,
            1_000,
        )
    }

    fn call<'a>(&'a self, arguments: Value, ctx: &'a ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let text = arguments.get("text").and_then(Value::as_str).unwrap_or_default();
            let words: usize = ctx.step("count", async { Ok(text.split_whitespace().count()) }).await?;
            if words > CONFIRM_ABOVE && ctx.client_declares("elicitation") {
                let question = elicitation_form(
                    &format!("The text has {words} words. Count them?"),
                    json!({ "type": "object", "properties": { "go": { "type": "boolean" } } }),
                );
                let answer = ctx.input("confirm_count", question, "Waiting for confirmation of a long count.")?;
                if accepted(&answer).is_none() {
                    return Err(ToolError::Cancelled(Some("The count was not confirmed.".into())));
                }
            }
            Ok(ToolOutput::text(format!("{words} words")).structured(json!({ "words": words })))
        })
    }
}
