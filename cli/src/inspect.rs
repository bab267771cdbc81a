//! `taskgate inspect TASK`: a task's timeline, read from the gateway's operator console (its
//! JSON view of one task). Needs `--console` on the gateway and an operator or tenant-admin
//! token; it shows no arguments, input content or answers, only their keys.

use comfy_table::Table;
use serde_json::Value;

use crate::args::{Global, Output};
use crate::exit::{CliError, Exit};
use crate::text::clean;

pub(crate) async fn run(global: &Global, task: &str) -> Result<Exit, CliError> {
    let url = url::Url::parse(&global.url).map_err(|err| CliError::usage(format!("--url: {err}")))?;
    let mut url = url.join("/console/api/tasks/").map_err(|err| CliError::usage(format!("--url: {err}")))?;
    url.path_segments_mut().map_err(|()| CliError::usage("--url cannot be a base"))?.pop_if_empty().push(task);
    let http = reqwest::Client::builder()
        .timeout(global.timeout)
        .build()
        .map_err(|err| CliError::new(Exit::Transport, format!("HTTP client: {err}")))?;
    let mut request = http.get(url);
    if let Some(token) = global.token()? {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.map_err(|err| {
        CliError::new(Exit::Transport, format!("inspect: {err}"))
            .hint("check --url (TASKGATE_URL) and that the gateway is running")
    })?;
    match response.status().as_u16() {
        200 => {}
        401 => return Err(CliError::auth("")),
        403 => {
            return Err(CliError::new(Exit::AuthRefused, "the console refused this token (403)")
                .hint("inspect needs a token with the console's operator or tenant-admin scope"));
        }
        404 => {
            return Err(CliError::new(Exit::Refused, "no such task, or not one this token may see (404)")
                .hint("check the id; the gateway must also run with --console"));
        }
        status => return Err(CliError::new(Exit::Transport, format!("inspect: the gateway answered {status}"))),
    }
    let body: Value = response
        .json()
        .await
        .map_err(|err| CliError::new(Exit::Transport, format!("inspect: not the console's JSON: {err}")))?;
    match global.output {
        Output::Json => crate::render::json_line(&body),
        Output::Human => print!("{}", human(&body)),
    }
    Ok(Exit::Ok)
}

/// The record's summary, then the timeline as a table. Every string the server supplied is
/// printed without its control characters: a tool name, a principal or an operator's reason
/// cannot drive the terminal.
fn human(body: &Value) -> String {
    let record = &body["record"];
    let field = |name: &str| clean(record[name].as_str().unwrap_or(""));
    let mut out = format!(
        "{}  {}  {}/{}  {}\n",
        clean(body["taskId"].as_str().unwrap_or("")),
        field("status"),
        field("tenant"),
        field("principal"),
        field("tool")
    );
    let mut table = Table::new();
    table.load_preset(comfy_table::presets::NOTHING);
    table.set_header(["AT", "WHAT", "STATE", "FENCE", "HOLDER", "BY", "WHY"]);
    for entry in body["timeline"].as_array().into_iter().flatten() {
        let at = entry["at"].as_u64().map(|ms| {
            let time = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
            humantime::format_rfc3339_millis(time).to_string()
        });
        let text = |name: &str| match &entry[name] {
            Value::Null => String::new(),
            Value::String(s) => clean(s),
            other => clean(&other.to_string()),
        };
        table.add_row([
            at.unwrap_or_default(),
            text("ev"),
            text("to"),
            text("fence"),
            text("holder"),
            text("by"),
            text("why"),
        ]);
    }
    out.push_str(&table.to_string());
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_timeline_reads_as_a_table() {
        let body = json!({
            "taskId": "tsk_1",
            "record": {"status": "cancelled", "tenant": "acme", "principal": "alice", "tool": "sleep"},
            "timeline": [
                {"at": 0, "ev": "created", "to": "working"},
                {"at": 1500, "ev": "cancel requested", "to": "working", "holder": "w1", "by": "ops/op", "why": "stuck"},
            ],
        });
        let text = human(&body);
        assert!(text.starts_with("tsk_1  cancelled  acme/alice  sleep\n"), "{text}");
        assert!(text.contains("1970-01-01T00:00:01.500Z") && text.contains("cancel requested"), "{text}");
        assert!(text.contains("ops/op") && text.contains("stuck"), "{text}");
    }

    #[test]
    fn server_text_cannot_drive_the_terminal() {
        let red = "\u{1b}[31m";
        let body = json!({
            "taskId": format!("tsk_{red}1"),
            "record": {
                "status": format!("failed{red}"),
                "tenant": format!("{red}acme"),
                "principal": format!("{red}alice\u{7}"),
                "tool": format!("{red}sleep"),
            },
            "timeline": [{
                "at": 0, "ev": format!("{red}failed by an operator"), "to": format!("{red}failed"),
                "fence": format!("{red}1"), "holder": format!("w1{red}"), "by": format!("ops/{red}op"),
                "why": format!("the approver left{red}\r\n\u{1b}]8;;http://evil\u{7}"), "extra": {"x": red},
            }],
        });
        let text = human(&body);
        assert!(!text.contains('\u{1b}') && !text.contains('\u{7}') && !text.contains('\r'), "{text:?}");
        assert!(text.starts_with("tsk_[31m1  failed[31m  [31macme/[31malice  [31msleep\n"), "{text:?}");
        assert!(text.contains("the approver left[31m]8;;http://evil"), "{text:?}");
    }
}
