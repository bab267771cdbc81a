//! The `conformance` pack: the fixture tools the official MCP conformance suite
//! (`@modelcontextprotocol/conformance` 0.2.0-alpha.12) calls, with the behaviour each of its
//! scenarios describes. Run a worker with `--tools conformance` to serve them.
//!
//! - [`content`]: tools that answer at once (content of every kind, errors, progress, logs).
//! - [`input`]: tools that ask for input mid-call through MRTR rounds.
//! - [`tasks`]: the tasks scenarios' tools (jobs that run, fail or ask while they run).
//! - [`provider`]: the prompts, resources, template and completions.

mod content;
mod input;
mod provider;
mod tasks;

use std::sync::Arc;

use serde_json::{Value, json};
use taskgate_shared::tools::{Execution, ToolSpec};

use crate::tool::{BoxFuture, Tool, ToolContext, ToolError, ToolOutput, accepted};

pub(super) use provider::provider;

pub(super) fn tools() -> Vec<Arc<dyn Tool>> {
    [content::tools(), input::tools(), tasks::tools()].concat()
}

type Handler = for<'a> fn(Value, &'a ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>>;

/// A tool made of a spec and a function.
struct FnTool {
    spec: ToolSpec,
    handler: Handler,
}

impl Tool for FnTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn call<'a>(&'a self, arguments: Value, ctx: &'a ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        (self.handler)(arguments, ctx)
    }
}

fn tool(name: &str, description: &str, input_schema: Value, execution: Execution, handler: Handler) -> Arc<dyn Tool> {
    let (ttl_ms, poll_interval_ms) = match execution {
        // The suite polls every 200 ms; a task's interval says that is welcome.
        Execution::SyncOnly => (60_000, 200),
        Execution::TaskOptional | Execution::TaskRequired => (600_000, 200),
    };
    Arc::new(FnTool {
        spec: ToolSpec::new(name, description, input_schema, execution, ttl_ms, poll_interval_ms),
        handler,
    })
}

fn no_args() -> Value {
    json!({"type": "object", "properties": {}})
}

/// A 1x1 PNG: the image of the content tools, the image prompt and the binary resource.
const PNG_1X1: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

fn name_schema() -> Value {
    json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})
}

fn confirm_schema(field: &str) -> Value {
    json!({"type": "object", "properties": {field: {"type": "boolean"}}, "required": [field]})
}

/// The name in an accepted `{name}` elicitation.
fn answered_name(answer: &Value) -> Option<String> {
    accepted(answer)?.get("name")?.as_str().map(str::to_owned)
}

/// The text of a CreateMessageResult.
fn sampled_text(answer: &Value) -> String {
    answer.pointer("/content/text").and_then(Value::as_str).unwrap_or_default().to_owned()
}
