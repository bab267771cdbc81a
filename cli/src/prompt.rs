//! Questions to the person at the terminal (on stderr, so stdout stays the result). Blocking:
//! call from `spawn_blocking`.

use std::io::IsTerminal as _;

use console::Term;
use dialoguer::theme::ColorfulTheme;
use dialoguer::{Confirm, Input, MultiSelect, Select};
use serde_json::{Map, Value, json};

use crate::form::{self, Field, Kind};

/// Whether a person can be asked: both standard input and standard error are terminals.
pub(crate) fn interactive() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

type Asked<T> = Result<T, dialoguer::Error>;

/// Asks for one input request of a task; the answer to send, or `None` when it is not a kind
/// this client can answer (it declares only elicitation, so a server should not send others).
pub(crate) fn ask(key: &str, request: &Value) -> Asked<Option<Value>> {
    if request.get("method").and_then(Value::as_str) != Some("elicitation/create") {
        return Ok(None);
    }
    let params = &request["params"];
    let message =
        crate::text::clean(params.get("message").and_then(Value::as_str).unwrap_or("The tool asks for input."));
    let term = Term::stderr();
    let theme = ColorfulTheme::default();
    let key = crate::text::clean(key);
    term.write_line(&format!("\n{} {message}", console::style(format!("[{key}]")).cyan().bold()))?;
    if params.get("mode").and_then(Value::as_str) == Some("url") {
        let url = crate::text::clean(params.get("url").and_then(Value::as_str).unwrap_or_default());
        term.write_line(&format!("  open: {url}"))?;
        let choice = Select::with_theme(&theme)
            .with_prompt("Your answer")
            .items(["Accept (I have opened it)", "Decline", "Cancel"])
            .default(0)
            .interact_on(&term)?;
        return Ok(Some(action(choice, Map::new())));
    }
    let choice = Select::with_theme(&theme)
        .with_prompt("Your answer")
        .items(["Answer", "Decline", "Cancel"])
        .default(0)
        .interact_on(&term)?;
    if choice != 0 {
        return Ok(Some(action(choice, Map::new())));
    }
    let mut content = Map::new();
    for field in form::fields(params.get("requestedSchema").unwrap_or(&Value::Null)) {
        if let Some(value) = ask_field(&term, &theme, &field)? {
            content.insert(field.key.clone(), value);
        }
    }
    Ok(Some(form::accept(content)))
}

fn action(choice: usize, content: Map<String, Value>) -> Value {
    match choice {
        0 => form::accept(content),
        1 => json!({ "action": "decline" }),
        _ => json!({ "action": "cancel" }),
    }
}

fn ask_field(term: &Term, theme: &ColorfulTheme, field: &Field) -> Asked<Option<Value>> {
    let mut prompt = field.label.clone();
    if let Some(description) = &field.description {
        prompt.push_str(&format!(" ({description})"));
    }
    if !field.required {
        prompt.push_str(" [optional]");
    }
    Ok(match &field.kind {
        Kind::Bool { default } => Some(Value::Bool(
            Confirm::with_theme(theme).with_prompt(prompt).default(default.unwrap_or(false)).interact_on(term)?,
        )),
        Kind::Choice { values, labels, default } => {
            let chosen = Select::with_theme(theme)
                .with_prompt(prompt)
                .items(labels)
                .default(default.unwrap_or(0))
                .interact_on(term)?;
            Some(values[chosen].clone())
        }
        Kind::Choices { values, labels, defaults } => {
            let chosen = MultiSelect::with_theme(theme)
                .with_prompt(prompt)
                .items(labels)
                .defaults(defaults)
                .interact_on(term)?;
            Some(Value::Array(chosen.into_iter().map(|i| values[i].clone()).collect()))
        }
        Kind::Number { default, .. } => text(term, theme, field, prompt, default.as_ref().map(Value::to_string))?,
        Kind::Text { default, .. } => text(term, theme, field, prompt, default.clone())?,
    })
}

/// A typed answer, checked by the field until it passes.
fn text(
    term: &Term,
    theme: &ColorfulTheme,
    field: &Field,
    prompt: String,
    default: Option<String>,
) -> Asked<Option<Value>> {
    let mut input = Input::<String>::with_theme(theme).with_prompt(prompt).allow_empty(true);
    if let Some(default) = default {
        input = input.default(default);
    }
    let typed = input.validate_with(|s: &String| field.parse(s).map(drop)).interact_text_on(term)?;
    Ok(field.parse(&typed).ok().flatten())
}

/// What to do after Ctrl-C while following.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Interrupt {
    StopFollowing,
    CancelTask,
    KeepFollowing,
}

pub(crate) fn interrupted(tasks: usize) -> Asked<Interrupt> {
    let cancel = if tasks == 1 { "Cancel the task" } else { "Cancel the tasks" };
    let stop = if tasks == 1 { "Stop following (the task goes on)" } else { "Stop following (the tasks go on)" };
    let choice = Select::with_theme(&ColorfulTheme::default())
        .with_prompt("Interrupted")
        .items([stop, cancel, "Keep following"])
        .default(0)
        .interact_on(&Term::stderr())?;
    Ok([Interrupt::StopFollowing, Interrupt::CancelTask, Interrupt::KeepFollowing][choice])
}
