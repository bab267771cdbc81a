//! The `demo` pack: `generate_report` (asks to approve an outline), a tool with two outstanding inputs, and a
//! cancellable `sleep`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use taskgate_shared::protocol::{ErrorKind, RpcError};
use taskgate_shared::tools::{Execution, ToolSpec};

use crate::tool::{BoxFuture, Tool, ToolContext, ToolError, ToolOutput, answer_action, elicitation_form};

pub(super) fn tools(options: &super::PackOptions) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(GenerateReport),
        Arc::new(DualApproval),
        Arc::new(Sleep),
        Arc::new(Faulty),
        Arc::new(Noop),
        Arc::new(Ledger { dir: options.ledger_dir.clone() }),
    ]
}

fn spec(
    name: &str,
    description: &str,
    input_schema: Value,
    ttl_ms: u64,
    poll_interval_ms: u64,
    status: Option<&str>,
) -> ToolSpec {
    let mut spec = ToolSpec::new(name, description, input_schema, Execution::TaskRequired, ttl_ms, poll_interval_ms);
    spec.status_message = status.map(str::to_owned);
    spec
}

/// The report generator: asks `approve_outline`, then completes or is cancelled.
///
/// An `accept` whose content is not `approved: true` is treated as a refusal (missing content
/// is never consent), since the key cannot be asked again.
struct GenerateReport;

impl Tool for GenerateReport {
    fn spec(&self) -> ToolSpec {
        spec(
            "generate_report",
            "Generate a durable report that may require outline approval.",
            json!({"type":"object","properties":{"size":{"type":"string","enum":["small","medium","large"],"default":"medium"}},"required":[]}),
            900_000,
            1_000,
            Some("Preparing report outline."),
        )
    }

    fn call<'a>(&'a self, arguments: Value, ctx: &'a ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let size = arguments.get("size").and_then(Value::as_str).unwrap_or("medium").to_owned();
            let request = elicitation_form(
                "Approve the generated report outline?",
                json!({"type":"object","properties":{"approved":{"type":"boolean"}},"required":["approved"]}),
            );
            let answer = ctx.input("approve_outline", request, "Waiting for outline approval.")?;
            let approved = answer_action(&answer) == Some("accept")
                && answer.pointer("/content/approved") == Some(&Value::Bool(true));
            if !approved {
                return Err(ToolError::Cancelled(Some("User did not approve the outline.".into())));
            }
            ctx.set_status("Generating approved report.").await?;
            Ok(ToolOutput::text(format!("Generated {size} report with approved outline."))
                .structured(json!({ "size": size, "approved": true }))
                .with_status("Report completed."))
        })
    }
}

/// Two approvals asked at once, so two input keys are outstanding together.
struct DualApproval;

impl Tool for DualApproval {
    fn spec(&self) -> ToolSpec {
        spec(
            "dual_approval",
            "Ask legal and finance to approve a change; both requests are outstanding at once.",
            json!({"type":"object","properties":{"change":{"type":"string","maxLength":200}},"required":["change"]}),
            900_000,
            1_000,
            Some("Requesting approvals."),
        )
    }

    fn call<'a>(&'a self, arguments: Value, ctx: &'a ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let change = arguments.get("change").and_then(Value::as_str).unwrap_or_default().to_owned();
            let schema = json!({"type":"object","properties":{"approved":{"type":"boolean"}},"required":["approved"]});
            let answers = ctx.inputs(
                vec![
                    ("legal_approval".into(), elicitation_form(&format!("Legal: approve {change:?}?"), schema.clone())),
                    ("finance_approval".into(), elicitation_form(&format!("Finance: approve {change:?}?"), schema)),
                ],
                "Waiting for legal and finance approval.",
            )?;
            let approved = |a: &Value| {
                answer_action(a) == Some("accept") && a.pointer("/content/approved") == Some(&Value::Bool(true))
            };
            let (legal, finance) = (approved(&answers[0]), approved(&answers[1]));
            Ok(ToolOutput::text(format!("Change {change:?}: legal approved={legal}, finance approved={finance}."))
                .structured(json!({ "change": change, "legal": legal, "finance": finance }))
                .with_status("Approvals collected."))
        })
    }
}

/// Sleeps `ms` while watching for cancellation; reports the fencing token it ran under.
struct Sleep;

impl Tool for Sleep {
    fn spec(&self) -> ToolSpec {
        spec(
            "sleep",
            "Sleep for ms milliseconds (cancellable); returns the fencing token of the run.",
            json!({"type":"object","properties":{"ms":{"type":"integer","minimum":0,"maximum":3_600_000}},"required":["ms"]}),
            3_600_000,
            500,
            Some("Sleeping."),
        )
    }

    fn call<'a>(&'a self, arguments: Value, ctx: &'a ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let ms = arguments.get("ms").and_then(Value::as_u64).unwrap_or(0);
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(ms)) => {}
                () = ctx.cancelled() => return Err(ToolError::Cancelled(Some("Sleep was cancelled.".into()))),
            }
            Ok(ToolOutput::text(format!("Slept {ms} ms."))
                .structured(json!({ "sleptMs": ms, "fencingToken": ctx.fencing_token() }))
                .with_status("Done."))
        })
    }
}

/// Ends in the way asked for, to exercise each outcome: a tool-level error (`completed` with
/// `isError: true`), a JSON-RPC error (`failed`), or a panic (`failed`, -32603).
struct Faulty;

impl Tool for Faulty {
    fn spec(&self) -> ToolSpec {
        spec(
            "faulty",
            "Fails on purpose: mode tool_error, rpc_error, panic, or suspend (asks to wait for input without naming any).",
            json!({"type":"object","properties":{"mode":{"type":"string","enum":["tool_error","rpc_error","panic","suspend"]}},"required":["mode"]}),
            600_000,
            500,
            None,
        )
    }

    fn call<'a>(&'a self, arguments: Value, _ctx: &'a ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            match arguments.get("mode").and_then(Value::as_str) {
                Some("tool_error") => Ok(ToolOutput::text("The tool reported an error.").error()),
                Some("rpc_error") => Err(ToolError::Rpc(
                    RpcError::new(ErrorKind::InvalidParams, "the job could not run")
                        .with_data(json!({"reason": "demo"})),
                )),
                // A buggy tool: suspends without asking anything, so nobody could ever answer.
                Some("suspend") => Err(ToolError::Suspend),
                _ => panic!("faulty tool panicked on purpose"),
            }
        })
    }
}

/// Does nothing and returns at once: a task with the least work, for measuring taskgate itself.
/// A task when the request declares the Tasks extension, else inline. `bytes` makes its text
/// that long, to measure what results of a size cost.
struct Noop;

impl Tool for Noop {
    fn spec(&self) -> ToolSpec {
        let mut spec = spec(
            "noop",
            "Returns at once (for load tests); bytes sets the length of its text (default: \"ok\").",
            json!({"type": "object", "properties": {"bytes": {"type": "integer", "minimum": 0, "maximum": 1_048_576}}}),
            300_000,
            20,
            None,
        );
        spec.execution = Execution::TaskOptional;
        spec
    }

    fn call<'a>(&'a self, arguments: Value, _ctx: &'a ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        let text = match arguments.get("bytes").and_then(Value::as_u64) {
            Some(bytes) => "x".repeat(usize::try_from(bytes).unwrap_or(0)),
            None => "ok".to_owned(),
        };
        Box::pin(async move { Ok(ToolOutput::text(text)) })
    }
}

/// Appends one line per step (`<fencing token> <step>`) to `<ledger dir>/<task id>`, a side
/// effect outside Redis that fencing cannot guard. Two runs of one task overlapped exactly when
/// the file's tokens ever go down: what the exclusivity tests check.
///
/// With `checkpoint: true` each step is a durable step ([`ToolContext::step`], named
/// `step-<n>`): a later run of the task (after a reclaim, or the replay after an answer) skips
/// the steps an earlier run recorded, so the file shows each step once unless a run stopped
/// between a step's line and its record. With `askAfter: k` the tool asks `continue` (an
/// elicitation form) once steps `0..k` are done. Task-optional: called without the Tasks
/// extension it runs inline, where the question is an MRTR round and the retry's run replays
/// the steps the earlier round recorded.
struct Ledger {
    dir: Option<std::path::PathBuf>,
}

impl Tool for Ledger {
    fn spec(&self) -> ToolSpec {
        let mut spec = spec(
            "ledger",
            "Appends one line per step to a file named after the task (the worker needs --ledger-dir); shows that two runs of one task never overlap. With checkpoint, each step is a durable step that later runs skip; with askAfter, asks to continue after that many steps.",
            json!({"type":"object","properties":{
                "steps":{"type":"integer","minimum":1,"maximum":10_000},
                "stepMs":{"type":"integer","minimum":0,"maximum":60_000},
                "checkpoint":{"type":"boolean","default":false},
                "askAfter":{"type":"integer","minimum":1,"maximum":10_000}
            },"required":["steps"]}),
            3_600_000,
            500,
            Some("Writing the ledger."),
        );
        spec.execution = Execution::TaskOptional;
        spec
    }

    fn call<'a>(&'a self, arguments: Value, ctx: &'a ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let Some(dir) = &self.dir else {
                return Err(ToolError::Rpc(RpcError::new(
                    ErrorKind::Internal,
                    "the ledger tool needs the worker's --ledger-dir",
                )));
            };
            let steps = arguments.get("steps").and_then(Value::as_u64).unwrap_or(1);
            let step = Duration::from_millis(arguments.get("stepMs").and_then(Value::as_u64).unwrap_or(0));
            let checkpoint = arguments.get("checkpoint").and_then(Value::as_bool).unwrap_or(false);
            let ask_after = arguments.get("askAfter").and_then(Value::as_u64);
            let path = dir.join(ctx.task_id());
            for n in 0..steps {
                ctx.checkpoint()?;
                if ask_after == Some(n) {
                    let request = elicitation_form(
                        &format!("{n} ledger steps are done. Continue?"),
                        json!({"type":"object","properties":{"go":{"type":"boolean"}}}),
                    );
                    let answer = ctx.input("continue", request, "Waiting to continue the ledger.")?;
                    if answer_action(&answer) != Some("accept") {
                        return Err(ToolError::Cancelled(Some("The ledger was stopped.".into())));
                    }
                }
                let write = || {
                    append_line(&path, &format!("{} {n}\n", ctx.fencing_token())).map_err(|err| {
                        ToolError::Rpc(RpcError::new(ErrorKind::Internal, format!("ledger not written: {err}")))
                    })
                };
                if checkpoint {
                    // The line and its record are one round trip apart: the window in which a
                    // crash repeats the step. The pause is outside the step.
                    ctx.step(&format!("step-{n}"), async { write() }).await?;
                } else {
                    write()?;
                }
                tokio::time::sleep(step).await;
            }
            Ok(ToolOutput::text(format!("Wrote {steps} ledger lines.")).structured(json!({
                "steps": steps,
                "fencingToken": ctx.fencing_token(),
            })))
        })
    }
}

/// One `O_APPEND` write: lines of concurrent writers never interleave within a line.
fn append_line(path: &std::path::Path, line: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    std::fs::OpenOptions::new().create(true).append(true).open(path)?.write_all(line.as_bytes())
}
