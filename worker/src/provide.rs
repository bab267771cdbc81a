//! Prompts, resources and completions that a worker offers beside its tools.
//!
//! A [`Provider`] publishes descriptors ([`Offering`]s) into the catalogue and makes their
//! content on request. The gateway runs `prompts/get`, `resources/read` and
//! `completion/complete` as hidden tasks under reserved tool names; the three [`Tool`]s here
//! take those tasks and ask each provider in turn. Content is made by the same machinery as a
//! tool's result, so a prompt can ask for input (MRTR) with [`ToolContext::input`].

use std::sync::Arc;

use serde_json::{Map, Value, json};
use taskgate_shared::protocol::{ErrorKind, RpcError};
use taskgate_shared::tools::offerings::{self, Offering};
use taskgate_shared::tools::{Execution, ToolSpec};

use crate::tool::{BoxFuture, Tool, ToolContext, ToolError, ToolOutput};

/// Makes content for what it offers. Each method answers `None` for what is not its own.
pub trait Provider: Send + Sync + 'static {
    /// The prompts, resources and templates to publish.
    fn offerings(&self) -> Vec<Offering>;

    /// A `GetPromptResult` (`messages`, optionally `description`) for prompt `name`.
    fn prompt<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a Map<String, Value>,
        ctx: &'a ToolContext,
    ) -> Option<BoxFuture<'a, Result<Value, ToolError>>>;

    /// A `ReadResourceResult` (`contents`) for `uri`, a resource or a match of a template.
    fn read<'a>(&'a self, uri: &'a str, ctx: &'a ToolContext) -> Option<BoxFuture<'a, Result<Value, ToolError>>>;

    /// Suggestions (`values`, optionally `total`, `hasMore`) for `argument` (`{name, value}`) of
    /// `reference` (`{type: "ref/prompt", name}` or `{type: "ref/resource", uri}`).
    fn complete<'a>(
        &'a self,
        reference: &'a Value,
        argument: &'a Value,
    ) -> Option<BoxFuture<'a, Result<Value, ToolError>>>;
}

/// The hidden tools that serve the providers, to add to the registry (never published as tools).
pub(crate) fn hidden_tools(providers: &[Arc<dyn Provider>]) -> Vec<Arc<dyn Tool>> {
    if providers.is_empty() {
        return Vec::new();
    }
    let providers: Arc<[Arc<dyn Provider>]> = providers.into();
    [offerings::PROMPTS_GET, offerings::RESOURCES_READ, offerings::COMPLETE]
        .into_iter()
        .map(|method| Arc::new(Hidden { method, providers: providers.clone() }) as Arc<dyn Tool>)
        .collect()
}

/// Every provider's offerings; of two with the same catalogue key, the first provider's.
pub(crate) fn offerings(providers: &[Arc<dyn Provider>]) -> Vec<Offering> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for offering in providers.iter().flat_map(|p| p.offerings()) {
        let Some(key) = offering.key() else { continue };
        if seen.insert(key.clone()) {
            out.push(offering);
        } else {
            tracing::error!(entry = %key, "two sources publish this prompt or resource; only the first is served");
        }
    }
    out
}

struct Hidden {
    method: &'static str,
    providers: Arc<[Arc<dyn Provider>]>,
}

impl Tool for Hidden {
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(
            self.method,
            "serves the providers' content",
            json!({"type": "object"}),
            Execution::SyncOnly,
            60_000,
            100,
        )
    }

    fn call<'a>(&'a self, arguments: Value, ctx: &'a ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let result = match self.method {
                offerings::PROMPTS_GET => {
                    let name = arguments.get("name").and_then(Value::as_str).unwrap_or_default();
                    let empty = Map::new();
                    let args = arguments.get("arguments").and_then(Value::as_object).unwrap_or(&empty);
                    match self.providers.iter().find_map(|p| p.prompt(name, args, ctx)) {
                        Some(made) => made.await?,
                        None => return Err(invalid(format!("unknown prompt {name:?}"), json!({ "name": name }))),
                    }
                }
                offerings::RESOURCES_READ => {
                    let uri = arguments.get("uri").and_then(Value::as_str).unwrap_or_default();
                    match self.providers.iter().find_map(|p| p.read(uri, ctx)) {
                        Some(made) => made.await?,
                        None => return Err(invalid("Resource not found".into(), json!({ "uri": uri }))),
                    }
                }
                _ => {
                    let (reference, argument) = (&arguments["ref"], &arguments["argument"]);
                    let completion = match self.providers.iter().find_map(|p| p.complete(reference, argument)) {
                        Some(made) => made.await?,
                        None => json!({ "values": [] }),
                    };
                    json!({ "completion": completion })
                }
            };
            Ok(ToolOutput { result, status_message: None })
        })
    }
}

fn invalid(message: String, data: Value) -> ToolError {
    ToolError::Rpc(RpcError::new(ErrorKind::InvalidParams, message).with_data(data))
}
