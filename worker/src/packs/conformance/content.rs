//! Tools that answer at once: the replies the tools-call scenarios check.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use taskgate_shared::tools::Execution;

use super::{PNG_1X1, confirm_schema, no_args, sampled_text, tool};
use crate::tool::{Tool, ToolOutput, accepted, elicitation_form, sampling_request};

const WAV_EMPTY: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA=";

/// The replies the tools-call scenarios check: content of every kind, tool errors, progress,
/// logs, schemas and mirrored headers.
pub(super) fn tools() -> Vec<Arc<dyn Tool>> {
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
