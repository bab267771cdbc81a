//! A hermetic upstream MCP server for the bridge tests, built on the official Rust SDK's server
//! side. `upstream-fixture stdio [--legacy]` serves on stdin/stdout; `upstream-fixture http
//! [--legacy] [--oauth]` serves Streamable HTTP on a free loopback port and prints its URL as the
//! first line of stdout. `--legacy` speaks only 2025-11-25 and earlier (no `server/discover`);
//! `--oauth` adds a token endpoint and demands its tokens (see `oauth.rs`).
//!
//! It appends what it sees to the file named by `FIXTURE_LOG` (one line per event), so a test
//! can tell which handshake ran, which calls arrived, whether a cancel reached it, and (over
//! HTTP) which bearer each request carried. `FIXTURE_LINGER_MS` keeps a stdio server alive that
//! long after its input closes, as a server slow to exit.

#[path = "upstream_fixture/oauth.rs"]
mod oauth;

use std::borrow::Cow;
use std::io::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rmcp::model::CallToolResponse;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock as Content, DiscoverResult, Implementation,
    InitializeRequestParams, InitializeResult, InputRequiredResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt as _};
use serde_json::{Value, json};

/// The fixture's own tasks (`tasked`): working until `ready_at`, then asking `go`, then done.
struct FixtureTask {
    ready_at: std::time::Instant,
    /// Whether it asks `go` once ready; if not, it completes then.
    ask: bool,
    state: TaskState,
}

#[derive(Clone, PartialEq)]
enum TaskState {
    Working,
    Done(String),
    Cancelled,
}

static NEXT_TASK: AtomicUsize = AtomicUsize::new(1);
static TASKS: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<String, FixtureTask>>> =
    std::sync::LazyLock::new(Default::default);

fn tasks() -> std::sync::MutexGuard<'static, std::collections::HashMap<String, FixtureTask>> {
    TASKS.lock().expect("the task table")
}

fn task_view(id: &str, status: rmcp::model::TaskStatus, message: Option<&str>) -> rmcp::model::Task {
    let now = "2026-01-01T00:00:00Z";
    let mut task = rmcp::model::Task::new(id, status, now, now);
    task.poll_interval_ms = Some(100);
    task.status_message = message.map(str::to_owned);
    task
}

/// Set by `freeze`: from then on the stdio server reads nothing more, so it answers no ping and
/// no cancel, like a wedged process. (Stopping the process with a signal instead proved fragile:
/// a stray `SIGCONT` or a failed `kill` let the call finish.)
static FROZEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Standard input that goes silent for good once `FROZEN` is set.
struct FreezableStdin(tokio::io::Stdin);

impl tokio::io::AsyncRead for FreezableStdin {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if FROZEN.load(Ordering::SeqCst) {
            // Never woken: the process is wedged until it is killed.
            return std::task::Poll::Pending;
        }
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

/// Set by `storm` before its last notification: the next listing has the tool `late`.
static LATE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Calls of `hold` running now, and the most ever at once.
static HELD: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

#[derive(Clone)]
struct Fixture {
    legacy: bool,
}

fn log(line: &str) {
    if let Ok(path) = std::env::var("FIXTURE_LOG")
        && let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(path)
    {
        let _ = writeln!(file, "{line}");
    }
}

fn tool(name: &str, description: &str, properties: Value, annotations: Option<Value>) -> Tool {
    let mut json = json!({
        "name": name,
        "description": description,
        "inputSchema": { "type": "object", "properties": properties },
    });
    if let Some(annotations) = annotations {
        json["annotations"] = annotations;
    }
    serde_json::from_value(json).expect("a valid tool")
}

fn tools() -> Vec<Tool> {
    let tag = json!({ "tag": { "type": "string" }, "ms": { "type": "integer" } });
    let mut slow = tool(
        "slow",
        "Reports progress once per step, then answers.",
        json!({ "steps": { "type": "integer" }, "step_ms": { "type": "integer" } }),
        Some(json!({ "readOnlyHint": true })),
    );
    slow.title = Some("Slow, with progress".into());
    slow.output_schema = Some(std::sync::Arc::new(
        serde_json::from_value(json!({ "type": "object", "properties": { "steps": { "type": "integer" } } })).unwrap(),
    ));
    vec![
        tool(
            "echo",
            "Answers with its arguments.",
            json!({ "text": { "type": "string" } }),
            Some(json!({ "readOnlyHint": true })),
        ),
        slow,
        tool("wait_for_cancel", "Waits until the call is cancelled, and logs the cancel.", json!({}), None),
        tool("crash", "Ends the server's process mid-call.", json!({}), None),
        tool("never_answers", "Never answers, whatever happens.", json!({}), None),
        tool("side_effect", "Logs an effect, then takes `ms` to answer.", tag.clone(), None),
        tool(
            "idempotent_effect",
            "Like side_effect, but annotated idempotent.",
            tag,
            Some(json!({ "idempotentHint": true })),
        ),
        tool(
            "ask",
            "Asks the client for input mid-call; with `withdraw_ms`, stops waiting after that long.",
            json!({ "withdraw_ms": { "type": "integer" } }),
            None,
        ),
        tool("sample", "Asks the client for an LLM sampling mid-call.", json!({}), None),
        tool(
            "tasked",
            "Answers with a task of its own (the client must declare the Tasks extension), which asks `go` after `ms`, then completes; with `ask: false` it completes after `ms` without asking; it can be cancelled.",
            json!({ "ms": { "type": "integer" }, "ask": { "type": "boolean" } }),
            None,
        ),
        tool(
            "whoami_bearer",
            "Answers with whom the HTTP request's bearer token names, as the fixture logs it.",
            json!({}),
            Some(json!({ "readOnlyHint": true })),
        ),
        tool(
            "whoami",
            "Answers with its pid, working directory, FIXTURE_* environment and the HTTP request's Authorization and X-Team headers.",
            json!({}),
            Some(json!({ "readOnlyHint": true })),
        ),
        tool("hold", "Holds for `ms`, counting the calls held at once.", json!({ "ms": { "type": "integer" } }), None),
        tool("peak", "The most `hold` calls this process ever held at once.", json!({}), None),
        tool(
            "noisy",
            "Writes `lines` lines of `bytes` bytes each to stderr, then answers.",
            json!({ "lines": { "type": "integer" }, "bytes": { "type": "integer" } }),
            None,
        ),
        tool("relist", "Sends notifications/tools/list_changed.", json!({}), None),
        tool(
            "approve_twice",
            "Asks for approval in two rounds of input_required (2026-07-28), keeping its place in requestState. Without an elicitation capability declared it does not ask, unless `force`.",
            json!({ "force": { "type": "boolean" } }),
            None,
        ),
        tool(
            "huge_error",
            "Fails with `bytes` of text: as a tool error (`isError`), or with `rpc` as a JSON-RPC error's data.",
            json!({ "bytes": { "type": "integer" }, "rpc": { "type": "boolean" } }),
            None,
        ),
        tool(
            "loud_progress",
            "Reports progress whose message is `bytes` long and full of control characters, then answers after `ms`.",
            json!({ "bytes": { "type": "integer" }, "ms": { "type": "integer" } }),
            None,
        ),
        tool(
            "ask_huge",
            "Asks a question `bytes` long: mid-call (elicitation/create), or with `round` as a 2026-07-28 input_required.",
            json!({ "bytes": { "type": "integer" }, "round": { "type": "boolean" } }),
            None,
        ),
        tool(
            "storm",
            "Sends `count` notifications/tools/list_changed, one per `every_ms`; the last one lists a new tool, `late`.",
            json!({ "count": { "type": "integer" }, "every_ms": { "type": "integer" } }),
            None,
        ),
        tool(
            "freeze",
            "Wedges the stdio server: it reads nothing more, so it answers no ping and no cancel.",
            json!({}),
            None,
        ),
    ]
}

fn text(text: impl Into<String>) -> CallToolResponse {
    CallToolResponse::Complete(CallToolResult::success(vec![Content::text(text.into())]))
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder().enable_tools().enable_tool_list_changed().enable_tasks().build(),
        )
        .with_server_info(Implementation::new("taskgate-upstream-fixture", "1.0.0"))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        if self.legacy {
            Cow::Borrowed(&[ProtocolVersion::V_2025_06_18, ProtocolVersion::V_2025_11_25])
        } else {
            Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
        }
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        let result = self.negotiate_initialize(&request)?;
        log(&format!("initialize {}", result.protocol_version));
        Ok(result)
    }

    async fn discover(&self, _context: RequestContext<RoleServer>) -> Result<DiscoverResult, ErrorData> {
        log("discover");
        Ok(DiscoverResult::from_server_info(self.supported_protocol_versions().into_owned(), self.get_info()))
    }

    /// With `FIXTURE_ENDLESS_PAGES` set, every page names a next one: the tools are on the
    /// first, nothing is on the others.
    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tools = tools();
        if LATE.load(Ordering::SeqCst) {
            tools.push(tool("late", "Listed after a storm of list changes.", json!({}), None));
        }
        if std::env::var_os("FIXTURE_ENDLESS_PAGES").is_none() {
            return Ok(ListToolsResult { tools, ..Default::default() });
        }
        let page: u64 = request.and_then(|r| r.cursor).and_then(|c| c.parse().ok()).unwrap_or(0);
        log(&format!("list page {page}"));
        let tools = if page == 0 { tools } else { Vec::new() };
        Ok(ListToolsResult { tools, next_cursor: Some((page + 1).to_string()), ..Default::default() })
    }

    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, ErrorData> {
        use rmcp::model::{DetailedTask, TaskPayload, TaskStatus};
        let tasks = tasks();
        log(&format!("task get {}", request.task_id));
        let Some(task) = tasks.get(&request.task_id) else {
            return Err(ErrorData::invalid_params("unknown task", None));
        };
        let (status, payload, message) = match &task.state {
            TaskState::Working if std::time::Instant::now() < task.ready_at => {
                (TaskStatus::Working, TaskPayload::Working, Some("warming up"))
            }
            TaskState::Working if !task.ask => {
                let result =
                    json!({ "content": [{ "type": "text", "text": "task done without asking" }], "isError": false });
                let Value::Object(result) = result else { unreachable!() };
                (TaskStatus::Completed, TaskPayload::Completed { result }, None)
            }
            TaskState::Working => {
                let request = serde_json::from_value(json!({
                    "method": "elicitation/create",
                    "params": {
                        "mode": "form",
                        "message": "Go on?",
                        "requestedSchema": { "type": "object", "properties": { "go": { "type": "boolean" } } }
                    }
                }))
                .expect("an input request");
                let requests = std::collections::BTreeMap::from([("go".to_owned(), request)]);
                (TaskStatus::InputRequired, TaskPayload::InputRequired { input_requests: requests }, None)
            }
            TaskState::Done(text) => {
                let result = json!({ "content": [{ "type": "text", "text": text }], "isError": false });
                let Value::Object(result) = result else { unreachable!() };
                (TaskStatus::Completed, TaskPayload::Completed { result }, None)
            }
            TaskState::Cancelled => (TaskStatus::Cancelled, TaskPayload::Cancelled, None),
        };
        let detailed = DetailedTask::new(task_view(&request.task_id, status, message), payload);
        Ok(rmcp::model::GetTaskResult::new(detailed))
    }

    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let mut tasks = tasks();
        let Some(task) = tasks.get_mut(&request.task_id) else {
            return Err(ErrorData::invalid_params("unknown task", None));
        };
        let action = request.input_responses.get("go").and_then(|a| a.get("action")).and_then(Value::as_str);
        log(&format!("task update {} {}", request.task_id, action.unwrap_or("-")));
        if task.state == TaskState::Working && std::time::Instant::now() >= task.ready_at {
            task.state = TaskState::Done(format!("task done: {}", action.unwrap_or("no answer")));
        }
        Ok(())
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let mut tasks = tasks();
        let Some(task) = tasks.get_mut(&request.task_id) else {
            return Err(ErrorData::invalid_params("unknown task", None));
        };
        log(&format!("task cancelled {}", request.task_id));
        if !matches!(task.state, TaskState::Done(_)) {
            task.state = TaskState::Cancelled;
        }
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.clone().unwrap_or_default();
        let int = |key: &str, default: u64| args.get(key).and_then(Value::as_u64).unwrap_or(default);
        let tag = args.get("tag").and_then(Value::as_str).unwrap_or("").to_owned();
        log(&format!("call {} {tag}", request.name));
        // The idempotency key the worker passes: a retried call must carry the same one.
        let key = context.meta.get("io.taskgate/idempotencyKey").and_then(Value::as_str).unwrap_or("-");
        log(&format!("key {} {tag} {key}", request.name));
        // The related task ids the worker passed on, as received (`-`: none).
        let related =
            context.meta.get("io.modelcontextprotocol/relatedTaskIds").map_or_else(|| "-".to_owned(), Value::to_string);
        log(&format!("related {} {tag} {related}", request.name));
        match request.name.as_ref() {
            "echo" => Ok(text(args.get("text").and_then(Value::as_str).unwrap_or("").to_owned())),
            "slow" => {
                let steps = int("steps", 3);
                let token = context.meta.get_progress_token();
                for step in 1..=steps {
                    tokio::time::sleep(Duration::from_millis(int("step_ms", 100))).await;
                    if let Some(token) = &token {
                        let _ = context
                            .peer
                            .notify_progress(
                                ProgressNotificationParam::new(token.clone(), step as f64)
                                    .with_total(steps as f64)
                                    .with_message(format!("step {step}")),
                            )
                            .await;
                    }
                }
                let mut result = CallToolResult::success(vec![Content::text(format!("slow done after {steps} steps"))]);
                result.structured_content = Some(json!({ "steps": steps }));
                Ok(CallToolResponse::Complete(result))
            }
            "wait_for_cancel" => {
                context.ct.cancelled().await;
                log("cancelled wait_for_cancel");
                Ok(text("cancelled"))
            }
            "crash" => {
                log("crashing");
                std::process::exit(3);
            }
            "never_answers" => std::future::pending().await,
            "side_effect" | "idempotent_effect" => {
                log(&format!("effect {tag}"));
                tokio::time::sleep(Duration::from_millis(int("ms", 0))).await;
                Ok(text(format!("effect {tag} done")))
            }
            "ask" => {
                let params = serde_json::from_value(json!({
                    "mode": "form",
                    "message": "Approve?",
                    "requestedSchema": { "type": "object", "properties": { "ok": { "type": "boolean" } } }
                }))
                .expect("elicitation params");
                // `withdraw_ms`: stop waiting for the answer after that long (the SDK then
                // withdraws the question with notifications/cancelled).
                let request = rmcp::model::ServerRequest::ElicitRequest(rmcp::model::Request::new(params));
                let outcome = match args.get("withdraw_ms").and_then(Value::as_u64) {
                    Some(ms) => {
                        let options = rmcp::service::PeerRequestOptions::with_timeout(Duration::from_millis(ms));
                        match context.peer.send_request_with_option(request, options).await {
                            Ok(handle) => handle.await_response().await,
                            Err(err) => Err(err),
                        }
                    }
                    None => context.peer.send_request(request).await,
                };
                let line = match outcome {
                    Ok(reply) => format!("ask answered {reply:?}"),
                    Err(err) => format!("ask refused: {err}"),
                };
                log(&line);
                Ok(text(line))
            }
            "sample" => {
                let params = serde_json::from_value(json!({
                    "messages": [{ "role": "user", "content": { "type": "text", "text": "Say hi" } }],
                    "maxTokens": 10
                }))
                .expect("sampling params");
                let outcome = context
                    .peer
                    .send_request(rmcp::model::ServerRequest::CreateMessageRequest(rmcp::model::Request::new(params)))
                    .await;
                let line = match outcome {
                    Ok(reply) => format!("sample answered {reply:?}"),
                    Err(err) => format!("sample refused: {err}"),
                };
                log(&line);
                Ok(text(line))
            }
            "tasked" => {
                let declared = context
                    .meta
                    .client_capabilities()
                    .and_then(|c| c.extensions)
                    .is_some_and(|e| e.contains_key(rmcp::model::TASKS_EXTENSION_ID));
                if !declared {
                    log("tasked without the Tasks extension");
                    return Err(ErrorData::new(
                        rmcp::model::ErrorCode(-32021),
                        "the Tasks extension is required",
                        None,
                    ));
                }
                let id = format!("fx-task-{}", NEXT_TASK.fetch_add(1, Ordering::SeqCst));
                let ready_at = std::time::Instant::now() + Duration::from_millis(int("ms", 300));
                let ask = args.get("ask").and_then(Value::as_bool).unwrap_or(true);
                tasks().insert(id.clone(), FixtureTask { ready_at, ask, state: TaskState::Working });
                log(&format!("task created {id}"));
                Ok(CallToolResponse::Task(rmcp::model::CreateTaskResult::new(task_view(
                    &id,
                    rmcp::model::TaskStatus::Working,
                    None,
                ))))
            }
            "whoami" => {
                let env: serde_json::Map<String, Value> = std::env::vars()
                    .filter(|(k, _)| k.starts_with("FIXTURE_"))
                    .map(|(k, v)| (k, Value::String(v)))
                    .collect();
                let authorization = context
                    .extensions
                    .get::<axum::http::request::Parts>()
                    .and_then(|parts| parts.headers.get("authorization"))
                    .and_then(|value| value.to_str().ok())
                    .map(str::to_owned);
                let cwd = std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default();
                let team = context
                    .extensions
                    .get::<axum::http::request::Parts>()
                    .and_then(|parts| parts.headers.get("x-team"))
                    .and_then(|value| value.to_str().ok())
                    .map(str::to_owned);
                let who = json!({ "pid": std::process::id(), "cwd": cwd, "env": env, "authorization": authorization, "x-team": team });
                Ok(text(who.to_string()))
            }
            "whoami_bearer" => {
                let bearer = context
                    .extensions
                    .get::<axum::http::request::Parts>()
                    .and_then(|parts| parts.extensions.get::<oauth::Bearer>())
                    .map_or_else(|| "-".to_owned(), |bearer| bearer.0.clone());
                Ok(text(bearer))
            }
            "hold" => {
                let now = HELD.fetch_add(1, Ordering::SeqCst) + 1;
                PEAK.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(int("ms", 100))).await;
                HELD.fetch_sub(1, Ordering::SeqCst);
                Ok(text("held"))
            }
            "approve_twice" => {
                let declared = context.meta.client_capabilities().is_some_and(|c| c.elicitation.is_some());
                let state = request.request_state.clone();
                let action = request
                    .input_responses
                    .as_ref()
                    .and_then(|r| r.get("ok"))
                    .and_then(|a| a.get("action"))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                log(&format!(
                    "approve_twice state={} answer={} elicitation={declared}",
                    state.as_deref().unwrap_or("-"),
                    action.as_deref().unwrap_or("-")
                ));
                let ask = |step: u32| {
                    let request = serde_json::from_value(json!({
                        "method": "elicitation/create",
                        "params": {
                            "mode": "form",
                            "message": format!("Approve step {step}?"),
                            "requestedSchema": { "type": "object", "properties": { "ok": { "type": "boolean" } } }
                        }
                    }))
                    .expect("an input request");
                    let requests = std::collections::BTreeMap::from([("ok".to_owned(), request)]);
                    CallToolResponse::InputRequired(InputRequiredResult::new(
                        Some(requests),
                        Some(format!("step{step}")),
                    ))
                };
                if !declared && !args.get("force").and_then(Value::as_bool).unwrap_or(false) {
                    return Ok(text("not asked: the client declared no elicitation"));
                }
                match (state.as_deref(), action.as_deref()) {
                    (None, _) => Ok(ask(1)),
                    (Some("step1"), Some("accept")) => Ok(ask(2)),
                    (Some("step2"), Some("accept")) => Ok(text("approved twice")),
                    (Some(step), Some(action)) => Ok(text(format!("{action} at {step}"))),
                    _ => Err(ErrorData::invalid_params("retried without an answer", None)),
                }
            }
            "huge_error" => {
                let blob = "x".repeat(int("bytes", 1000) as usize);
                if args.get("rpc").and_then(Value::as_bool).unwrap_or(false) {
                    return Err(ErrorData::internal_error("a huge failure", Some(json!({ "blob": blob }))));
                }
                Ok(CallToolResponse::Complete(CallToolResult::error(vec![Content::text(blob)])))
            }
            "loud_progress" => {
                if let Some(token) = context.meta.get_progress_token() {
                    let message = format!("\u{1b}[31mLOUD\n\r{}\u{7}", "y".repeat(int("bytes", 100) as usize));
                    let progress = ProgressNotificationParam::new(token, 1.0).with_total(2.0).with_message(message);
                    let _ = context.peer.notify_progress(progress).await;
                }
                tokio::time::sleep(Duration::from_millis(int("ms", 100))).await;
                Ok(text("loud done"))
            }
            "ask_huge" => {
                let message = format!("Huge? {}", "z".repeat(int("bytes", 100) as usize));
                let form = json!({
                    "mode": "form",
                    "message": message,
                    "requestedSchema": { "type": "object", "properties": { "ok": { "type": "boolean" } } }
                });
                if args.get("round").and_then(Value::as_bool).unwrap_or(false) {
                    let request = serde_json::from_value(json!({ "method": "elicitation/create", "params": form }))
                        .expect("an input request");
                    let requests = std::collections::BTreeMap::from([("ok".to_owned(), request)]);
                    return Ok(CallToolResponse::InputRequired(InputRequiredResult::new(Some(requests), None)));
                }
                let params = serde_json::from_value(form).expect("elicitation params");
                let request = rmcp::model::ServerRequest::ElicitRequest(rmcp::model::Request::new(params));
                let line = match context.peer.send_request(request).await {
                    Ok(reply) => format!("ask_huge answered {reply:?}"),
                    Err(err) => format!("ask_huge refused: {err}"),
                };
                log(&line);
                Ok(text(line))
            }
            "storm" => {
                let count = int("count", 10);
                for sent in 1..=count {
                    if sent == count {
                        LATE.store(true, Ordering::SeqCst);
                    }
                    let _ = context.peer.notify_tool_list_changed().await;
                    tokio::time::sleep(Duration::from_millis(int("every_ms", 10))).await;
                }
                Ok(text("stormed"))
            }
            "relist" => {
                let _ = context.peer.notify_tool_list_changed().await;
                Ok(text("relisted"))
            }
            "peak" => Ok(text(PEAK.load(Ordering::SeqCst).to_string())),
            "noisy" => {
                let line = "e".repeat(int("bytes", 10) as usize);
                let mut stderr = std::io::stderr().lock();
                for _ in 0..int("lines", 1) {
                    let _ = writeln!(stderr, "{line}");
                }
                Ok(text("written"))
            }
            "freeze" => {
                FROZEN.store(true, Ordering::SeqCst);
                log("freezing");
                std::future::pending().await
            }
            other => Err(ErrorData::invalid_params(format!("unknown tool {other}"), None)),
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let legacy = args.iter().any(|a| a == "--legacy");
    let with_oauth = args.iter().any(|a| a == "--oauth");
    let fixture = Fixture { legacy };
    match args.first().map(String::as_str) {
        Some("stdio") => {
            log("started stdio");
            let running = fixture.serve((FreezableStdin(tokio::io::stdin()), tokio::io::stdout())).await?;
            running.waiting().await?;
            // FIXTURE_LINGER_MS: a server slow to exit once its input closes, as many are.
            let linger = std::env::var("FIXTURE_LINGER_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
            tokio::time::sleep(std::time::Duration::from_millis(linger)).await;
        }
        Some("http") => {
            use rmcp::transport::streamable_http_server::{
                StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
            };
            let config = StreamableHttpServerConfig::default().with_legacy_session_mode(legacy);
            let service: StreamableHttpService<Fixture, LocalSessionManager> =
                StreamableHttpService::new(move || Ok(fixture.clone()), Default::default(), config);
            let issuer = std::sync::Arc::new(oauth::Issuer::from_env(with_oauth));
            let mut router = axum::Router::new()
                .nest_service("/mcp", service)
                .layer(axum::middleware::from_fn_with_state(issuer.clone(), oauth::guard));
            if with_oauth {
                let token = axum::Router::new().route("/token", axum::routing::post(oauth::token)).with_state(issuer);
                router = router.merge(token);
            }
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            println!("http://{}/mcp", listener.local_addr()?);
            log("started http");
            axum::serve(listener, router).await?;
        }
        _ => anyhow::bail!("usage: upstream-fixture stdio [--legacy] | http [--legacy] [--oauth]"),
    }
    Ok(())
}
