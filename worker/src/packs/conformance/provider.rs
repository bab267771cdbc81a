//! The prompts, resources, template and completions the suite's scenarios read.

use std::sync::Arc;

use serde_json::{Value, json};
use taskgate_shared::tools::offerings::{self, Offering};

use super::PNG_1X1;
use crate::provide::Provider;
use crate::tool::{BoxFuture, ToolContext, ToolError, accepted, elicitation_form};

/// The prompts, resources, template and completions the suite's scenarios read.
pub(in crate::packs) fn provider() -> Arc<dyn Provider> {
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
