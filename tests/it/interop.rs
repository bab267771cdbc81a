//! Interop: MCP clients that nobody here wrote drive the real binaries at the gateway's
//! defaults (only `--auth none`): connect, list tools, call a short tool (answered with its
//! result in the one reply, at the default `--complete-within-ms`), complete a task that runs
//! longer (answered with its handle), cancel a running one, answer `input_required` through
//! `tasks/update`. Every request is timed and recorded, and no step may meet a 429 or any other
//! refusal.
//!
//! - The official Rust SDK, `rmcp` 3.11 (client features only). It has no polling loop of its
//!   own, so the test polls as eagerly as careless clients do (every 20 ms), which the gateway
//!   must pace by holding polls, not refuse.
//! - The official Python SDK, `mcp` 2.3.0 (pinned; `scripts/interop-clients` installs it from
//!   PyPI into `.cache/interop`, and the test runs that script when it is missing). It has no
//!   client for the Tasks extension, so `tests/interop/python_client.py` adds one through the
//!   SDK's extension hooks, and polls every 50 ms.

use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig, ElicitationCapability,
    ExtensionCapabilities, GetTaskParams, GetTaskResult, Implementation, InputResponses, JsonObject, ProtocolVersion,
    TASKS_EXTENSION_ID, TaskPayload, TaskStatus, UpdateTaskParams,
};
use rmcp::service::{Peer, RoleClient};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt as _};
use serde_json::{Value, json};
use taskgate_tests::{Stack, StackBuilder, interop};

/// The gateway at its defaults: the harness's own relaxations are taken back.
fn at_defaults() -> StackBuilder {
    // The gateway at its defaults; `noop` alone is given a budget that a loaded machine cannot
    // miss (a tool's own setting), so that the clients' handling of a result in the reply is
    // what is tested, whatever the machine's speed. Every other tool has the default budget.
    Stack::builder()
        .gateway_option("--poll-tolerance", "0.5")
        .without_gateway_option("--complete-within-ms")
        .worker_args(&["--tool-complete-within-ms", "noop=5000"])
}

/// Every request a client made: what, and how long it took.
#[derive(Default)]
struct Timings(Vec<(String, Duration)>);

impl Timings {
    async fn time<T, E: std::fmt::Debug>(&mut self, what: &str, call: impl Future<Output = Result<T, E>>) -> T {
        let started = Instant::now();
        let result = call.await;
        self.0.push((what.to_owned(), started.elapsed()));
        result.unwrap_or_else(|err| panic!("{what} was refused or failed: {err:?}"))
    }

    fn report(&self, client: &str) {
        let polls = self.0.iter().filter(|(w, _)| w == "tasks/get").count();
        let longest = self.0.iter().map(|(_, d)| *d).max().unwrap_or_default();
        println!("{client}: {} requests ({polls} polls), none refused, longest {longest:?}", self.0.len());
        for (what, took) in &self.0 {
            println!("  {what:<22} {took:>10.1?}");
        }
    }
}

fn capabilities() -> ClientConfig {
    let mut capabilities = ClientCapabilities::default();
    let mut extensions = ExtensionCapabilities::new();
    extensions.insert(TASKS_EXTENSION_ID.to_owned(), JsonObject::new());
    capabilities.extensions = Some(extensions);
    capabilities.elicitation = Some(ElicitationCapability::new());
    ClientConfig::new(capabilities, Implementation::new("taskgate-interop", env!("CARGO_PKG_VERSION")))
}

/// `tools/call` that must come back as a task: its id.
async fn start(peer: &Peer<RoleClient>, timings: &mut Timings, tool: &str, arguments: Value) -> String {
    let Value::Object(arguments) = arguments else { unreachable!("arguments are an object") };
    let request = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    match timings.time("tools/call", peer.call_tool_once(request)).await {
        CallToolResponse::Task(created) => created.task.task_id,
        other => panic!("{tool}: expected a task, got {other:?}"),
    }
}

/// Polls every 20 ms, as eager clients do, until `done`.
async fn poll(
    peer: &Peer<RoleClient>,
    timings: &mut Timings,
    task_id: &str,
    done: impl Fn(TaskStatus) -> bool,
) -> GetTaskResult {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = timings.time("tasks/get", peer.get_task(GetTaskParams::new(task_id.to_owned()))).await;
        if done(got.task.status()) {
            return got;
        }
        assert!(Instant::now() < deadline, "task {task_id} stuck in {:?}", got.task.status());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_sdk_client_runs_tasks_at_the_defaults() {
    let stack = at_defaults().spawn().await;
    let url = format!("{}/mcp", stack.gateways[0].url.as_deref().unwrap());
    let mut timings = Timings::default();
    let transport = StreamableHttpClientTransport::from_config(StreamableHttpClientTransportConfig::with_uri(url));
    let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
    let client = timings.time("server/discover", capabilities().serve_with_lifecycle(transport, lifecycle)).await;
    let server = client.peer_info().expect("discovered");
    assert_eq!(server.protocol_version, ProtocolVersion::V_2026_07_28);

    let tools = timings.time("tools/list", client.list_tools(None)).await;
    let names: Vec<String> = tools.tools.iter().map(|t| t.name.to_string()).collect();
    assert!(names.contains(&"generate_report".to_owned()) && names.contains(&"sleep".to_owned()), "{names:?}");

    // A short tool: its result in the one reply, and its task, named in `_meta`, completed.
    let short = CallToolRequestParams::new("noop".to_owned());
    let CallToolResponse::Complete(result) = timings.time("tools/call", client.call_tool_once(short)).await else {
        panic!("noop: expected its result in the reply at the defaults")
    };
    assert_eq!(result.is_error, Some(false), "{result:?}");
    let id = result.meta.as_ref().and_then(|m| m.get("io.taskgate/taskId")).and_then(Value::as_str);
    let id = id.unwrap_or_else(|| panic!("noop: the task's id in _meta: {result:?}")).to_owned();
    let got = timings.time("tasks/get", client.get_task(GetTaskParams::new(id))).await;
    assert_eq!(got.task.status(), TaskStatus::Completed);

    // A task to completion: it runs longer than the budget, so the reply is its handle.
    let id = start(&client, &mut timings, "sleep", json!({"ms": 1500})).await;
    let done = poll(&client, &mut timings, &id, |s| s.is_terminal()).await;
    let TaskPayload::Completed { result } = &done.task.payload else { panic!("sleep ended {:?}", done.task.status()) };
    assert_eq!(result["structuredContent"]["sleptMs"], 1500, "{result:?}");

    // A running task (a worker holds it), cancelled.
    let id = start(&client, &mut timings, "sleep", json!({"ms": 60_000})).await;
    stack.wait_until_held(&id, Duration::from_secs(15)).await;
    timings.time("tasks/cancel", client.cancel_task(CancelTaskParams::new(id.clone()))).await;
    let done = poll(&client, &mut timings, &id, |s| s.is_terminal()).await;
    assert_eq!(done.task.status(), TaskStatus::Cancelled);

    // Input asked mid-task, answered through tasks/update.
    let id = start(&client, &mut timings, "generate_report", json!({"size": "small"})).await;
    let parked = poll(&client, &mut timings, &id, |s| s == TaskStatus::InputRequired || s.is_terminal()).await;
    let TaskPayload::InputRequired { input_requests } = &parked.task.payload else {
        panic!("not parked: {:?}", parked.task.status())
    };
    assert!(input_requests.contains_key("approve_outline"), "{input_requests:?}");
    let mut answers = InputResponses::new();
    answers.insert("approve_outline".into(), json!({"action": "accept", "content": {"approved": true}}));
    timings.time("tasks/update", client.update_task(UpdateTaskParams::new(id.clone(), answers))).await;
    let done = poll(&client, &mut timings, &id, |s| s.is_terminal()).await;
    assert_eq!(done.task.status(), TaskStatus::Completed);

    timings.report("rmcp 3.11.0");
    let _ = client.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_client_runs_tasks_at_the_defaults() {
    let python = interop::python();
    let stack = at_defaults().spawn().await;
    let url = format!("{}/mcp", stack.gateways[0].url.as_deref().unwrap());
    let run = tokio::process::Command::new(python).arg(interop::python_client()).arg(&url).kill_on_drop(true).output();
    let output = tokio::time::timeout(Duration::from_secs(120), run).await.expect("the client finishes").unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the Python client failed:\n{stdout}\n{stderr}");
    // One JSON line per request: what, how long, and that it was answered.
    let requests: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|l: &Value| l["request"].is_string())
        .collect();
    for step in ["server/discover", "tools/list", "tools/call", "tasks/get", "tasks/cancel", "tasks/update"] {
        assert!(requests.iter().any(|r| r["request"] == step), "the client made no {step}: {stdout}");
    }
    // The short tool's line says how it was answered (the client checks the rest).
    let lines: Vec<Value> = stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let short: Vec<&Value> = lines.iter().filter(|l| l["short"].is_string()).collect();
    assert!(matches!(short[..], [s] if s["short"] == "result"), "noop answered with its result: {stdout}");
    assert!(requests.iter().all(|r| r["ok"] == true), "a request was refused: {stdout}");
    assert!(stdout.contains("\"done\": true"), "{stdout}");
    println!("mcp 2.3.0 (Python): {} requests, none refused\n{stdout}", requests.len());
}
