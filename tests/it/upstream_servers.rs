//! Real third-party MCP servers behind the workers, installed pinned from their registries by
//! `scripts/interop-servers` (run by the test when they are missing): the reference
//! `@modelcontextprotocol/server-everything` (npm; a 2025-11-25 server with sessions) over stdio
//! and over Streamable HTTP, `@modelcontextprotocol/server-filesystem` (npm) and `mcp-server-time`
//! (PyPI). The calls are driven by the suite's interop clients, the official Rust and Python
//! SDKs, against the gateway, and followed with `subscriptions/listen` on another replica.

use std::process::Stdio;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig, ExtensionCapabilities,
    GetTaskParams, GetTaskResult, Implementation, JsonObject, ProtocolVersion, TASKS_EXTENSION_ID, TaskPayload,
    TaskStatus,
};
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt as _};
use serde_json::{Value, json};
use taskgate_tests::upstream::{upstreams_file, wait_for_tool};
use taskgate_tests::{Stack, eventually, free_port, interop};

const PATIENCE: Duration = Duration::from_secs(60);

async fn rust_client(stack: &Stack, gateway: usize) -> RunningService<RoleClient, ClientConfig> {
    let mut capabilities = ClientCapabilities::default();
    let mut extensions = ExtensionCapabilities::new();
    extensions.insert(TASKS_EXTENSION_ID.to_owned(), JsonObject::new());
    capabilities.extensions = Some(extensions);
    let config = ClientConfig::new(capabilities, Implementation::new("taskgate-upstream-interop", "1.0.0"));
    let url = format!("{}/mcp", stack.gateways[gateway].url.as_deref().unwrap());
    let transport = StreamableHttpClientTransport::from_config(StreamableHttpClientTransportConfig::with_uri(url));
    let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
    config.serve_with_lifecycle(transport, lifecycle).await.expect("the Rust SDK client connects")
}

async fn start(peer: &Peer<RoleClient>, tool: &str, arguments: Value) -> String {
    let Value::Object(arguments) = arguments else { unreachable!("arguments are an object") };
    match peer.call_tool_once(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments)).await {
        Ok(CallToolResponse::Task(created)) => created.task.task_id,
        other => panic!("{tool}: expected a task, got {other:?}"),
    }
}

async fn poll_until(peer: &Peer<RoleClient>, id: &str, done: impl Fn(&GetTaskResult) -> bool) -> GetTaskResult {
    eventually(PATIENCE, &format!("task {id}"), || async {
        let got = peer.get_task(GetTaskParams::new(id.to_owned())).await.ok()?;
        done(&got).then_some(got)
    })
    .await
}

/// The walkthrough of docs/upstreams.md: the long-running operation as a task, its progress in the status,
/// followed from another replica with `subscriptions/listen`, and another one cancelled.
async fn everything_runs_as_tasks(upstream: &str) {
    let mut stack = Stack::builder().gateways(2).workers(0).spawn().await;
    let file = upstreams_file(stack.scratch_dir(), "upstreams.toml", upstream);
    stack.add_worker(&["--tools", "", "--upstreams", file.to_str().unwrap()]).await;
    let tool = "everything__trigger-long-running-operation";
    let listed = wait_for_tool(&stack.client(0), tool, PATIENCE).await;
    assert_eq!(listed["inputSchema"]["properties"]["steps"]["type"], "number", "{listed}");
    let echo = wait_for_tool(&stack.client(0), "everything__echo", PATIENCE).await;
    assert_eq!(echo["inputSchema"]["required"], json!(["message"]), "{echo}");
    // Its prompts and resources are not served unless the configuration asks for them.
    let prompts = stack.client(0).call("prompts/list", json!({})).await;
    assert_eq!(prompts.error_code(), Some(-32601), "{}", prompts.text);

    let client = rust_client(&stack, 0).await;
    let id = start(&client, tool, json!({ "duration": 4, "steps": 4 })).await;
    let (opened, mut stream) =
        stack.client(1).open_stream("subscriptions/listen", json!({ "notifications": { "taskIds": [id] } })).await;
    assert!(opened.get("error").is_none(), "{opened}");
    let mut statuses = Vec::new();
    let done = loop {
        let message = stream.next_message(PATIENCE).await.expect("the listen stream stays open");
        if message["method"] != "notifications/tasks" {
            continue;
        }
        let params = &message["params"];
        if let Some(status) = params["statusMessage"].as_str() {
            statuses.push(status.to_owned());
        }
        if params["status"] == "completed" {
            break params.clone();
        }
        assert!(params["status"] == "working", "{message}");
    };
    assert!(statuses.iter().any(|s| s.starts_with("Progress ") && s.ends_with("/4")), "{statuses:?}");
    let got = client.get_task(GetTaskParams::new(id.clone())).await.unwrap();
    let TaskPayload::Completed { result } = &got.task.payload else { panic!("{done}") };
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.starts_with("Long running operation completed. Duration: 4 seconds, Steps: 4."), "{result:?}");

    let id = start(&client, tool, json!({ "duration": 120, "steps": 120 })).await;
    poll_until(&client, &id, |t| t.task.task.status_message.as_deref().is_some_and(|m| m.starts_with("Progress ")))
        .await;
    client.cancel_task(CancelTaskParams::new(id.clone())).await.expect("the cancel is accepted");
    let cancelled = poll_until(&client, &id, |t| t.task.status().is_terminal()).await;
    assert_eq!(cancelled.task.status(), TaskStatus::Cancelled);

    let id = start(&client, "everything__echo", json!({ "message": "through the bridge" })).await;
    let echoed = poll_until(&client, &id, |t| t.task.status().is_terminal()).await;
    let TaskPayload::Completed { result } = &echoed.task.payload else { panic!("{:?}", echoed.task.status()) };
    assert_eq!(result["content"][0]["text"], "Echo: through the bridge");
    let _ = client.cancel().await;

    // The official Python SDK through the other replica.
    let url = format!("{}/mcp", stack.gateways[1].url.as_deref().unwrap());
    let result = interop::python_call(&url, "everything__echo", &json!({ "message": "from Python" })).await;
    assert_eq!(result["content"][0]["text"], "Echo: from Python", "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_stdio() {
    let taskgate_tests::interop::Servers { node, everything, .. } = taskgate_tests::interop::servers();
    // The five lines of docs/upstreams.md.
    let upstream = format!(
        "[[upstream]]\nname = \"everything\"\ncommand = {:?}\nargs = [{:?}, \"stdio\"]\n",
        node.to_str().unwrap(),
        everything.to_str().unwrap()
    );
    everything_runs_as_tasks(&upstream).await;
}

/// server-everything's own HTTP listener (the child is killed when dropped) and its port.
struct EverythingHttp {
    _child: tokio::process::Child,
    port: u16,
}

impl EverythingHttp {
    async fn start() -> Self {
        let taskgate_tests::interop::Servers { node, everything, .. } = taskgate_tests::interop::servers();
        let port = free_port();
        let child = tokio::process::Command::new(node)
            .arg(everything)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("server-everything starts");
        eventually(Duration::from_secs(20), "server-everything to listen", || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok().map(drop)
        })
        .await;
        Self { _child: child, port }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_streamable_http() {
    let server = EverythingHttp::start().await;
    let upstream = format!("[[upstream]]\nname = \"everything\"\nurl = \"http://127.0.0.1:{}/mcp\"\n", server.port);
    everything_runs_as_tasks(&upstream).await;
}

/// mcp-server-time from a desktop client's `mcpServers` file, as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_server_time_converts_deterministically() {
    let taskgate_tests::interop::Servers { time, .. } = taskgate_tests::interop::servers();
    let mut stack = Stack::builder().workers(0).spawn().await;
    let config = json!({ "mcpServers": { "time": {
        "command": time.to_str().unwrap(), "args": ["--local-timezone", "UTC"], "autoApprove": []
    } } });
    let file = upstreams_file(stack.scratch_dir(), "claude_desktop_config.json", &config.to_string());
    stack.add_worker(&["--tools", "", "--upstreams", file.to_str().unwrap()]).await;
    let listed = wait_for_tool(&stack.client(0), "time__convert_time", PATIENCE).await;
    assert_eq!(listed["annotations"]["readOnlyHint"], true, "{listed}");

    let client = rust_client(&stack, 0).await;
    // Zones without daylight saving: the offsets hold on any date.
    let id = start(
        &client,
        "time__convert_time",
        json!({ "source_timezone": "Asia/Tokyo", "time": "12:00", "target_timezone": "Asia/Kolkata" }),
    )
    .await;
    let done = poll_until(&client, &id, |t| t.task.status().is_terminal()).await;
    let TaskPayload::Completed { result } = &done.task.payload else { panic!("{:?}", done.task.status()) };
    let converted = &result["structuredContent"];
    assert_eq!(converted["time_difference"], "-3.5h", "{result:?}");
    assert!(converted["source"]["datetime"].as_str().unwrap().ends_with("T12:00:00+09:00"), "{result:?}");
    assert!(converted["target"]["datetime"].as_str().unwrap().ends_with("T08:30:00+05:30"), "{result:?}");
    let _ = client.cancel().await;

    // The same call from the official Python SDK, the suite's other interop client.
    let url = format!("{}/mcp", stack.gateways[0].url.as_deref().unwrap());
    let arguments =
        json!({ "source_timezone": "America/Phoenix", "time": "06:15", "target_timezone": "Asia/Kathmandu" });
    let result = interop::python_call(&url, "time__convert_time", &arguments).await;
    let converted = &result["structuredContent"];
    assert_eq!(converted["time_difference"], "+12.75h", "{result}");
    assert!(converted["target"]["datetime"].as_str().unwrap().ends_with("T19:00:00+05:45"), "{result}");
}

/// server-everything's own mid-call elicitation, held on the task (`elicitation = "hold"`) and
/// answered through `tasks/update`, as docs/upstreams.md shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_elicitation_is_answered_through_the_task() {
    let taskgate_tests::interop::Servers { node, everything, .. } = taskgate_tests::interop::servers();
    let mut stack = Stack::builder().workers(0).spawn().await;
    let upstream = format!(
        "[[upstream]]\nname = \"everything\"\ncommand = {:?}\nargs = [{:?}, \"stdio\"]\nelicitation = \"hold\"\n",
        node.to_str().unwrap(),
        everything.to_str().unwrap()
    );
    let file = upstreams_file(stack.scratch_dir(), "upstreams.toml", &upstream);
    stack.add_worker(&["--tools", "", "--upstreams", file.to_str().unwrap()]).await;
    let client = stack.client(0);
    let tool = "everything__trigger-elicitation-request";
    wait_for_tool(&client, tool, PATIENCE).await;

    let task = client.create_task(tool, json!({})).await;
    let parked = client.wait_for_status(&task, "input_required", PATIENCE).await;
    let requests = parked["inputRequests"].as_object().expect("input requests").clone();
    assert_eq!(requests.len(), 1, "{parked}");
    let (key, request) = requests.iter().next().unwrap();
    assert_eq!(request["params"]["message"], "Please provide inputs for the following fields:", "{request}");
    let answer = json!({ key: { "action": "accept", "content": { "name": "Ada Lovelace", "check": true } } });
    let reply = client.update_task(&task, answer).await;
    assert!(reply.error_code().is_none(), "{}", reply.text);
    let done = client.wait_for_status(&task, "completed", PATIENCE).await;
    let text: Vec<&str> =
        done["result"]["content"].as_array().unwrap().iter().filter_map(|c| c["text"].as_str()).collect();
    assert!(text.iter().any(|t| t.contains("User provided the requested information")), "{done}");
    assert!(text.iter().any(|t| t.contains("- Name: Ada Lovelace") && t.contains("- Agreed to terms: true")), "{done}");
}

/// server-everything's prompts, resources, templates and completions, passed through: prompts
/// under the server's prefix, resources under their own URIs, content asked of the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_prompts_and_resources_pass_through() {
    let taskgate_tests::interop::Servers { node, everything, .. } = taskgate_tests::interop::servers();
    let mut stack = Stack::builder().workers(0).spawn().await;
    // Prompts and resources are served only when the configuration asks for them.
    let upstream = format!(
        "[[upstream]]\nname = \"everything\"\ncommand = {:?}\nargs = [{:?}, \"stdio\"]\nprompts = true\nresources = true\n",
        node.to_str().unwrap(),
        everything.to_str().unwrap()
    );
    let file = upstreams_file(stack.scratch_dir(), "upstreams.toml", &upstream);
    stack.add_worker(&["--tools", "", "--upstreams", file.to_str().unwrap()]).await;
    let client = stack.client(0);
    let prompts = eventually(PATIENCE, "the server's prompts to be listed", || async {
        let listed = client.call("prompts/list", json!({})).await;
        listed.result()["prompts"].as_array().filter(|p| !p.is_empty()).cloned()
    })
    .await;
    let names: Vec<&str> = prompts.iter().filter_map(|p| p["name"].as_str()).collect();
    assert!(names.contains(&"everything__args-prompt"), "{names:?}");
    assert!(names.iter().all(|n| n.starts_with("everything__")), "prefixed like its tools: {names:?}");
    let caps = client.call("server/discover", json!({})).await.result()["capabilities"].clone();
    assert!(caps["prompts"].is_object() && caps["resources"].is_object() && caps["completions"].is_object(), "{caps}");

    let got =
        client.call("prompts/get", json!({"name": "everything__args-prompt", "arguments": {"city": "Paris"}})).await;
    assert_eq!(got.result()["messages"][0]["content"]["text"], "What's weather in Paris?", "{}", got.text);

    let resources = client.call("resources/list", json!({})).await;
    let uri = resources.result()["resources"][0]["uri"].as_str().expect("a resource").to_owned();
    let read = client.call("resources/read", json!({"uri": uri})).await;
    assert_eq!(read.result()["contents"][0]["uri"], uri.as_str(), "{}", read.text);
    assert_eq!(read.result()["cacheScope"], "private");

    let templates = client.call("resources/templates/list", json!({})).await;
    let text_template = templates.result()["resourceTemplates"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["uriTemplate"].as_str())
        .find(|t| t.contains("/text/"))
        .expect("a text template")
        .to_owned();
    let uri = text_template.replace("{resourceId}", "7");
    let read = client.call("resources/read", json!({"uri": uri})).await;
    assert!(
        read.result()["contents"][0]["text"].as_str().is_some_and(|t| t.starts_with("Resource 7")),
        "{}",
        read.text
    );

    let params = json!({"ref": {"type": "ref/prompt", "name": "everything__completable-prompt"},
                        "argument": {"name": "department", "value": "E"}});
    let done = client.call("completion/complete", params).await;
    assert_eq!(done.result()["completion"]["values"], json!(["Engineering"]), "{}", done.text);

    let missing = client.call("resources/read", json!({"uri": "demo://resource/nope"})).await;
    assert_eq!(missing.error_code(), Some(-32602), "{}", missing.text);
}

/// server-filesystem (npm), started with one directory as its argument: the worker declares no
/// roots, so that directory is all it serves. A relative path resolves inside it; another
/// directory's file is refused as a tool error.
#[tokio::test]
async fn server_filesystem_serves_only_the_directory_it_was_given() {
    let (node, filesystem) = taskgate_tests::upstream::filesystem_server();
    let mut stack = Stack::builder().workers(0).spawn().await;
    let served = stack.scratch_dir().join("served");
    let other = stack.scratch_dir().join("other");
    for (dir, text) in [(&served, "served text"), (&other, "other text")] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("hello.txt"), text).unwrap();
    }
    let body = format!(
        "[[upstream]]\nname = \"fs\"\ncommand = {:?}\nargs = [{:?}, {:?}]\n",
        node.to_str().unwrap(),
        filesystem.to_str().unwrap(),
        served.to_str().unwrap()
    );
    let file = upstreams_file(stack.scratch_dir(), "upstreams.toml", &body);
    stack.add_worker(&["--tools", "", "--upstreams", file.to_str().unwrap()]).await;
    let client = stack.client(0);
    wait_for_tool(&client, "fs__read_text_file", PATIENCE).await;
    let done = crate::upstream::run(&client, "fs__read_text_file", json!({ "path": "hello.txt" })).await;
    assert_eq!(done["result"]["content"][0]["text"], "served text", "{done}");
    let elsewhere = other.join("hello.txt");
    let done = crate::upstream::run(&client, "fs__read_text_file", json!({ "path": elsewhere })).await;
    assert_eq!(done["result"]["isError"], true, "{done}");
    let refusal = done["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(refusal.starts_with("Access denied"), "{done}");
}
