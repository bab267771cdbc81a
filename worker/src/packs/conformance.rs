//! The `conformance` pack: the fixture tools the official MCP conformance suite
//! (`@modelcontextprotocol/conformance` 0.2.0-alpha.12) calls, with the behaviour each of its
//! scenarios describes. Run a worker with `--tools conformance` to serve them.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use taskgate_shared::protocol::{ErrorKind, RpcError};
use taskgate_shared::tools::offerings::{self, Offering};
use taskgate_shared::tools::{Execution, ToolSpec};

use crate::provide::Provider;
use crate::tool::{
    BoxFuture, Tool, ToolContext, ToolError, ToolOutput, accepted, elicitation_form, roots_request, sampling_request,
};

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

const PNG_1X1: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
const WAV_EMPTY: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA=";

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

pub(super) fn tools() -> Vec<Arc<dyn Tool>> {
    [content_tools(), input_tools(), task_tools()].concat()
}

/// The replies the tools-call scenarios check: content of every kind, tool errors, progress,
/// logs, schemas and mirrored headers.
fn content_tools() -> Vec<Arc<dyn Tool>> {
    use Execution::SyncOnly;
    vec![
        tool("test_simple_text", "Returns a simple text response.", no_args(), SyncOnly, |_, _| {
            Box::pin(async { Ok(ToolOutput::text("This is a simple text response for testing.")) })
        }),
        tool("test_image_content", "Returns an image.", no_args(), SyncOnly, |_, _| {
            Box::pin(async {
                Ok(ToolOutput::content(vec![json!({"type": "image", "data": PNG_1X1, "mimeType": "image/png"})]))
            })
        }),
        tool("test_audio_content", "Returns audio.", no_args(), SyncOnly, |_, _| {
            Box::pin(async {
                Ok(ToolOutput::content(vec![json!({"type": "audio", "data": WAV_EMPTY, "mimeType": "audio/wav"})]))
            })
        }),
        tool("test_embedded_resource", "Returns an embedded resource.", no_args(), SyncOnly, |_, _| {
            Box::pin(async {
                Ok(ToolOutput::content(vec![json!({"type": "resource", "resource": {
                    "uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content."}})]))
            })
        }),
        tool("test_multiple_content_types", "Returns text, an image and a resource.", no_args(), SyncOnly, |_, _| {
            Box::pin(async {
                Ok(ToolOutput::content(vec![
                    json!({"type": "text", "text": "Multiple content types test:"}),
                    json!({"type": "image", "data": PNG_1X1, "mimeType": "image/png"}),
                    json!({"type": "resource", "resource": {"uri": "test://mixed-content-resource",
                        "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}"}}),
                ]))
            })
        }),
        tool("test_error_handling", "Returns a tool-level error.", no_args(), SyncOnly, |_, _| {
            Box::pin(async { Ok(ToolOutput::text("This tool intentionally returns an error for testing").error()) })
        }),
        tool("test_tool_with_progress", "Reports progress three times.", no_args(), SyncOnly, |_, ctx| {
            Box::pin(async move {
                for (step, progress) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                    ctx.progress(progress, Some(100.0), Some(&format!("Step {}", step + 1))).await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Ok(ToolOutput::text("Progress test completed."))
            })
        }),
        tool("test_logging_tool", "Logs while it runs.", no_args(), SyncOnly, |_, ctx| {
            Box::pin(async move {
                ctx.log("info", json!("Tool execution started")).await;
                ctx.log("info", json!("Tool processing data")).await;
                ctx.log("info", json!("Tool execution completed")).await;
                Ok(ToolOutput::text("Logging test completed."))
            })
        }),
        tool(
            "test_missing_capability",
            "Needs sampling, which the client must declare.",
            no_args(),
            SyncOnly,
            |_, ctx| {
                Box::pin(async move {
                    let answer = ctx.input("sampling_request", sampling_request("Say hello.", 50), "")?;
                    Ok(ToolOutput::text(format!("Sampled: {}", sampled_text(&answer))))
                })
            },
        ),
        tool(
            "test_streaming_elicitation",
            "Asks the client to confirm, through MRTR.",
            no_args(),
            SyncOnly,
            |_, ctx| {
                Box::pin(async move {
                    let request = elicitation_form("Please confirm to continue.", confirm_schema("confirm"));
                    let answer = ctx.input("confirmation", request, "")?;
                    let confirmed =
                        accepted(&answer).and_then(|c| c.get("confirm")).and_then(Value::as_bool) == Some(true);
                    Ok(ToolOutput::text(format!("Confirmed: {confirmed}")))
                })
            },
        ),
        tool(
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features",
            json!({"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","$defs":{"address":{"$anchor":"addressDef","type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"}}}},"properties":{"name":{"type":"string"},"address":{"$ref":"#/$defs/address"},"contactMethod":{"type":"string","enum":["phone","email"]},"phone":{"type":"string"},"email":{"type":"string"}},"allOf":[{"anyOf":[{"required":["phone"]},{"required":["email"]}]}],"if":{"properties":{"contactMethod":{"const":"phone"}},"required":["contactMethod"]},"then":{"required":["phone"]},"else":{"required":["email"]},"additionalProperties":false}),
            SyncOnly,
            |args, _| Box::pin(async move { Ok(ToolOutput::text(format!("Received: {args}"))) }),
        ),
        tool(
            "test_custom_header",
            "Echoes a region that is mirrored in the Mcp-Param-Region header.",
            json!({"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}, "required": ["region"]}),
            SyncOnly,
            |args, _| {
                Box::pin(async move {
                    Ok(ToolOutput::text(format!("Region: {}", args["region"].as_str().unwrap_or_default())))
                })
            },
        ),
    ]
}

/// Input asked mid-call through MRTR rounds: elicitation, sampling, roots, several inputs at
/// once, several rounds, and a `requestState` that must not be tampered with.
fn input_tools() -> Vec<Arc<dyn Tool>> {
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

/// The tasks scenarios' tools: one that never becomes a task, and jobs that complete, run
/// long, fail, end with a JSON-RPC error, or ask for input while they run.
fn task_tools() -> Vec<Arc<dyn Tool>> {
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
        tool("failing_job", "A task-only job whose tool run reports an error.", no_args(), TaskRequired, |_, _| {
            Box::pin(async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok(ToolOutput::text("The job failed: the input could not be processed.").error())
            })
        }),
        tool("protocol_error_job", "A job that ends with a JSON-RPC error.", no_args(), TaskOptional, |_, _| {
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
    Arc::new(FnTool { spec, handler })
}

/// The prompts, resources, template and completions the suite's scenarios read.
pub(super) fn provider() -> Arc<dyn Provider> {
    Arc::new(ConformanceProvider)
}

struct ConformanceProvider;

const TEMPLATE: &str = "test://template/{id}/data";

impl Provider for ConformanceProvider {
    fn offerings(&self) -> Vec<Offering> {
        let arg = |name: &str, description: &str| json!({"name": name, "description": description, "required": true});
        vec![
            Offering::Prompt(json!({"name": "test_simple_prompt", "description": "A simple prompt without arguments"})),
            Offering::Prompt(json!({
                "name": "test_prompt_with_arguments",
                "description": "A prompt with two required arguments",
                "arguments": [arg("arg1", "First test argument"), arg("arg2", "Second test argument")]
            })),
            Offering::Prompt(json!({
                "name": "test_prompt_with_embedded_resource",
                "description": "A prompt that embeds a resource",
                "arguments": [arg("resourceUri", "URI of the resource to embed")]
            })),
            Offering::Prompt(json!({"name": "test_prompt_with_image", "description": "A prompt with an image"})),
            Offering::Prompt(json!({
                "name": "test_input_required_result_prompt",
                "description": "A prompt that asks for context first (an InputRequiredResult)"
            })),
            Offering::Resource(json!({
                "uri": "test://static-text", "name": "static-text", "description": "A static text resource",
                "mimeType": "text/plain"
            })),
            Offering::Resource(json!({
                "uri": "test://static-binary", "name": "static-binary", "description": "A static binary resource",
                "mimeType": "image/png"
            })),
            Offering::Resource(json!({
                "uri": "test://watched-resource", "name": "watched-resource", "description": "A resource to watch",
                "mimeType": "text/plain"
            })),
            Offering::Template(json!({
                "uriTemplate": TEMPLATE, "name": "template-data", "description": "Data for an id",
                "mimeType": "application/json"
            })),
        ]
    }

    fn prompt<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a serde_json::Map<String, Value>,
        ctx: &'a ToolContext,
    ) -> Option<BoxFuture<'a, Result<Value, ToolError>>> {
        let text = |t: &str| json!({"role": "user", "content": {"type": "text", "text": t}});
        let arg = |key: &str| arguments.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
        let messages = match name {
            "test_simple_prompt" => vec![text("This is a simple prompt for testing.")],
            "test_prompt_with_arguments" => {
                vec![text(&format!("Prompt with arguments: arg1='{}', arg2='{}'", arg("arg1"), arg("arg2")))]
            }
            "test_prompt_with_embedded_resource" => vec![
                json!({"role": "user", "content": {"type": "resource", "resource": {
                    "uri": arg("resourceUri"), "mimeType": "text/plain", "text": "Embedded resource content for testing."
                }}}),
                text("Please process the embedded resource above."),
            ],
            "test_prompt_with_image" => vec![
                json!({"role": "user", "content": {"type": "image", "data": PNG_1X1, "mimeType": "image/png"}}),
                text("Please analyze the image above."),
            ],
            "test_input_required_result_prompt" => {
                return Some(Box::pin(async move {
                    let schema = json!({"type": "object", "properties": {"context": {"type": "string"}}, "required": ["context"]});
                    let answer = ctx.input(
                        "user_context",
                        elicitation_form("What context should the prompt use?", schema),
                        "Waiting for the prompt's context.",
                    )?;
                    let context = accepted(&answer)
                        .and_then(|c| c.get("context"))
                        .and_then(Value::as_str)
                        .unwrap_or("no context given")
                        .to_owned();
                    Ok(json!({"messages": [text(&format!("Prompt with context: {context}"))]}))
                }));
            }
            _ => return None,
        };
        Some(Box::pin(async move { Ok(json!({ "messages": messages })) }))
    }

    fn read<'a>(&'a self, uri: &'a str, _ctx: &'a ToolContext) -> Option<BoxFuture<'a, Result<Value, ToolError>>> {
        let content = match uri {
            "test://static-text" => {
                json!({"uri": uri, "mimeType": "text/plain", "text": "This is the content of the static text resource."})
            }
            "test://static-binary" => json!({"uri": uri, "mimeType": "image/png", "blob": PNG_1X1}),
            "test://watched-resource" => {
                json!({"uri": uri, "mimeType": "text/plain", "text": "Watched resource content."})
            }
            _ if offerings::template_matches(TEMPLATE, uri) => {
                let id = uri.strip_prefix("test://template/").and_then(|r| r.strip_suffix("/data")).unwrap_or_default();
                // Written out, so the members keep the order the scenario shows.
                let id_json = Value::from(id).to_string();
                let data = Value::from(format!("Data for ID: {id}")).to_string();
                let text = format!("{{\"id\":{id_json},\"templateTest\":true,\"data\":{data}}}");
                json!({"uri": uri, "mimeType": "application/json", "text": text})
            }
            _ => return None,
        };
        Some(Box::pin(async move { Ok(json!({ "contents": [content] })) }))
    }

    fn complete<'a>(
        &'a self,
        reference: &'a Value,
        argument: &'a Value,
    ) -> Option<BoxFuture<'a, Result<Value, ToolError>>> {
        if reference["type"] != "ref/prompt" || reference["name"] != "test_prompt_with_arguments" {
            return None;
        }
        let typed = argument["value"].as_str().unwrap_or_default();
        let values: Vec<&str> =
            ["paris", "park", "party", "hello", "world"].into_iter().filter(|v| v.starts_with(typed)).collect();
        Some(Box::pin(async move { Ok(json!({"values": values, "total": values.len(), "hasMore": false})) }))
    }
}
