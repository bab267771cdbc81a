//! Upstream MCP servers behind the workers, through the real gateway, worker and Redis, with a
//! hermetic fixture server (`src/bin/upstream_fixture.rs`, on the official Rust SDK's server
//! side) over stdio and over Streamable HTTP.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use taskgate_tests::upstream::{HttpFixture, fixture_log, upstreams_file, wait_for_no_tool, wait_for_tool};
use taskgate_tests::{McpClient, Stack, eventually};

const FIXTURE: &str = env!("CARGO_BIN_EXE_upstream-fixture");
const PATIENCE: Duration = Duration::from_secs(30);

/// A stack whose one worker serves the fixture (stdio, or the given URL) as `fx`, with `extra`
/// lines in its `[[upstream]]` table. Returns the stack, the upstreams file and the fixture log.
async fn stack_with(transport: Transport<'_>, extra: &str) -> (Stack, PathBuf, PathBuf) {
    let mut stack = Stack::builder().workers(0).spawn().await;
    let dir = stack.scratch_dir().to_owned();
    let log = dir.join("fixture.log");
    let file = upstreams_file(&dir, "upstreams.toml", &upstream_table(&transport, &log, extra));
    stack.add_worker(&["--tools", "", "--upstreams", file.to_str().unwrap()]).await;
    (stack, file, log)
}

enum Transport<'a> {
    Stdio { legacy: bool },
    Http(&'a str),
}

fn upstream_table(transport: &Transport<'_>, log: &std::path::Path, extra: &str) -> String {
    let how = match transport {
        Transport::Stdio { legacy } => {
            let legacy = if *legacy { ", \"--legacy\"" } else { "" };
            format!(
                "command = {FIXTURE:?}\nargs = [\"stdio\"{legacy}]\nenv = {{ FIXTURE_LOG = {:?} }}\n",
                log.to_str().unwrap()
            )
        }
        Transport::Http(url) => format!("url = {url:?}\n"),
    };
    format!("[[upstream]]\nname = \"fx\"\n{how}{extra}\n")
}

/// Polls `tasks/get` until the task is terminal; returns the last result.
async fn terminal(client: &McpClient, task: &str) -> Value {
    eventually(PATIENCE, "the task to end", || async {
        let task = client.get_task(task).await.result().clone();
        matches!(task["status"].as_str(), Some("completed" | "failed" | "cancelled")).then_some(task)
    })
    .await
}

/// The whole flow through one transport: listing with the upstream's metadata, a slow call whose
/// progress shows in the task's status, and the negotiated handshake.
async fn slow_call_reports_progress(transport: Transport<'_>, handshake: &str) {
    let (stack, _file, log) = stack_with(transport, "").await;
    let client = stack.client(0);
    let tool = wait_for_tool(&client, "fx__slow", PATIENCE).await;
    assert_eq!(tool["title"], "Slow, with progress");
    assert_eq!(tool["annotations"]["readOnlyHint"], true);
    assert_eq!(tool["outputSchema"]["properties"]["steps"]["type"], "integer");
    assert_eq!(tool["inputSchema"]["properties"]["step_ms"]["type"], "integer");

    let task = client.create_task("fx__slow", json!({ "steps": 4, "step_ms": 700 })).await;
    let status = eventually(PATIENCE, "a progress status", || async {
        let task = client.get_task(&task).await.result().clone();
        task["statusMessage"].as_str().filter(|m| m.starts_with("step ")).map(str::to_owned)
    })
    .await;
    assert!(status.contains("/4)"), "{status}");
    let done = terminal(&client, &task).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["structuredContent"]["steps"], 4, "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "slow done after 4 steps");
    if !handshake.is_empty() {
        assert!(fixture_log(&log).lines().any(|l| l.starts_with(handshake)), "{}", fixture_log(&log));
    }
}

#[tokio::test]
async fn stdio_upstream_negotiates_2026_07_28_and_reports_progress() {
    slow_call_reports_progress(Transport::Stdio { legacy: false }, "discover").await;
}

#[tokio::test]
async fn stdio_upstream_without_discover_falls_back_to_initialize() {
    slow_call_reports_progress(Transport::Stdio { legacy: true }, "initialize 2025-11-25").await;
}

#[tokio::test]
async fn http_upstream_negotiates_2026_07_28_and_reports_progress() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("fixture.log");
    let fixture = HttpFixture::start(FIXTURE, false, &log).await;
    slow_call_reports_progress(Transport::Http(&fixture.url), "").await;
    assert!(fixture_log(&log).contains("discover"), "{}", fixture_log(&log));
}

#[tokio::test]
async fn http_upstream_without_discover_falls_back_to_initialize() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("fixture.log");
    let fixture = HttpFixture::start(FIXTURE, true, &log).await;
    slow_call_reports_progress(Transport::Http(&fixture.url), "").await;
    assert!(fixture_log(&log).contains("initialize 2025-11-25"), "{}", fixture_log(&log));
}

/// A cancel reaches the upstream (over both transports), and the task ends cancelled.
async fn cancel_reaches_the_upstream(transport: Transport<'_>, log: Option<PathBuf>) {
    let (stack, _file, stdio_log) = stack_with(transport, "").await;
    let log = log.unwrap_or(stdio_log);
    let client = stack.client(0);
    wait_for_tool(&client, "fx__wait_for_cancel", PATIENCE).await;
    let task = client.create_task("fx__wait_for_cancel", json!({})).await;
    eventually(PATIENCE, "the call to reach the upstream", || async {
        fixture_log(&log).contains("call wait_for_cancel").then_some(())
    })
    .await;
    let reply = client.cancel_task(&task).await;
    assert!(reply.error_code().is_none(), "{:?}", reply.body);
    assert_eq!(terminal(&client, &task).await["status"], "cancelled");
    eventually(PATIENCE, "the upstream to see the cancel", || async {
        fixture_log(&log).contains("cancelled wait_for_cancel").then_some(())
    })
    .await;
}

#[tokio::test]
async fn cancel_reaches_a_legacy_stdio_upstream() {
    cancel_reaches_the_upstream(Transport::Stdio { legacy: true }, None).await;
}

#[tokio::test]
async fn cancel_reaches_an_http_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("fixture.log");
    let fixture = HttpFixture::start(FIXTURE, false, &log).await;
    cancel_reaches_the_upstream(Transport::Http(&fixture.url), Some(log)).await;
}

#[tokio::test]
async fn a_crashed_child_fails_its_call_clearly_and_is_restarted() {
    let (stack, _file, log) = stack_with(Transport::Stdio { legacy: false }, "").await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__crash", PATIENCE).await;
    let task = client.create_task("fx__crash", json!({})).await;
    let done = terminal(&client, &task).await;
    assert_eq!(done["status"], "failed", "{done}");
    let message = done["statusMessage"].as_str().unwrap_or_default();
    assert!(message.contains("closed the connection"), "{done}");

    // The supervisor starts the child again; the next call is served.
    let task = client.create_task("fx__echo", json!({ "text": "after the crash" })).await;
    let done = terminal(&client, &task).await;
    assert_eq!(done["result"]["content"][0]["text"], "after the crash", "{done}");
    assert_eq!(fixture_log(&log).matches("started stdio").count(), 2, "{}", fixture_log(&log));
}

#[tokio::test]
async fn a_silent_call_times_out_by_inactivity() {
    let extra = "[upstream.tool.never_answers]\ntimeout_ms = 800\n";
    let (stack, _file, _log) = stack_with(Transport::Stdio { legacy: false }, extra).await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__never_answers", PATIENCE).await;
    let task = client.create_task("fx__never_answers", json!({})).await;
    let done = terminal(&client, &task).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert!(done["statusMessage"].as_str().unwrap_or_default().contains("800 ms without an answer"), "{done}");
}

#[tokio::test]
async fn input_requests_from_the_upstream_are_declined_with_a_reason() {
    let (stack, _file, log) = stack_with(Transport::Stdio { legacy: true }, "").await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__ask", PATIENCE).await;
    let task = client.create_task("fx__ask", json!({})).await;
    let done = terminal(&client, &task).await;
    assert_eq!(done["status"], "completed", "{done}");
    let log = fixture_log(&log);
    assert!(log.contains("ask refused") && log.contains("does not forward input requests"), "{log}");
}

#[tokio::test]
async fn a_worker_without_the_tool_releases_the_task_for_one_with_it() {
    let (mut stack, file, _log) = stack_with(Transport::Stdio { legacy: false }, "").await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__echo", PATIENCE).await;
    // The worker that serves the tool goes away; its catalogue entry is still live, and the only
    // worker left does not serve the tool.
    stack.workers[0].kill().await;
    stack.add_worker(&["--tools", "demo"]).await;
    let task = client.create_task("fx__echo", json!({ "text": "found a worker" })).await;
    eventually(PATIENCE, "the worker without the tool to release it", || async {
        stack.workers[1].log().contains("releasing it for another worker").then_some(())
    })
    .await;
    assert_eq!(client.get_task(&task).await.result()["status"], "working");
    // The fleet disagrees about what it serves, and says so.
    let w0 = stack.add_worker(&["--tools", "", "--upstreams", file.to_str().unwrap()]).await;
    let done = terminal(&client, &task).await;
    assert_eq!(done["result"]["content"][0]["text"], "found a worker", "{done}");
    eventually(PATIENCE, "a worker to notice the differing configurations", || async {
        (stack.workers[1].log().contains("serve different upstream configurations")
            || stack.workers[w0].log().contains("serve different upstream configurations"))
        .then_some(())
    })
    .await;
}

#[tokio::test]
async fn tools_leave_the_listing_once_no_live_worker_serves_them() {
    let mut stack = Stack::builder().workers(0).spawn().await;
    stack.add_worker(&["--tools", "demo", "--catalogue-ttl-ms", "1500"]).await;
    let client = stack.client(0);
    wait_for_tool(&client, "sleep", PATIENCE).await;
    stack.workers[0].kill().await;
    wait_for_no_tool(&client, "sleep", PATIENCE).await;
    stack.workers[0].restart().await;
    wait_for_tool(&client, "sleep", PATIENCE).await;
}

/// `kill -9` of the worker mid-call: a tool that may have side effects is not called again; one
/// annotated idempotent is.
#[tokio::test]
async fn after_a_worker_dies_mid_call_only_retry_safe_tools_run_again() {
    let mut stack = Stack::builder().workers(0).spawn().await;
    let dir = stack.scratch_dir().to_owned();
    let log = dir.join("fixture.log");
    let file = upstreams_file(&dir, "upstreams.toml", &upstream_table(&Transport::Stdio { legacy: false }, &log, ""));
    let args = ["--tools", "", "--upstreams", file.to_str().unwrap(), "--lease-ms", "1500"];
    stack.add_worker(&args).await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__side_effect", PATIENCE).await;

    let effects = |tag: &str| fixture_log(&log).lines().filter(|l| *l == format!("effect {tag}")).count();
    let effect = client.create_task("fx__side_effect", json!({ "tag": "once", "ms": 600_000 })).await;
    let idempotent = client.create_task("fx__idempotent_effect", json!({ "tag": "again", "ms": 600_000 })).await;
    eventually(PATIENCE, "both calls to reach the upstream", || async {
        (effects("once") == 1 && effects("again") == 1).then_some(())
    })
    .await;
    stack.workers[0].kill().await;
    stack.add_worker(&args).await;

    let done = terminal(&client, &effect).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert!(done["statusMessage"].as_str().unwrap_or_default().contains("not retried"), "{done}");
    eventually(PATIENCE, "the idempotent call to be sent again", || async { (effects("again") == 2).then_some(()) })
        .await;
    assert_eq!(effects("once"), 1, "{}", fixture_log(&log));
    assert_eq!(client.get_task(&idempotent).await.result()["status"], "working");
}
