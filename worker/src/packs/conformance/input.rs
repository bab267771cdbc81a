//! Tools that ask for input mid-call, through MRTR rounds.

use std::sync::Arc;

use serde_json::{Value, json};
use taskgate_shared::tools::Execution;

use super::{answered_name, confirm_schema, name_schema, no_args, sampled_text, tool};
use crate::tool::{Tool, ToolOutput, accepted, elicitation_form, roots_request, sampling_request};

/// Input asked mid-call through MRTR rounds: elicitation, sampling, roots, several inputs at
/// once, several rounds, and a `requestState` that must not be tampered with.
pub(super) fn tools() -> Vec<Arc<dyn Tool>> {
    use Execution::SyncOnly;
    vec![
        tool("test_input_required_result_elicitation", "Asks for the user's name.", no_args(), SyncOnly, |_, ctx| {
            Box::pin(async move {
                let answer = ctx.input("user_name", elicitation_form("What is your name?", name_schema()), "")?;
                Ok(ToolOutput::text(format!("Hello, {}!", answered_name(&answer).unwrap_or_else(|| "stranger".into()))))
            })
        }),
        tool(
            "test_input_required_result_sampling",
            "Asks the client's model a question.",
            no_args(),
            SyncOnly,
            |_, ctx| {
                Box::pin(async move {
                    let answer =
                        ctx.input("capital_question", sampling_request("What is the capital of France?", 100), "")?;
                    Ok(ToolOutput::text(format!("The model said: {}", sampled_text(&answer))))
                })
            },
        ),
        tool("test_input_required_result_list_roots", "Asks for the client's roots.", no_args(), SyncOnly, |_, ctx| {
            Box::pin(async move {
                let answer = ctx.input("client_roots", roots_request(), "")?;
                let uris: Vec<&str> =
                    answer["roots"].as_array().into_iter().flatten().filter_map(|r| r["uri"].as_str()).collect();
                Ok(ToolOutput::text(format!("Roots: {}", uris.join(", "))))
            })
        }),
        tool("test_input_required_result_request_state", "Asks for a confirmation.", no_args(), SyncOnly, |_, ctx| {
            Box::pin(async move {
                let answer = ctx.input("confirm", elicitation_form("Please confirm", confirm_schema("ok")), "")?;
                let ok = accepted(&answer).and_then(|c| c.get("ok")).and_then(Value::as_bool) == Some(true);
                Ok(ToolOutput::text(if ok { "state-ok" } else { "state-not-confirmed" }))
            })
        }),
        tool(
            "test_input_required_result_multiple_inputs",
            "Asks three kinds of input at once.",
            no_args(),
            SyncOnly,
            |_, ctx| {
                Box::pin(async move {
                    let answers = ctx.inputs(
                        vec![
                            ("user_name".into(), elicitation_form("What is your name?", name_schema())),
                            ("greeting".into(), sampling_request("Generate a greeting", 50)),
                            ("client_roots".into(), roots_request()),
                        ],
                        "",
                    )?;
                    let name = answered_name(&answers[0]).unwrap_or_else(|| "stranger".into());
                    let roots = answers[2]["roots"].as_array().map_or(0, Vec::len);
                    Ok(ToolOutput::text(format!("{name}: {} ({roots} roots)", sampled_text(&answers[1]))))
                })
            },
        ),
        tool(
            "test_input_required_result_multi_round",
            "Asks two questions, one round each.",
            no_args(),
            SyncOnly,
            |_, ctx| {
                Box::pin(async move {
                    let first =
                        ctx.input("step1", elicitation_form("Step 1: What is your name?", name_schema()), "")?;
                    let color_schema =
                        json!({"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]});
                    let second =
                        ctx.input("step2", elicitation_form("Step 2: What is your favorite color?", color_schema), "")?;
                    let name = answered_name(&first).unwrap_or_else(|| "stranger".into());
                    let color =
                        accepted(&second).and_then(|c| c.get("color")).and_then(Value::as_str).unwrap_or("no color");
                    Ok(ToolOutput::text(format!("{name} likes {color}.")))
                })
            },
        ),
        tool(
            "test_input_required_result_tampered_state",
            "Asks for a confirmation; its state must not be forged.",
            no_args(),
            SyncOnly,
            |_, ctx| {
                Box::pin(async move {
                    let answer = ctx.input("confirm", elicitation_form("Please confirm", confirm_schema("ok")), "")?;
                    let ok = accepted(&answer).and_then(|c| c.get("ok")).and_then(Value::as_bool) == Some(true);
                    Ok(ToolOutput::text(format!("state verified, ok={ok}")))
                })
            },
        ),
        tool(
            "test_input_required_result_capabilities",
            "Asks only for input the client declared.",
            no_args(),
            SyncOnly,
            |_, ctx| {
                Box::pin(async move {
                    let (key, request) = if ctx.client_declares("elicitation") {
                        ("user_name", elicitation_form("What is your name?", name_schema()))
                    } else if ctx.client_declares("sampling") {
                        ("capital_question", sampling_request("What is the capital of France?", 100))
                    } else if ctx.client_declares("roots") {
                        ("client_roots", roots_request())
                    } else {
                        return Ok(ToolOutput::text("The client declared no input capability."));
                    };
                    ctx.input(key, request, "")?;
                    Ok(ToolOutput::text(format!("Received {key}.")))
                })
            },
        ),
    ]
}
