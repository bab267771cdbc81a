//! What the CLI prints: results, tasks and tools, for people and for scripts.
//!
//! Results go to stdout; everything about the run (status lines, hints, errors) goes to stderr,
//! so `taskgate call … > out.txt` keeps only the result.

use serde_json::Value;

use crate::exit::Exit;
use crate::text::{clean, clean_text};

/// The `_meta` key under which the gateway says how a call of a tool runs (the gateway's
/// `Execution::META_KEY`; the CLI speaks only the wire, so it names the key itself).
pub(crate) const EXECUTION_META: &str = "taskgate.dev/execution";

const TERMINAL: [&str; 3] = ["completed", "failed", "cancelled"];

pub(crate) fn is_terminal(task: &Value) -> bool {
    task.get("status").and_then(Value::as_str).is_some_and(|s| TERMINAL.contains(&s))
}

/// Whether `snapshot` is older than `current` by their `lastUpdatedAt` (RFC 3339).
pub(crate) fn older(snapshot: &Value, current: &Value) -> bool {
    let at =
        |t: &Value| t.get("lastUpdatedAt").and_then(Value::as_str).and_then(|s| humantime::parse_rfc3339_weak(s).ok());
    matches!((at(snapshot), at(current)), (Some(new), Some(old)) if new < old)
}

/// A task as scripts get it, whichever request brought it: a `tasks/get` result carries a
/// `resultType` and `_meta` that a `notifications/tasks` snapshot does not.
pub(crate) fn wire_task(mut task: Value) -> Value {
    if let Some(fields) = task.as_object_mut() {
        fields.remove("resultType");
        fields.remove("_meta");
    }
    task
}

/// One JSON document on one line of stdout.
pub(crate) fn json_line(value: &Value) {
    println!("{value}");
}

/// A task in one line: `<id> <status> · <status message>`.
pub(crate) fn line(task: &Value) -> String {
    if task.is_null() {
        return String::new();
    }
    let id = clean(task.get("taskId").and_then(Value::as_str).unwrap_or("?"));
    let status = clean(task.get("status").and_then(Value::as_str).unwrap_or("?"));
    let styled = match status.as_str() {
        "completed" => console::style(status).green(),
        "failed" => console::style(status).red(),
        "cancelled" => console::style(status).yellow(),
        "input_required" => console::style(status).magenta(),
        _ => console::style(status).cyan(),
    };
    match task.get("statusMessage").and_then(Value::as_str).map(clean) {
        Some(message) => format!("{id} {styled} · {message}"),
        None => format!("{id} {styled}"),
    }
}

/// How a command that waited for this task ends.
pub(crate) fn exit_for(task: &Value) -> Exit {
    match task.get("status").and_then(Value::as_str) {
        Some("completed") if task.pointer("/result/isError") == Some(&Value::Bool(true)) => Exit::ToolError,
        Some("completed") => Exit::Ok,
        Some("failed") => Exit::Failed,
        Some("cancelled") => Exit::Cancelled,
        Some("input_required") => Exit::InputNeeded,
        _ => Exit::Ok,
    }
}

/// A `CallToolResult` for people: text blocks as text, `structuredContent` as indented JSON,
/// other blocks named.
pub(crate) fn result_text(result: &Value) -> String {
    let mut out = String::new();
    for block in result.get("content").and_then(Value::as_array).into_iter().flatten() {
        let kind = block.get("type").and_then(Value::as_str).unwrap_or("?");
        match kind {
            "text" => out.push_str(&clean_text(block.get("text").and_then(Value::as_str).unwrap_or_default(), true)),
            "resource_link" => {
                out.push_str(&format!("[resource {}]", clean(block.get("uri").and_then(Value::as_str).unwrap_or("?"))));
            }
            "resource" => out.push_str(&format!(
                "[embedded resource {}]",
                clean(block.pointer("/resource/uri").and_then(Value::as_str).unwrap_or("?"))
            )),
            other => out.push_str(&format!(
                "[{} {}]",
                clean(other),
                clean(block.get("mimeType").and_then(Value::as_str).unwrap_or("of unknown type"))
            )),
        }
        out.push('\n');
    }
    if let Some(structured) = result.get("structuredContent") {
        out.push_str(&serde_json::to_string_pretty(structured).unwrap_or_default());
        out.push('\n');
    }
    out
}

/// The end of a task for people: its result on stdout, or why it did not complete on stderr.
pub(crate) fn outcome(task: &Value) {
    match task.get("status").and_then(Value::as_str) {
        Some("completed") => {
            let result = task.get("result").unwrap_or(&Value::Null);
            print!("{}", result_text(result));
            if result.get("isError") == Some(&Value::Bool(true)) {
                eprintln!("{}", console::style("the tool reported an error").red());
            }
        }
        Some("failed") => {
            let code = task.pointer("/error/code").and_then(Value::as_i64).unwrap_or_default();
            let message = clean(task.pointer("/error/message").and_then(Value::as_str).unwrap_or("no message"));
            eprintln!("{} {message} ({code})", console::style("failed:").red().bold());
        }
        Some("cancelled") => {
            let why = clean(task.get("statusMessage").and_then(Value::as_str).unwrap_or("no reason given"));
            eprintln!("{} {why}", console::style("cancelled:").yellow().bold());
        }
        _ => eprintln!("{}", line(task)),
    }
}

/// The input requests `keys` of a waiting task, and how to answer each from a script.
pub(crate) fn input_requests(task_id: &str, task: &Value, keys: &[String]) -> String {
    let mut out = String::new();
    for key in keys {
        let request = &task["inputRequests"][key];
        let params = &request["params"];
        let message = clean(params.get("message").and_then(Value::as_str).unwrap_or("(no message)"));
        let (task_id, key) = (clean(task_id), clean(key));
        out.push_str(&format!("{task_id} asks [{key}]: {message}\n"));
        if let Some(url) = params.get("url").and_then(Value::as_str) {
            out.push_str(&format!("  open: {}\n", clean(url)));
        }
        let fields = crate::form::fields(params.get("requestedSchema").unwrap_or(&Value::Null));
        if !fields.is_empty() {
            let described: Vec<String> = fields
                .iter()
                .map(|f| format!("{}{}: {}", f.key, if f.required { "" } else { "?" }, kind_name(&f.kind)))
                .collect();
            out.push_str(&format!("  fields: {}\n", described.join(", ")));
        }
        out.push_str(&format!(
            "  answer: taskgate answer {task_id} {key} --accept '{}'  (or --decline, --cancel)\n",
            example(&fields)
        ));
    }
    out
}

fn kind_name(kind: &crate::form::Kind) -> String {
    use crate::form::Kind;
    match kind {
        Kind::Bool { .. } => "boolean".into(),
        Kind::Choice { values, .. } => values.iter().map(Value::to_string).collect::<Vec<_>>().join("|"),
        Kind::Choices { .. } => "list".into(),
        Kind::Number { integer: true, .. } => "integer".into(),
        Kind::Number { .. } => "number".into(),
        Kind::Text { .. } => "string".into(),
    }
}

/// A form's content with a placeholder for each required field.
fn example(fields: &[crate::form::Field]) -> String {
    use crate::form::Kind;
    let mut content = serde_json::Map::new();
    for field in fields.iter().filter(|f| f.required) {
        let value = match &field.kind {
            Kind::Bool { default } => Value::Bool(default.unwrap_or(true)),
            Kind::Choice { values, default, .. } => values.get(default.unwrap_or(0)).cloned().unwrap_or(Value::Null),
            Kind::Choices { .. } => Value::Array(Vec::new()),
            Kind::Number { default, .. } => default.clone().unwrap_or(Value::from(0)),
            Kind::Text { default, .. } => Value::from(default.clone().unwrap_or_default()),
        };
        content.insert(field.key.clone(), value);
    }
    Value::Object(content).to_string()
}

/// A task for people, field by field.
pub(crate) fn task_detail(task: &Value) -> String {
    let mut out = String::new();
    let mut row = |name: &str, value: String| out.push_str(&format!("{name:<9} {value}\n"));
    let text = |key: &str| task.get(key).map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned));
    row("task", text("taskId").unwrap_or_default());
    row("status", text("status").unwrap_or_default());
    if let Some(message) = text("statusMessage") {
        row("message", message);
    }
    row("created", text("createdAt").unwrap_or_default());
    row("updated", text("lastUpdatedAt").unwrap_or_default());
    match task.get("ttlMs").and_then(Value::as_u64) {
        Some(ttl) => row("ttl", humantime::format_duration(std::time::Duration::from_millis(ttl)).to_string()),
        None => row("ttl", "unlimited".into()),
    }
    if let Some(error) = task.get("error") {
        row("error", format!("{} ({})", error["message"].as_str().unwrap_or("?"), error["code"]));
    }
    if let Some(result) = task.get("result") {
        row("result", String::new());
        for text in result_text(result).lines() {
            out.push_str(&format!("  {text}\n"));
        }
    }
    if let Some(requests) = task.get("inputRequests").and_then(Value::as_object) {
        let keys: Vec<String> = requests.keys().cloned().collect();
        let id = task.get("taskId").and_then(Value::as_str).unwrap_or("?");
        out.push_str(&input_requests(id, task, &keys));
    }
    out
}

/// What `server/discover` told, for people.
pub(crate) fn server(info: &Value) -> String {
    let text = |p: &str| info.pointer(p).and_then(Value::as_str).unwrap_or("?").to_owned();
    let keys =
        |p: &str| info.pointer(p).and_then(Value::as_object).map(|m| m.keys().cloned().collect::<Vec<_>>().join(", "));
    let mut out = format!("server        {} {}\n", text("/serverInfo/name"), text("/serverInfo/version"));
    out.push_str(&format!("protocol      {}\n", text("/protocolVersion")));
    if let Some(versions) = info.get("supportedVersions").and_then(Value::as_array) {
        let versions: Vec<&str> = versions.iter().filter_map(Value::as_str).collect();
        out.push_str(&format!("supported     {}\n", versions.join(", ")));
    }
    let capabilities = info.get("capabilities").and_then(Value::as_object);
    let names: Vec<&str> =
        capabilities.into_iter().flatten().map(|(k, _)| k.as_str()).filter(|k| *k != "extensions").collect();
    out.push_str(&format!("capabilities  {}\n", names.join(", ")));
    out.push_str(&format!("extensions    {}\n", keys("/capabilities/extensions").unwrap_or_else(|| "none".into())));
    if let Some(instructions) = info.get("instructions").and_then(Value::as_str) {
        out.push_str(&format!("instructions  {instructions}\n"));
    }
    out
}

/// The tools as a table: name, how a call runs, description.
pub(crate) fn tools_table(tools: &[Value]) -> String {
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::NOTHING).set_content_arrangement(comfy_table::ContentArrangement::Dynamic);
    table.set_header(["NAME", "RUNS", "DESCRIPTION"]);
    for tool in tools {
        let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_owned();
        let runs = tool.pointer(&format!("/_meta/{}", EXECUTION_META.replace('/', "~1")));
        table.add_row([
            text(tool.get("name")),
            runs.and_then(Value::as_str).unwrap_or("-").to_owned(),
            text(tool.get("description")),
        ]);
    }
    format!("{table}\n")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_result_prints_its_text_then_its_structured_content() {
        let result = json!({
            "content": [{"type": "text", "text": "Slept 5 ms."}, {"type": "image", "mimeType": "image/png", "data": "AA=="}],
            "structuredContent": {"sleptMs": 5}
        });
        assert_eq!(result_text(&result), "Slept 5 ms.\n[image image/png]\n{\n  \"sleptMs\": 5\n}\n");
    }

    #[test]
    fn a_status_line_cannot_drive_the_terminal() {
        let task = json!({"taskId": "t\u{1b}[31m", "status": "working", "statusMessage": "x\u{8}y"});
        assert_eq!(line(&task), "t[31m working · xy");
    }

    #[test]
    fn every_snapshot_has_the_same_shape() {
        let got = json!({"resultType": "complete", "_meta": {}, "taskId": "t", "status": "working"});
        assert_eq!(wire_task(got), json!({"taskId": "t", "status": "working"}));
    }

    #[test]
    fn exit_codes_follow_the_task() {
        assert_eq!(exit_for(&json!({"status": "completed", "result": {"content": []}})), Exit::Ok);
        assert_eq!(exit_for(&json!({"status": "completed", "result": {"isError": true}})), Exit::ToolError);
        assert_eq!(exit_for(&json!({"status": "failed"})), Exit::Failed);
        assert_eq!(exit_for(&json!({"status": "cancelled"})), Exit::Cancelled);
        assert_eq!(exit_for(&json!({"status": "input_required"})), Exit::InputNeeded);
    }

    #[test]
    fn snapshots_are_ordered_by_their_update_time() {
        let a = json!({"lastUpdatedAt": "2026-12-01T10:00:00.100Z"});
        let b = json!({"lastUpdatedAt": "2026-12-01T10:00:00.25Z"});
        assert!(older(&a, &b));
        assert!(!older(&b, &a));
        assert!(!older(&a, &Value::Null), "nothing shown yet");
    }

    #[test]
    fn a_waiting_task_says_how_to_answer() {
        let task = json!({"taskId": "t1", "status": "input_required", "inputRequests": {"approve": {
            "method": "elicitation/create",
            "params": {"message": "Approve?", "requestedSchema": {"type": "object",
                "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}}
        }}});
        let text = input_requests("t1", &task, &["approve".into()]);
        assert!(text.contains("t1 asks [approve]: Approve?"), "{text}");
        assert!(text.contains("fields: approved: boolean"), "{text}");
        assert!(text.contains("taskgate answer t1 approve --accept '{\"approved\":true}'"), "{text}");
    }

    #[test]
    fn the_table_shows_how_each_tool_runs() {
        let tools = [json!({"name": "sleep", "description": "Sleeps.", "_meta": {EXECUTION_META: "task-required"}})];
        let table = tools_table(&tools);
        assert!(table.contains("sleep") && table.contains("task-required") && table.contains("Sleeps."), "{table}");
    }
}
