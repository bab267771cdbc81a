//! The MCP connection: the official Rust SDK's client over Streamable HTTP, speaking 2026-07-28
//! with the Tasks extension declared on every request.
//!
//! The SDK has typed calls for `tools/call`, `tasks/get|update|cancel` and `server/discover`,
//! but its `subscriptions/listen` filter has no `taskIds`, and it hands `notifications/tasks`
//! only to the client's handler. So a listen for tasks is sent through the SDK's raw request
//! API ([`Connection::request`]) and its snapshots arrive through [`Handler::on_task_status`].

use std::future::Future;
use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, ClientConfig, ClientRequest, CustomRequest, ElicitationCapability, ExtensionCapabilities,
    FormElicitationCapability, Implementation, JsonObject, ProtocolVersion, TASKS_EXTENSION_ID,
    TaskStatusNotificationParams, UrlElicitationCapability,
};
use rmcp::service::{NotificationContext, Peer, PeerRequestOptions, RequestHandle, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt as _};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::args::Global;
use crate::exit::{CliError, Exit, service};

/// Receives what the gateway pushes outside a request's own result: task snapshots.
struct Handler {
    snapshots: mpsc::UnboundedSender<Value>,
}

impl ClientHandler for Handler {
    fn on_task_status(
        &self,
        params: TaskStatusNotificationParams,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        if let Ok(snapshot) = serde_json::to_value(&params) {
            // The receiver is gone only when the command is ending.
            let _ = self.snapshots.send(snapshot);
        }
        std::future::ready(())
    }

    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        let mut extensions = ExtensionCapabilities::new();
        extensions.insert(TASKS_EXTENSION_ID.to_owned(), JsonObject::new());
        capabilities.extensions = Some(extensions);
        let mut elicitation = ElicitationCapability::new();
        elicitation.form = Some(FormElicitationCapability::default());
        elicitation.url = Some(UrlElicitationCapability::default());
        capabilities.elicitation = Some(elicitation);
        ClientConfig::new(capabilities, Implementation::new("taskgate-cli", env!("CARGO_PKG_VERSION")))
    }
}

/// A discovered gateway.
pub(crate) struct Connection {
    service: RunningService<RoleClient, Handler>,
    /// `notifications/tasks` params (full task snapshots), in the order the SDK delivers them.
    pub(crate) snapshots: mpsc::UnboundedReceiver<Value>,
    timeout: Duration,
}

impl Connection {
    /// Connects and runs `server/discover`.
    pub(crate) async fn open(global: &Global) -> Result<Self, CliError> {
        let mut config = StreamableHttpClientTransportConfig::with_uri(global.url.as_str());
        if let Some(token) = global.token()? {
            config = config.auth_header(token);
        }
        let transport = StreamableHttpClientTransport::from_config(config);
        let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
        let (tx, snapshots) = mpsc::unbounded_channel();
        let handler = Handler { snapshots: tx };
        let service = tokio::time::timeout(global.timeout, handler.serve_with_lifecycle(transport, lifecycle))
            .await
            .map_err(|_| {
                CliError::new(Exit::Transport, format!("{}: no answer to server/discover", shown_url(&global.url)))
                    .hint("check --url (TASKGATE_URL) and that the gateway is running")
            })?
            .map_err(|err| {
                if let Some(challenge) = err.auth_challenge() {
                    return CliError::auth(challenge);
                }
                // The SDK's errors may quote the URL; what it holds besides the endpoint stays out.
                let shown = shown_url(&global.url);
                CliError::new(Exit::Transport, format!("{shown}: {}", err.to_string().replace(&global.url, &shown)))
                    .hint("check --url (TASKGATE_URL) and that the gateway is running")
            })?;
        Ok(Self { service, snapshots, timeout: global.timeout })
    }

    pub(crate) fn peer(&self) -> &Peer<RoleClient> {
        self.service.peer()
    }

    /// What `server/discover` answered.
    pub(crate) fn server(&self) -> Value {
        self.peer().peer_info().and_then(|info| serde_json::to_value(info).ok()).unwrap_or(Value::Null)
    }

    /// Runs one request under `--timeout`, naming it in any error.
    pub(crate) async fn call<T>(
        &self,
        what: &str,
        request: impl Future<Output = Result<T, rmcp::ServiceError>>,
    ) -> Result<T, CliError> {
        match tokio::time::timeout(self.timeout, request).await {
            Ok(result) => result.map_err(|err| service(what, err)),
            Err(_) => Err(service(what, rmcp::ServiceError::Timeout { timeout: self.timeout })),
        }
    }

    /// Sends a request the SDK has no typed call for; the handle resolves with its result.
    pub(crate) async fn request(&self, method: &str, params: Value) -> Result<RequestHandle<RoleClient>, CliError> {
        let request = ClientRequest::CustomRequest(CustomRequest::new(method, Some(params)));
        self.peer()
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await
            .map_err(|err| service(method, err))
    }

    pub(crate) async fn close(self) {
        let _ = self.service.cancel().await;
    }
}

/// The URL as errors show it: without a user, password, query or fragment, which may carry
/// credentials.
fn shown_url(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(mut url) => {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.set_query(None);
            url.set_fragment(None);
            url.to_string()
        }
        Err(_) => "the --url given".to_owned(),
    }
}

impl Global {
    /// The bearer token, from `--token`/`TASKGATE_TOKEN` or the file of `--token-file`.
    pub(crate) fn token(&self) -> Result<Option<String>, CliError> {
        if let Some(token) = &self.token {
            return Ok(Some(token.trim().to_owned()).filter(|t| !t.is_empty()));
        }
        let Some(path) = &self.token_file else { return Ok(None) };
        let token = std::fs::read_to_string(path)
            .map_err(|err| CliError::usage(format!("cannot read the token file {}: {err}", path.display())))?;
        let token = token.trim();
        if token.is_empty() {
            return Err(CliError::usage(format!("the token file {} is empty", path.display())));
        }
        Ok(Some(token.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_never_show_credentials_of_the_url() {
        assert_eq!(shown_url("http://alice:s3cret@gw.example:8080/mcp?key=k#f"), "http://gw.example:8080/mcp");
        assert_eq!(shown_url("http://127.0.0.1:8080/mcp"), "http://127.0.0.1:8080/mcp");
        assert_eq!(shown_url("not a url s3cret"), "the --url given");
    }
}
