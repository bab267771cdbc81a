//! A small MCP 2026-07-28 client: the right headers, `_meta` on every request, raw access for
//! tests that break the rules on purpose.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};
use taskgate_shared::protocol::sse::{self, SseDecoder, SseEvent};

/// `_meta` declaring the Tasks extension.
pub fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": { "extensions": { "io.modelcontextprotocol/tasks": {} }, "elicitation": {} },
        "io.modelcontextprotocol/clientInfo": { "name": "taskgate-tests", "version": "1.0.0" }
    })
}

/// `_meta` without the Tasks extension.
pub fn meta_without_tasks() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": { "extensions": {} }
    })
}

/// An HTTP reply.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    /// The raw body.
    pub text: String,
    /// The body as JSON (`Null` when empty or not JSON).
    pub body: Value,
}

impl Reply {
    pub fn result(&self) -> &Value {
        &self.body["result"]
    }

    pub fn error(&self) -> &Value {
        &self.body["error"]
    }

    pub fn error_code(&self) -> Option<i64> {
        self.body["error"]["code"].as_i64()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

pub struct McpClient {
    http: reqwest::Client,
    url: String,
    next_id: AtomicU64,
    bearer: Option<String>,
}

impl McpClient {
    pub fn new(base: &str) -> Self {
        let http = reqwest::Client::builder().no_proxy().build().expect("http client");
        Self { http, url: format!("{base}/mcp"), next_id: AtomicU64::new(1), bearer: None }
    }

    /// A client that speaks HTTP/2 over cleartext with prior knowledge (h2c), as proxies in
    /// front of a gateway do: its requests share one connection.
    pub fn http2(base: &str) -> Self {
        let http = reqwest::Client::builder().no_proxy().http2_prior_knowledge().build().expect("http client");
        Self { http, url: format!("{base}/mcp"), next_id: AtomicU64::new(1), bearer: None }
    }

    /// The same gateway, sending `Authorization: Bearer <token>` on every request.
    pub fn with_bearer(mut self, token: &str) -> Self {
        self.bearer = Some(token.to_owned());
        self
    }

    pub fn base(&self) -> &str {
        self.url.trim_end_matches("/mcp")
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// A request with the standard headers, `_meta` (with the Tasks extension) added to
    /// `params` unless it has one.
    pub async fn call(&self, method: &str, params: Value) -> Reply {
        let body = self.envelope(method, params);
        let headers = standard_headers(&body);
        self.send(&headers, body.to_string().into_bytes()).await
    }

    /// The JSON-RPC envelope `call` would send (with a fresh id).
    pub fn envelope(&self, method: &str, mut params: Value) -> Value {
        if params.get("_meta").is_none() {
            params["_meta"] = meta();
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
    }

    /// POSTs `body` with exactly these headers.
    pub async fn send(&self, headers: &[(String, String)], body: Vec<u8>) -> Reply {
        let mut request = self.http.post(&self.url).body(body);
        if let Some(token) = &self.bearer {
            request = request.bearer_auth(token);
        }
        for (name, value) in headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let response = request.send().await.expect("the gateway answers");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply { status, headers, text, body }
    }
}

/// The headers a conforming client sends for `body`.
pub fn standard_headers(body: &Value) -> Vec<(String, String)> {
    let method = body["method"].as_str().unwrap_or_default();
    let params = &body["params"];
    let version = params["_meta"]["io.modelcontextprotocol/protocolVersion"].as_str().unwrap_or("2026-07-28");
    let mut headers = vec![
        ("Content-Type".to_owned(), "application/json".to_owned()),
        ("Accept".to_owned(), "application/json, text/event-stream".to_owned()),
        ("MCP-Protocol-Version".to_owned(), version.to_owned()),
        ("Mcp-Method".to_owned(), method.to_owned()),
    ];
    if let Some(name) = taskgate_shared::protocol::method::name_header_for(method, params) {
        headers.push(("Mcp-Name".to_owned(), name));
    }
    headers
}

/// Task conveniences.
impl McpClient {
    /// `tools/call` that must create a task; returns its id.
    pub async fn create_task(&self, tool: &str, arguments: Value) -> String {
        let r = self.call("tools/call", json!({ "name": tool, "arguments": arguments })).await;
        assert_eq!(r.result()["resultType"], "task", "expected a task: {}", r.text);
        r.result()["taskId"].as_str().expect("taskId").to_owned()
    }

    /// The `tasks/get` reply.
    pub async fn get_task(&self, task_id: &str) -> Reply {
        self.call("tasks/get", json!({ "taskId": task_id })).await
    }

    /// Polls `tasks/get` until the task has `status`; returns that result.
    pub async fn wait_for_status(&self, task_id: &str, status: &str, patience: std::time::Duration) -> Value {
        crate::eventually(patience, &format!("task {task_id} to be {status}"), || async {
            let r = self.get_task(task_id).await;
            (r.result()["status"] == status).then(|| r.result().clone())
        })
        .await
    }

    pub async fn update_task(&self, task_id: &str, responses: Value) -> Reply {
        self.call("tasks/update", json!({ "taskId": task_id, "inputResponses": responses })).await
    }

    pub async fn cancel_task(&self, task_id: &str) -> Reply {
        self.call("tasks/cancel", json!({ "taskId": task_id })).await
    }
}

/// The empty acknowledgement every `tasks/update` and `tasks/cancel` returns.
pub fn ack() -> Value {
    json!({ "resultType": "complete", "_meta": { "io.modelcontextprotocol/serverInfo": { "name": "taskgate", "version": env!("CARGO_PKG_VERSION") } } })
}

/// One SSE item.
#[derive(Debug, Clone, PartialEq)]
pub enum SseItem {
    Message(Value),
    Comment(String),
}

/// A response read as SSE, incrementally.
pub struct SseStream {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    body: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    decoder: SseDecoder,
    /// The body has ended (whatever the decoder still holds is read first).
    ended: bool,
    /// Every event seen, with its `id:` and `event:` fields, for framing assertions.
    pub events: Vec<SseEvent>,
}

impl SseStream {
    /// The next item, `None` at the end of the stream; panics after `patience`.
    pub async fn next_item(&mut self, patience: std::time::Duration) -> Option<SseItem> {
        use futures::StreamExt as _;
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            if let Some(item) = self.decoder.next_item() {
                match item {
                    sse::SseItem::Comment(comment) => return Some(SseItem::Comment(comment)),
                    sse::SseItem::Event(event) => {
                        self.events.push(event.clone());
                        // An event without data carries no message (`events` still shows it).
                        if let Some(data) = event.data {
                            let message = serde_json::from_str(&data).expect("one JSON message per event");
                            return Some(SseItem::Message(message));
                        }
                    }
                }
            }
            if self.ended {
                return None;
            }
            let chunk = tokio::time::timeout_at(deadline, self.body.next()).await.expect("an SSE item in time");
            match chunk {
                Some(Ok(bytes)) => self.decoder.push(&bytes),
                // The end: a last event without its blank line is still read.
                None => {
                    self.ended = true;
                    self.decoder.finish();
                }
                Some(Err(_)) => return None,
            }
        }
    }

    /// The next JSON-RPC message, skipping comments; `None` at the end of the stream. Panics
    /// after `patience` in all: keep-alive comments do not extend it.
    pub async fn next_message(&mut self, patience: std::time::Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_item(left).await? {
                SseItem::Message(m) => return Some(m),
                SseItem::Comment(_) => {}
            }
        }
    }
}

impl McpClient {
    /// Sends a request and reads its response as a stream.
    pub async fn open_stream(&self, method: &str, params: Value) -> (Value, SseStream) {
        let body = self.envelope(method, params);
        let mut request = self.http.post(&self.url).body(body.to_string());
        if let Some(token) = &self.bearer {
            request = request.bearer_auth(token);
        }
        for (name, value) in standard_headers(&body) {
            request = request.header(name, value);
        }
        let response = request.send().await.expect("the gateway answers");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let stream = SseStream {
            status,
            headers,
            body: Box::pin(response.bytes_stream()),
            decoder: SseDecoder::default(),
            ended: false,
            events: Vec::new(),
        };
        (body, stream)
    }
}
