//! An upstream server's prompts, resources and resource templates, served as a [`Provider`]:
//! prompts under the server's prefix (as its tools are), resources and templates under the
//! URIs the server gives them; content is asked of the server.

use std::sync::Arc;

use rmcp::ServiceError;
use rmcp::model::{
    ArgumentInfo, CompleteRequestParams, GetPromptRequestParams, GetPromptResponse, ReadResourceRequestParams,
    ReadResourceResponse, Reference,
};
use serde_json::{Map, Value};
use taskgate_shared::protocol::{ErrorKind, RpcError};
use taskgate_shared::tools::offerings::{Offering, template_matches};

use super::connection::Upstream;
use crate::provide::Provider;
use crate::tool::{BoxFuture, ToolContext, ToolError};

pub(crate) struct UpstreamProvider {
    pub(super) upstream: Arc<Upstream>,
}

impl UpstreamProvider {
    /// The server's own name of a published prompt name, if it lists that prompt.
    fn remote_prompt(&self, name: &str) -> Option<String> {
        let remote = name.strip_prefix(self.upstream.config.prefix.as_str())?;
        let offered = self.upstream.offered.borrow();
        offered.prompts.iter().any(|p| p["name"] == remote).then(|| remote.to_owned())
    }

    fn reads(&self, uri: &str) -> bool {
        let offered = self.upstream.offered.borrow();
        offered.resources.iter().any(|r| r["uri"] == uri)
            || offered.templates.iter().filter_map(|t| t["uriTemplate"].as_str()).any(|t| template_matches(t, uri))
    }

    fn failure(&self, err: ServiceError) -> ToolError {
        ToolError::Rpc(match err {
            ServiceError::McpError(e) => {
                let mut error = RpcError::new(ErrorKind::from_code(i64::from(e.code.0)), e.message.into_owned());
                if let Some(data) = e.data {
                    error = error.with_data(data);
                }
                error
            }
            other => RpcError::new(
                ErrorKind::Internal,
                format!("upstream server {:?} failed the request: {other}", self.upstream.name()),
            ),
        })
    }

    fn asks(&self) -> ToolError {
        ToolError::Rpc(RpcError::new(
            ErrorKind::Internal,
            format!(
                "upstream server {:?} asks for input here, which taskgate does not pass on yet",
                self.upstream.name()
            ),
        ))
    }

    async fn peer(&self) -> Result<rmcp::service::Peer<rmcp::service::RoleClient>, ToolError> {
        let (_, peer, _) =
            self.upstream.connection().await.map_err(|why| ToolError::Rpc(RpcError::new(ErrorKind::Internal, why)))?;
        Ok(peer)
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<Value, ToolError> {
    serde_json::to_value(value).map_err(|e| ToolError::Rpc(RpcError::new(ErrorKind::Internal, e.to_string())))
}

impl Provider for UpstreamProvider {
    fn offerings(&self) -> Vec<Offering> {
        let offered = self.upstream.offered.borrow().clone();
        let prefix = &self.upstream.config.prefix;
        let prompts = offered.prompts.iter().filter_map(|p| {
            let mut prompt = p.clone();
            let name = format!("{prefix}{}", p["name"].as_str()?);
            prompt["name"] = Value::from(name);
            Some(Offering::Prompt(prompt))
        });
        let resources = offered.resources.iter().cloned().map(Offering::Resource);
        let templates = offered.templates.iter().cloned().map(Offering::Template);
        prompts.chain(resources).chain(templates).collect()
    }

    fn prompt<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a Map<String, Value>,
        _ctx: &'a ToolContext,
    ) -> Option<BoxFuture<'a, Result<Value, ToolError>>> {
        let remote = self.remote_prompt(name)?;
        Some(Box::pin(async move {
            let mut params = GetPromptRequestParams::new(remote);
            params.arguments = Some(arguments.clone());
            match self.peer().await?.get_prompt_once(params).await {
                Ok(GetPromptResponse::Complete(result)) => to_json(&result),
                Ok(_) => Err(self.asks()),
                Err(err) => Err(self.failure(err)),
            }
        }))
    }

    fn read<'a>(&'a self, uri: &'a str, _ctx: &'a ToolContext) -> Option<BoxFuture<'a, Result<Value, ToolError>>> {
        if !self.reads(uri) {
            return None;
        }
        Some(Box::pin(async move {
            match self.peer().await?.read_resource_once(ReadResourceRequestParams::new(uri)).await {
                Ok(ReadResourceResponse::Complete(result)) => to_json(&result),
                Ok(_) => Err(self.asks()),
                Err(err) => Err(self.failure(err)),
            }
        }))
    }

    fn complete<'a>(
        &'a self,
        reference: &'a Value,
        argument: &'a Value,
    ) -> Option<BoxFuture<'a, Result<Value, ToolError>>> {
        let remote_ref = match reference["type"].as_str()? {
            "ref/prompt" => Reference::for_prompt(self.remote_prompt(reference["name"].as_str()?)?),
            "ref/resource" => {
                let uri = reference["uri"].as_str()?;
                let offered = self.upstream.offered.borrow();
                if !offered.templates.iter().any(|t| t["uriTemplate"] == uri) {
                    return None;
                }
                Reference::for_resource(uri)
            }
            _ => return None,
        };
        let info = ArgumentInfo::new(
            argument["name"].as_str().unwrap_or_default(),
            argument["value"].as_str().unwrap_or_default(),
        );
        Some(Box::pin(async move {
            let peer = self.peer().await?;
            let offers = peer.peer_info().is_some_and(|info| info.capabilities.completions.is_some());
            if !offers {
                // A server without completions has none to give (taskgate advertises them).
                return Ok(serde_json::json!({ "values": [] }));
            }
            match peer.complete(CompleteRequestParams::new(remote_ref, info)).await {
                Ok(result) => to_json(&result.completion),
                Err(err) => Err(self.failure(err)),
            }
        }))
    }
}
