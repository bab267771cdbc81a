//! The tasks scenarios' tools.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use taskgate_shared::protocol::{ErrorKind, RpcError};
use taskgate_shared::tools::Execution;

use super::{FnTool, Handler, answered_name, confirm_schema, name_schema, no_args, tool};
use crate::tool::{Tool, ToolError, ToolOutput, accepted, elicitation_form};

/// The tasks scenarios' tools: one that never becomes a task, and jobs that complete, run
/// long, fail, end with a JSON-RPC error, or ask for input while they run.
pub(super) fn tools() -> Vec<Arc<dyn Tool>> {
    use Execution::{SyncOnly, TaskOptional, TaskRequired};
    vec![
        tool(
            "greet",
            "Greets someone (always inline).",
            json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
            SyncOnly,
            |args, _| {
                Box::pin(async move {
                    Ok(ToolOutput::text(format!("Hello, {}!", args["name"].as_str().unwrap_or_default())))
                })
            },
        ),
        tool(
            "slow_compute",
            "Computes for `seconds` (a task when the client declares the Tasks extension).",
            json!({"type": "object", "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": 3600}, "label": {"type": "string"}}, "required": ["seconds"]}),
            TaskOptional,
            |args, ctx| {
                Box::pin(async move {
                    let seconds = args["seconds"].as_f64().unwrap_or(0.0);
                    let label = args["label"].as_str().unwrap_or("compute").to_owned();
                    // Forwarded only to a caller that sent a progressToken.
                    ctx.progress(0.0, Some(seconds), Some("started")).await;
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs_f64(seconds)) => {}
                        () = ctx.cancelled() => return Err(ToolError::Cancelled(Some("Computation cancelled.".into()))),
                    }
                    Ok(ToolOutput::text(format!("Computed {label} in {seconds} s."))
                        .structured(json!({"label": label, "seconds": seconds})))
                })
            },
        ),
        always_a_task("failing_job", "A task-only job whose tool run reports an error.", TaskRequired, |_, _| {
            Box::pin(async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok(ToolOutput::text("The job failed: the input could not be processed.").error())
            })
        }),
        always_a_task("protocol_error_job", "A job that ends with a JSON-RPC error.", TaskOptional, |_, _| {
            Box::pin(async {
                Err(ToolError::Rpc(
                    RpcError::new(ErrorKind::Internal, "the job hit a protocol error")
                        .with_data(json!({"job": "protocol_error_job"})),
                ))
            })
        }),
        tool(
            "confirm_delete",
            "Deletes a file after the user confirms.",
            json!({"type": "object", "properties": {"filename": {"type": "string"}}}),
            TaskOptional,
            |args, ctx| {
                Box::pin(async move {
                    let filename = args["filename"].as_str().unwrap_or("untitled.txt").to_owned();
                    let request = elicitation_form(&format!("Delete {filename}?"), confirm_schema("confirm"));
                    let answer = ctx.input("confirm", request, "Waiting for confirmation.")?;
                    let confirmed =
                        accepted(&answer).and_then(|c| c.get("confirm")).and_then(Value::as_bool) == Some(true);
                    let text = if confirmed { format!("Deleted {filename}.") } else { format!("Kept {filename}.") };
                    Ok(ToolOutput::text(text).structured(json!({"filename": filename, "deleted": confirmed})))
                })
            },
        ),
        tool("multi_input", "Asks two questions at once.", no_args(), TaskOptional, |_, ctx| {
            Box::pin(async move {
                let schema = json!({"type": "object", "properties": {"name": {"type": "string"}, "confirm": {"type": "boolean"}}, "required": ["name"]});
                let answers = ctx.inputs(
                    vec![
                        ("first_input".into(), elicitation_form("First: your name?", schema.clone())),
                        ("second_input".into(), elicitation_form("Second: your name?", schema)),
                    ],
                    "Waiting for two answers.",
                )?;
                let names: Vec<String> = answers.iter().map(|a| answered_name(a).unwrap_or_default()).collect();
                Ok(ToolOutput::text(format!("Received {} and {}.", names[0], names[1])))
            })
        }),
        test_tool_with_task(),
    ]
}

/// `test_tool_with_task` gathers the name before its task exists: the input is declared in
/// its spec, so the path never depends on timing.
fn test_tool_with_task() -> Arc<dyn Tool> {
    fn ask() -> Value {
        elicitation_form("What is your name?", name_schema())
    }
    let handler: Handler = |_, ctx| {
        Box::pin(async move {
            let answer = ctx.input("user_name", ask(), "")?;
            let name = answered_name(&answer).unwrap_or_else(|| "stranger".into());
            Ok(ToolOutput::text(format!("Hello, {name}! Your task completed.")))
        })
    };
    let mut spec = tool(
        "test_tool_with_task",
        "Asks for a name with MRTR rounds, then greets it as a task.",
        no_args(),
        Execution::TaskRequired,
        handler,
    )
    .spec();
    spec.pre_task_inputs.insert("user_name".into(), ask());
    // The suite wants the final round's CreateTaskResult, though the task ends at once.
    spec.complete_within_ms = Some(0);
    Arc::new(FnTool { spec, handler })
}

/// A tool without arguments whose calls made as tasks always answer with the task (a
/// completion budget of 0): the suite checks these jobs' task handles and the `tasks/get` shape
/// of their ends, and they end sooner than the gateway's default budget.
fn always_a_task(name: &str, description: &str, execution: Execution, handler: Handler) -> Arc<dyn Tool> {
    let mut spec = tool(name, description, no_args(), execution, handler).spec();
    spec.complete_within_ms = Some(0);
    Arc::new(FnTool { spec, handler })
}
