//! A lean MCP client for load: the mirrored headers, `_meta`, round-robin over gateways.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use taskgate_shared::protocol::sse::{self, SseDecoder, SseEvent, SseItem};

/// What `call_light` reads of a reply.
#[derive(Debug, serde::Deserialize)]
pub struct LightResult {
    #[serde(rename = "resultType")]
    pub result_type: String,
    #[serde(rename = "taskId")]
    pub task_id: Option<String>,
    /// Read for a call answered with its task's result: the task's id.
    #[serde(rename = "_meta")]
    pub meta: Option<LightMeta>,
}

/// What `call_light` reads of a result's `_meta`.
#[derive(Debug, serde::Deserialize)]
pub struct LightMeta {
    #[serde(rename = "io.taskgate/taskId")]
    pub task_id: Option<String>,
}

#[derive(serde::Deserialize)]
struct LightReply {
    result: Option<LightResult>,
    error: Option<LightError>,
}

#[derive(serde::Deserialize)]
struct LightError {
    code: i64,
}

/// Why an operation failed, by kind (the report counts them).
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error)]
pub enum LoadError {
    #[error("http {0}")]
    Http(u16),
    #[error("json-rpc {0}")]
    Rpc(i64),
    #[error("transport")]
    Transport,
    #[error("timeout")]
    Timeout,
    #[error("unexpected: {0}")]
    Unexpected(&'static str),
}

#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    /// Several HTTP clients, so that many long-lived streams spread over connections.
    http: Vec<reqwest::Client>,
    urls: Vec<String>,
    next: AtomicUsize,
    ids: AtomicU64,
    token: Option<String>,
    /// `clientCapabilities` of task-creating requests.
    capabilities: Value,
    /// Send a fresh `Idempotency-Key` with every `tools/call` (`--idempotency-keys`).
    keyed: bool,
}

impl Client {
    pub fn new(config: &crate::config::Config, connections: usize) -> Self {
        let http = (0..connections.max(1))
            .map(|i| {
                let source = (!config.source_ips.is_empty()).then(|| config.source_ips[i % config.source_ips.len()]);
                let builder = reqwest::Client::builder()
                    .no_proxy()
                    .pool_max_idle_per_host(4096)
                    .timeout(Duration::from_secs(120))
                    .local_address(source);
                let builder = if config.http2 { builder.http2_prior_knowledge() } else { builder.http1_only() };
                builder.build().expect("an HTTP client")
            })
            .collect();
        let capabilities = config
            .client_capabilities
            .clone()
            .unwrap_or_else(|| json!({"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}}));
        Self {
            inner: Arc::new(Inner {
                http,
                urls: config.urls.clone(),
                next: AtomicUsize::new(0),
                ids: AtomicU64::new(1),
                token: config.token.clone(),
                capabilities,
                keyed: config.idempotency_keys,
            }),
        }
    }

    /// The same connections, with another bearer token: one tenant among many.
    pub fn with_token(&self, token: &str) -> Self {
        let inner = &self.inner;
        Self {
            inner: Arc::new(Inner {
                http: inner.http.clone(),
                urls: inner.urls.clone(),
                next: AtomicUsize::new(0),
                ids: AtomicU64::new(1),
                token: Some(token.to_owned()),
                capabilities: inner.capabilities.clone(),
                keyed: inner.keyed,
            }),
        }
    }

    fn pick(&self) -> (&reqwest::Client, &str) {
        let i = self.inner.next.fetch_add(1, Ordering::Relaxed);
        (&self.inner.http[i % self.inner.http.len()], &self.inner.urls[i % self.inner.urls.len()])
    }

    fn request(&self, method: &str, mut params: Value, tasks: bool) -> reqwest::RequestBuilder {
        let capabilities = if tasks { self.inner.capabilities.clone() } else { json!({}) };
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": capabilities,
        });
        let name = taskgate_shared::protocol::method::name_header_for(method, &params);
        let id = self.inner.ids.fetch_add(1, Ordering::Relaxed);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let (http, url) = self.pick();
        let mut request = http
            .post(url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", method)
            .body(body.to_string());
        if let Some(name) = name {
            request = request.header("Mcp-Name", name);
        }
        if let Some(token) = &self.inner.token {
            request = request.bearer_auth(token);
        }
        if self.inner.keyed && method == "tools/call" {
            request = request.header("Idempotency-Key", format!("{:032x}", rand::random::<u128>()));
        }
        request
    }

    /// A request whose reply is one JSON-RPC message (or an SSE stream ending with it).
    pub async fn call(&self, method: &str, params: Value, tasks: bool) -> Result<Value, LoadError> {
        let response = self.request(method, params, tasks).send().await.map_err(classify)?;
        let status = response.status().as_u16();
        let text = response.text().await.map_err(classify)?;
        // The last event carries the response when the reply is SSE; a JSON reply has none.
        let last = sse::data_of(text.as_bytes()).pop();
        let message = last.as_deref().unwrap_or(&text);
        let reply: Value = serde_json::from_str(message.trim()).map_err(|_| LoadError::Http(status))?;
        if let Some(code) = reply["error"]["code"].as_i64() {
            return Err(LoadError::Rpc(code));
        }
        if status >= 400 {
            return Err(LoadError::Http(status));
        }
        Ok(reply["result"].clone())
    }

    /// A request whose reply is only checked: its `resultType` (or error), without building a
    /// JSON tree (the load generator shares the machine with what it measures).
    pub async fn call_light(&self, method: &str, params: Value, tasks: bool) -> Result<LightResult, LoadError> {
        let response = self.request(method, params, tasks).send().await.map_err(classify)?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await.map_err(classify)?;
        let reply: LightReply = serde_json::from_slice(&bytes).map_err(|_| LoadError::Http(status))?;
        if let Some(error) = reply.error {
            return Err(LoadError::Rpc(error.code));
        }
        reply.result.ok_or(LoadError::Http(status))
    }

    /// Opens a `subscriptions/listen` stream.
    pub async fn listen(&self, task_ids: &[&str]) -> Result<reqwest::Response, LoadError> {
        let response = self
            .request("subscriptions/listen", json!({"notifications": {"taskIds": task_ids}}), true)
            .timeout(Duration::from_secs(3_600))
            .send()
            .await
            .map_err(classify)?;
        if !response.status().is_success() {
            return Err(LoadError::Http(response.status().as_u16()));
        }
        Ok(response)
    }
}

fn classify(err: reqwest::Error) -> LoadError {
    if err.is_timeout() { LoadError::Timeout } else { LoadError::Transport }
}

/// Reads the JSON messages of an SSE response, one per event (events whose data is not JSON
/// are skipped).
pub struct SseReader {
    response: reqwest::Response,
    decoder: SseDecoder,
    ended: bool,
}

impl SseReader {
    pub fn new(response: reqwest::Response) -> Self {
        Self { response, decoder: SseDecoder::default(), ended: false }
    }

    /// The next message; `None` when the stream ends.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            while let Some(item) = self.decoder.next_item() {
                if let SseItem::Event(SseEvent { data: Some(data), .. }) = item
                    && let Ok(message) = serde_json::from_str(&data)
                {
                    return Some(message);
                }
            }
            if self.ended {
                return None;
            }
            match self.response.chunk().await {
                Ok(Some(chunk)) => self.decoder.push(&chunk),
                // The end: a last event without its blank line is still read.
                Ok(None) => {
                    self.ended = true;
                    self.decoder.finish();
                }
                // A broken stream: an event it cut off may be partial, so it is dropped.
                Err(_) => return None,
            }
        }
    }
}
