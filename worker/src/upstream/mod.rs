//! Upstream MCP servers behind the worker (`--upstreams`): each server's tools are published
//! into the catalogue under a prefix and run as durable tasks, like the built-in packs.

mod bounds;
pub mod config;
mod connection;
mod errors;
mod followed;
mod handler;
mod http;
mod identity;
mod instances;
mod per_identity;
mod provided;
mod rounds;
mod stderr;
mod tool;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use taskgate_shared::tools::{ToolDescriptor, ToolSpec, is_valid_tool_name};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub use config::{ConfigError, UpstreamConfig};
use connection::Upstream;
use per_identity::PerIdentity;

use crate::tool::Tool;

/// Every configured upstream server.
pub(crate) struct Upstreams {
    servers: Vec<Arc<Upstream>>,
    digest: String,
    /// Told when some server's tool list changed.
    pub(crate) changed: Arc<Notify>,
    cancel_grace: Duration,
    /// Callers' credentials and instances, for the servers that act as their caller.
    identities: Arc<PerIdentity>,
}

/// What per-identity servers need from the worker.
pub(crate) struct IdentitySettings {
    pub(crate) store: taskgate_shared::store::Store,
    pub(crate) keys: Option<Arc<taskgate_shared::credentials::KeyRing>>,
    pub(crate) max_instances: usize,
    pub(crate) instance_idle: Duration,
}

impl Upstreams {
    /// Starts a supervised connection to every server (for a per-identity server: the one
    /// that lists its tools).
    pub(crate) fn start(
        configs: Vec<UpstreamConfig>,
        cancel_grace: Duration,
        identity: IdentitySettings,
        shutdown: CancellationToken,
    ) -> Self {
        let digest = config::digest(&configs);
        let changed = Arc::new(Notify::new());
        let identities = Arc::new(PerIdentity {
            credentials: Arc::new(identity::Credentials::new(identity.store, identity.keys)),
            instances: instances::Instances::start(identity.max_instances, identity.instance_idle, shutdown.clone()),
        });
        let servers =
            configs.into_iter().map(|config| Upstream::start(config, changed.clone(), shutdown.clone())).collect();
        Self { servers, digest, changed, cancel_grace, identities }
    }

    /// Each server's name with its connections up and configured, for the operator console.
    pub(crate) fn health(&self) -> Vec<serde_json::Value> {
        self.servers
            .iter()
            .map(|server| {
                let (up, links) = server.links_up();
                serde_json::json!({ "name": server.name(), "up": up, "links": links })
            })
            .collect()
    }

    pub(crate) fn digest(&self) -> &str {
        &self.digest
    }

    /// Waits for every server's first listing, each up to its connect timeout (a server that
    /// is not up by then joins the catalogue when it comes up).
    pub(crate) async fn first_listings(&self) {
        let waits = self.servers.iter().map(|server| async move {
            // The handshake may take the connect timeout, and listing after it too.
            if !server.listed(server.config.connect_timeout * 2).await {
                tracing::error!(
                    upstream = server.name(),
                    "upstream not listed at start; its tools join when it comes up"
                );
            }
        });
        futures::future::join_all(waits).await;
    }

    /// One provider per server: its prompts, resources and templates, as it lists them.
    pub(crate) fn providers(&self) -> Vec<Arc<dyn crate::provide::Provider>> {
        self.servers
            .iter()
            .map(|server| {
                Arc::new(provided::UpstreamProvider { upstream: server.clone() }) as Arc<dyn crate::provide::Provider>
            })
            .collect()
    }

    /// The tools every server lists now, under their published names.
    pub(crate) fn tools(&self) -> Vec<(String, Arc<dyn Tool>)> {
        let mut out = Vec::new();
        for server in &self.servers {
            let Some(listed) = server.tools.borrow().clone() else { continue };
            for remote in listed.iter() {
                let name = remote.name.to_string();
                if !server.config.serves(&name) {
                    continue;
                }
                match self.tool(server, remote) {
                    Ok(tool) => out.push((tool.spec.descriptor.name.clone(), Arc::new(tool) as Arc<dyn Tool>)),
                    Err(why) => tracing::error!(upstream = server.name(), tool = %name, "not served: {why}"),
                }
            }
        }
        out
    }

    fn tool(&self, server: &Arc<Upstream>, remote: &rmcp::model::Tool) -> Result<tool::UpstreamTool, String> {
        let config = &server.config;
        let remote_name = remote.name.to_string();
        let name = format!("{}{remote_name}", config.prefix);
        if !is_valid_tool_name(&name) {
            return Err(format!("{name:?} is not a valid MCP tool name"));
        }
        let json = serde_json::to_value(remote).map_err(|e| e.to_string())?;
        let field = |key: &str| json.get(key).filter(|v| !v.is_null()).cloned();
        let descriptor = ToolDescriptor {
            name,
            title: remote.title.clone(),
            description: remote.description.as_deref().map(str::to_owned),
            input_schema: field("inputSchema").unwrap_or_else(|| serde_json::json!({ "type": "object" })),
            output_schema: field("outputSchema"),
            annotations: field("annotations"),
            icons: field("icons"),
            meta: field("_meta"),
        };
        let settings = config.settings(&remote_name);
        let hinted = |hint: &str| json.pointer(&format!("/annotations/{hint}")).and_then(Value::as_bool) == Some(true);
        let retry_safe =
            settings.retry_on_reclaim.unwrap_or_else(|| hinted("readOnlyHint") || hinted("idempotentHint"));
        let spec = ToolSpec {
            descriptor,
            execution: settings.execution,
            ttl_ms: settings.ttl_ms,
            poll_interval_ms: settings.poll_interval_ms,
            status_message: None,
            pre_task_inputs: BTreeMap::new(),
            // The gateway hands the caller's own token over only for these tools.
            subject_token: config.oauth.as_ref().is_some_and(config::OAuthConfig::exchanges),
            // An upstream server's tool records no durable steps here: nothing to reuse.
            reuse_steps: false,
            complete_within_ms: settings.complete_within_ms,
        };
        Ok(tool::UpstreamTool {
            upstream: server.clone(),
            remote: remote_name,
            spec,
            settings,
            retry_safe,
            cancel_grace: self.cancel_grace,
            identities: (config.per != config::Per::Shared).then(|| self.identities.clone()),
        })
    }
}
