//! Upstream MCP servers behind the workers, through the real gateway, worker and Redis, with a
//! hermetic fixture server (`src/bin/upstream_fixture.rs`, on the official Rust SDK's server
//! side) over stdio and over Streamable HTTP.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use taskgate_shared::task::TaskId;
use taskgate_tests::upstream::{HttpFixture, fixture_log, upstreams_file, wait_for_no_tool, wait_for_tool};
use taskgate_tests::{McpClient, Scrape, Stack, StackBuilder, eventually, free_port};

pub(crate) const FIXTURE: &str = env!("CARGO_BIN_EXE_upstream-fixture");
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

/// A stack whose one worker serves the fixture (stdio, or the given URL) as `fx`, with `extra`
/// lines in its `[[upstream]]` table. Returns the stack, the upstreams file and the fixture log.
pub(crate) async fn stack_with(transport: Transport<'_>, extra: &str) -> (Stack, PathBuf, PathBuf) {
    stack_from(Stack::builder(), transport, extra, &[]).await
}

/// [`stack_with`] from a given builder, with more worker arguments.
pub(crate) async fn stack_from(
    builder: StackBuilder,
    transport: Transport<'_>,
    extra: &str,
    worker_args: &[&str],
) -> (Stack, PathBuf, PathBuf) {
    let mut stack = builder.workers(0).spawn().await;
    let dir = stack.scratch_dir().to_owned();
    let log = dir.join("fixture.log");
    let file = upstreams_file(&dir, "upstreams.toml", &upstream_table(&transport, &log, extra));
    let mut args = vec!["--tools", "", "--upstreams", file.to_str().unwrap()];
    args.extend_from_slice(worker_args);
    stack.add_worker(&args).await;
    (stack, file, log)
}

/// Adds a worker serving the fixture over stdio as `fx` to a stack made elsewhere.
pub(crate) async fn fixture_stack(mut stack: Stack) -> Stack {
    let dir = stack.scratch_dir().to_owned();
    let table = upstream_table(&Transport::Stdio { legacy: false }, &dir.join("fixture.log"), "");
    let file = upstreams_file(&dir, "upstreams.toml", &table);
    stack.add_worker(&["--tools", "", "--upstreams", file.to_str().unwrap()]).await;
    stack
}

/// Runs `tool` as a task to its end and returns the task.
pub(crate) async fn run(client: &McpClient, tool: &str, arguments: Value) -> Value {
    let task = client.create_task(tool, arguments).await;
    terminal(client, &task).await
}

/// The fixture's `whoami` answer, run as a task.
async fn whoami(client: &McpClient) -> Value {
    let done = run(client, "fx__whoami", json!({})).await;
    assert_eq!(done["status"], "completed", "{done}");
    serde_json::from_str(done["result"]["content"][0]["text"].as_str().expect("a text answer")).expect("JSON")
}

pub(crate) enum Transport<'a> {
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
pub(crate) async fn terminal(client: &McpClient, task: &str) -> Value {
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
    let fixture = HttpFixture::start(FIXTURE, false).await;
    let log = fixture.log.clone();
    slow_call_reports_progress(Transport::Http(&fixture.url), "").await;
    // The handler's own line, not the HTTP layer's `bearer - server/discover`.
    assert!(fixture_log(&log).lines().any(|l| l == "discover"), "{}", fixture_log(&log));
}

#[tokio::test]
async fn http_upstream_without_discover_falls_back_to_initialize() {
    let fixture = HttpFixture::start(FIXTURE, true).await;
    let log = fixture.log.clone();
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
    let fixture = HttpFixture::start(FIXTURE, false).await;
    let log = fixture.log.clone();
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

/// The default policy: a mid-call elicitation is answered `decline`, and sampling refused with
/// an error the server can show.
#[tokio::test]
async fn input_requests_from_an_older_upstream_are_declined_by_default() {
    let (stack, _file, log) = stack_with(Transport::Stdio { legacy: true }, "").await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__ask", PATIENCE).await;
    let done = run(&client, "fx__ask", json!({})).await;
    assert_eq!(done["status"], "completed", "{done}");
    let text = done["result"]["content"][0]["text"].as_str().unwrap_or_default().to_owned();
    assert!(text.starts_with("ask answered") && text.contains("action: Decline"), "{done}");
    let done = run(&client, "fx__sample", json!({})).await;
    let text = done["result"]["content"][0]["text"].as_str().unwrap_or_default().to_owned();
    assert!(text.starts_with("sample refused") && text.contains("sampling is not available"), "{done}");
    assert!(fixture_log(&log).contains("sample refused"), "{}", fixture_log(&log));
}

/// `elicitation = "hold"` and its stack: a legacy stdio fixture, a 1.5 s lease, and a call
/// inactivity timeout of 1 s, which time spent holding a question must not count against.
async fn holding_stack() -> (Stack, PathBuf, PathBuf) {
    holding_stack_with(&[]).await
}

/// [`holding_stack`] with more worker arguments.
async fn holding_stack_with(worker_args: &[&str]) -> (Stack, PathBuf, PathBuf) {
    let extra = "elicitation = \"hold\"\ntimeout_ms = 1000\n";
    let args = [&["--lease-ms", "1500"], worker_args].concat();
    stack_from(Stack::builder(), Transport::Stdio { legacy: true }, extra, &args).await
}

/// The task's lease end as its record holds it, and Redis's clock, in ms.
async fn lease_and_now(stack: &Stack, task: &str) -> Option<(u64, u64)> {
    let record = stack.store().keys().task(&TaskId::parse(task)?).record;
    let mut conn = redis::Client::open(stack.redis_url.as_str()).ok()?.get_multiplexed_async_connection().await.ok()?;
    let lease: u64 = redis::AsyncCommands::hget(&mut conn, &record, "lease").await.ok()?;
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.ok()?;
    Some((lease, secs * 1000 + micros / 1000))
}

/// The held question, once the task shows it: its key and the request.
pub(crate) async fn held_question(client: &McpClient, task: &str) -> (String, Value) {
    let requests = parked_requests(client, task).await;
    let (key, request) = requests.as_object().unwrap().iter().next().expect("one question");
    assert_eq!(requests.as_object().unwrap().len(), 1, "{requests}");
    (key.clone(), request.clone())
}

/// `elicitation = "hold"`: the server's mid-call question shows on the task as
/// `input_required` (outliving several lease renewals) and the answer reaches the server.
#[tokio::test]
async fn a_held_question_is_answered_through_the_task() {
    let listen = format!("127.0.0.1:{}", free_port());
    let (stack, _file, log) = holding_stack_with(&["--metrics-listen", listen.as_str()]).await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__ask", PATIENCE).await;
    let task = client.create_task("fx__ask", json!({})).await;
    let (key, request) = held_question(&client, &task).await;
    assert!(key.starts_with("held."), "{key}");
    assert_eq!(request["method"], "elicitation/create", "{request}");
    assert_eq!(request["params"]["message"], "Approve?", "{request}");
    assert_eq!(client.get_task(&task).await.result()["statusMessage"], "Approve?");
    // The worker keeps renewing the lease while the question is open: wait until it reaches past
    // its end at the time of the question.
    let (lease_then, _) = lease_and_now(&stack, &task).await.expect("a held task keeps its lease");
    eventually(PATIENCE, "a renewal past the lease's first end", || async {
        let (lease, _) = lease_and_now(&stack, &task).await?;
        (lease > lease_then + 1500).then_some(())
    })
    .await;
    assert_eq!(client.get_task(&task).await.result()["status"], "input_required");
    let reply = client.update_task(&task, json!({ key: { "action": "accept", "content": { "ok": true } } })).await;
    assert!(reply.error_code().is_none(), "{}", reply.text);
    let done = terminal(&client, &task).await;
    assert_eq!(done["status"], "completed", "{done}");
    let text = done["result"]["content"][0]["text"].as_str().unwrap_or_default().to_owned();
    assert!(text.contains("action: Accept") && text.contains("\"ok\": Bool(true)"), "{done}");
    assert!(fixture_log(&log).contains("ask answered"), "{}", fixture_log(&log));
    // Each transition counted once, by the process that made it: the worker's hold and finish,
    // the gateway's resume on the answer.
    let transition =
        |s: &Scrape, from: &str, to: &str| s.get("taskgate_task_transitions_total", &[("from", from), ("to", to)]);
    let worker = eventually(PATIENCE, "the worker to count the finish", || async {
        let worker = Scrape::of(&format!("http://{listen}/metrics")).await;
        (transition(&worker, "working", "completed") == 1.0).then_some(worker)
    })
    .await;
    assert_eq!(transition(&worker, "working", "input_required"), 1.0, "the held question");
    let gateway = Scrape::of(&format!("{}/metrics", stack.gateways[0].url.clone().unwrap())).await;
    assert_eq!(transition(&gateway, "input_required", "working"), 1.0, "the answer");
    // Holding covers elicitation only: sampling is still refused.
    let sampled = run(&client, "fx__sample", json!({})).await;
    let text = sampled["result"]["content"][0]["text"].as_str().unwrap_or_default().to_owned();
    assert!(text.starts_with("sample refused") && text.contains("sampling is not available"), "{sampled}");
}

/// A creator that declared no elicitation is never asked: the server hears `decline`.
#[tokio::test]
async fn a_held_question_never_reaches_a_creator_who_cannot_answer() {
    let (stack, _file, _log) = holding_stack().await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__ask", PATIENCE).await;
    let params = json!({ "name": "fx__ask", "arguments": {}, "_meta": meta_without_input() });
    let created = client.call("tools/call", params).await;
    let task = created.result()["taskId"].as_str().expect("a task").to_owned();
    let done = terminal(&client, &task).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert!(done["result"]["content"][0]["text"].as_str().unwrap_or_default().contains("action: Decline"), "{done}");
}

/// A cancel of a task holding a question ends it at once and tells the server; the server's
/// child keeps serving.
#[tokio::test]
async fn cancelling_a_held_question_tells_the_server() {
    let (stack, _file, log) = holding_stack().await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__ask", PATIENCE).await;
    let task = client.create_task("fx__ask", json!({})).await;
    held_question(&client, &task).await;
    let reply = client.cancel_task(&task).await;
    assert!(reply.error_code().is_none(), "{}", reply.text);
    assert_eq!(client.get_task(&task).await.result()["status"], "cancelled");
    eventually(PATIENCE, "the server to hear the cancel", || async {
        fixture_log(&log).contains("action: Cancel").then_some(())
    })
    .await;
    let done = run(&client, "fx__echo", json!({ "text": "still serving" })).await;
    assert_eq!(done["result"]["content"][0]["text"], "still serving", "{done}");
}

/// `kill -9` of the worker holding a question: its session is gone, so the task fails, clearly,
/// once the lease lapses; it neither hangs nor runs again, and an answer that comes after the
/// lease lapsed (before any reaper ran) is not taken.
#[tokio::test]
async fn a_worker_that_dies_holding_a_question_fails_the_task_clearly() {
    let (mut stack, _file, log) = holding_stack().await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__ask", PATIENCE).await;
    let task = client.create_task("fx__ask", json!({})).await;
    let (key, _) = held_question(&client, &task).await;
    stack.workers[0].kill().await;
    // No worker runs, so no reaper: wait for the lease to lapse, then answer.
    eventually(PATIENCE, "the lease to lapse", || async {
        let (lease, now) = lease_and_now(&stack, &task).await?;
        (lease < now).then_some(())
    })
    .await;
    let ignored = client.update_task(&task, json!({ &key: { "action": "accept", "content": { "ok": true } } })).await;
    assert!(ignored.error_code().is_none(), "{}", ignored.text);
    assert_eq!(client.get_task(&task).await.result()["status"], "input_required", "an answer nobody can take");
    stack.add_worker(&["--tools", "demo", "--lease-ms", "1500"]).await;
    let done = terminal(&client, &task).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert!(done["statusMessage"].as_str().unwrap_or_default().contains("can no longer be answered"), "{done}");
    let late = client.update_task(&task, json!({ key: { "action": "accept", "content": { "ok": true } } })).await;
    assert_eq!(client.get_task(&task).await.result()["status"], "failed", "{}", late.text);
    assert_eq!(fixture_log(&log).matches("call ask").count(), 1, "{}", fixture_log(&log));
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
/// annotated idempotent is, and so is one the operator marked `retry_on_reclaim`.
#[tokio::test]
async fn after_a_worker_dies_mid_call_only_retry_safe_tools_run_again() {
    let mut stack = Stack::builder().workers(0).spawn().await;
    let dir = stack.scratch_dir().to_owned();
    let log = dir.join("fixture.log");
    let mut body = upstream_table(&Transport::Stdio { legacy: false }, &log, "");
    // The same server again, as `fy`, whose side_effect the operator declared safe to retry.
    body += &upstream_table(
        &Transport::Stdio { legacy: false },
        &log,
        "tools = [\"side_effect\"]\n[upstream.tool.side_effect]\nretry_on_reclaim = true\n",
    )
    .replace("name = \"fx\"", "name = \"fy\"");
    let file = upstreams_file(&dir, "upstreams.toml", &body);
    let args = ["--tools", "", "--upstreams", file.to_str().unwrap(), "--lease-ms", "1500"];
    stack.add_worker(&args).await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__side_effect", PATIENCE).await;

    let effects = |tag: &str| fixture_log(&log).lines().filter(|l| *l == format!("effect {tag}")).count();
    let effect = client.create_task("fx__side_effect", json!({ "tag": "once", "ms": 600_000 })).await;
    let idempotent = client.create_task("fx__idempotent_effect", json!({ "tag": "again", "ms": 600_000 })).await;
    let allowed = client.create_task("fy__side_effect", json!({ "tag": "allowed", "ms": 600_000 })).await;
    eventually(PATIENCE, "the calls to reach the upstream", || async {
        (effects("once") == 1 && effects("again") == 1 && effects("allowed") == 1).then_some(())
    })
    .await;
    stack.workers[0].kill().await;
    stack.add_worker(&args).await;

    let done = terminal(&client, &effect).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert!(done["statusMessage"].as_str().unwrap_or_default().contains("not retried"), "{done}");
    eventually(PATIENCE, "the retry-safe calls to be sent again", || async {
        (effects("again") == 2 && effects("allowed") == 2).then_some(())
    })
    .await;
    assert_eq!(effects("once"), 1, "{}", fixture_log(&log));
    // Both runs of the retried call carried the task's id as their idempotency key, so a
    // server that honours keys could have run it once.
    let keys: Vec<String> = fixture_log(&log)
        .lines()
        .filter_map(|l| l.strip_prefix("key side_effect allowed ").map(str::to_owned))
        .collect();
    assert_eq!(keys, [allowed.clone(), allowed.clone()], "{}", fixture_log(&log));
    assert_eq!(client.get_task(&idempotent).await.result()["status"], "working");
    assert_eq!(client.get_task(&allowed).await.result()["status"], "working");
}

/// `instances = 2`: calls go round robin over two children, and each child gets only the minimal
/// environment, what `env` and `env_from` name, and its `cwd`.
#[tokio::test]
async fn instances_share_the_calls_and_children_get_only_their_environment() {
    let cwd = tempfile::tempdir().unwrap();
    let extra = format!("instances = 2\nenv_from = [\"FIXTURE_PROBE\"]\ncwd = {:?}\n", cwd.path().to_str().unwrap());
    let builder = Stack::builder().env("FIXTURE_PROBE", "passed").env("FIXTURE_HIDDEN", "kept from the child");
    let (stack, _file, log) = stack_from(builder, Transport::Stdio { legacy: false }, &extra, &[]).await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__whoami", PATIENCE).await;

    let pids = std::sync::Mutex::new(std::collections::BTreeSet::new());
    eventually(PATIENCE, "calls to reach both children", || async {
        let who = whoami(&client).await;
        assert_eq!(who["cwd"], cwd.path().canonicalize().unwrap().to_str().unwrap(), "{who}");
        let env = who["env"].as_object().unwrap();
        let names: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(names, ["FIXTURE_LOG", "FIXTURE_PROBE"], "{who}");
        assert_eq!(env["FIXTURE_PROBE"], "passed");
        let mut pids = pids.lock().unwrap();
        pids.insert(who["pid"].as_u64().unwrap());
        (pids.len() == 2).then_some(())
    })
    .await;
    assert_eq!(fixture_log(&log).matches("started stdio").count(), 2, "{}", fixture_log(&log));
}

/// `max_in_flight = 2`: six calls at once, and the server never holds more than two.
#[tokio::test]
async fn max_in_flight_bounds_the_calls_open_to_a_server() {
    let (stack, _file, _log) = stack_with(Transport::Stdio { legacy: false }, "max_in_flight = 2\n").await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__hold", PATIENCE).await;
    let mut tasks = Vec::new();
    for _ in 0..6 {
        tasks.push(client.create_task("fx__hold", json!({ "ms": 400 })).await);
    }
    for task in &tasks {
        assert_eq!(terminal(&client, task).await["status"], "completed");
    }
    let peak = run(&client, "fx__peak", json!({})).await;
    assert_eq!(peak["result"]["content"][0]["text"], "2", "{peak}");
}

/// Per upstream: calls by outcome, latency, in-flight calls, restarts and `list_changed`
/// refreshes; and every log line about a call names the upstream and the tool.
#[tokio::test]
async fn metrics_and_logs_account_for_every_upstream_call() {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let args = ["--metrics-listen", listen.as_str()];
    let (stack, _file, _log) = stack_from(Stack::builder(), Transport::Stdio { legacy: false }, "", &args).await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__echo", PATIENCE).await;
    let metrics = format!("http://{listen}/metrics");

    let held = client.create_task("fx__hold", json!({ "ms": 60_000 })).await;
    eventually(PATIENCE, "one call in flight", || async {
        let scrape = Scrape::of(&metrics).await;
        (scrape.get("taskgate_upstream_calls_in_flight", &[("upstream", "fx")]) == 1.0).then_some(())
    })
    .await;
    client.cancel_task(&held).await;
    let echoed = run(&client, "fx__echo", json!({ "text": "one" })).await;
    // A cancelled call leaves the server serving: it is alive, whatever it answers a ping.
    assert_eq!(echoed["status"], "completed", "{echoed}");
    assert_eq!(run(&client, "fx__crash", json!({})).await["status"], "failed");
    let relisted = run(&client, "fx__relist", json!({})).await;
    assert_eq!(relisted["status"], "completed", "{relisted}");

    let scrape = eventually(PATIENCE, "the restart and the refresh to be counted", || async {
        let scrape = Scrape::of(&metrics).await;
        (scrape.get("taskgate_upstream_restarts_total", &[("upstream", "fx")]) == 1.0
            && scrape.get("taskgate_upstream_list_refreshes_total", &[("upstream", "fx")]) == 1.0)
            .then_some(scrape)
    })
    .await;
    let calls =
        |outcome: &str| scrape.get("taskgate_upstream_calls_total", &[("upstream", "fx"), ("outcome", outcome)]);
    assert_eq!((calls("completed"), calls("failed"), calls("cancelled")), (2.0, 1.0, 1.0));
    assert_eq!(scrape.get("taskgate_upstream_call_duration_seconds_count", &[("upstream", "fx")]), 4.0);
    assert_eq!(scrape.get("taskgate_upstream_calls_in_flight", &[("upstream", "fx")]), 0.0);

    let log = stack.workers[0].log();
    let ended: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["message"] == "upstream call ended")
        .collect();
    assert_eq!(ended.len(), 4, "{log}");
    for line in &ended {
        assert_eq!(line["upstream"], "fx", "{line}");
        assert!(line["tool"].as_str().is_some_and(|t| !t.is_empty()), "{line}");
    }
}

/// A child that floods stderr: lines are cut at 2 KiB, at most 50 a second are logged, and the
/// rest are counted as dropped, even when the child then goes quiet.
#[tokio::test]
async fn a_noisy_child_is_logged_within_bounds() {
    let (stack, _file, _log) = stack_with(Transport::Stdio { legacy: false }, "").await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__noisy", PATIENCE).await;
    let done = run(&client, "fx__noisy", json!({ "lines": 300, "bytes": 5000 })).await;
    assert_eq!(done["status"], "completed", "{done}");

    let (logged, dropped) = eventually(PATIENCE, "every noisy line logged or counted", || async {
        let log = stack.workers[0].log();
        let lines: Vec<Value> = log.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        let logged: Vec<usize> = lines
            .iter()
            .filter(|l| l["message"] == "upstream stderr" && l["upstream"] == "fx")
            .filter_map(|l| l["stderr"].as_str().map(str::len))
            .collect();
        let dropped: u64 = lines
            .iter()
            .filter(|l| l["message"] == "upstream stderr lines dropped (rate limit)")
            .filter_map(|l| l["dropped"].as_u64())
            .sum();
        (logged.len() as u64 + dropped == 300).then_some((logged, dropped))
    })
    .await;
    assert!(dropped > 0, "a burst of 300 lines is over the rate");
    assert!(logged.iter().all(|len| *len == 2048), "{logged:?}");
}

/// A server that ignores a cancel and then answers no ping within the grace period is killed and
/// started again; the next call is served.
#[tokio::test]
async fn a_child_that_stops_answering_after_a_cancel_is_restarted() {
    let args = ["--cancel-grace-ms", "1000"];
    let (stack, _file, log) = stack_from(Stack::builder(), Transport::Stdio { legacy: false }, "", &args).await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__freeze", PATIENCE).await;
    let task = client.create_task("fx__freeze", json!({})).await;
    eventually(PATIENCE, "the child to freeze", || async { fixture_log(&log).contains("freezing").then_some(()) })
        .await;
    client.cancel_task(&task).await;
    assert_eq!(terminal(&client, &task).await["status"], "cancelled");
    eventually(PATIENCE, "the frozen child to be replaced", || async {
        (fixture_log(&log).matches("started stdio").count() == 2).then_some(())
    })
    .await;
    assert!(stack.workers[0].log().contains("upstream stopped answering: restarting it"));
    let done = run(&client, "fx__echo", json!({ "text": "thawed out" })).await;
    assert_eq!(done["result"]["content"][0]["text"], "thawed out", "{done}");
}

/// An HTTP upstream's headers come from a file and from the worker's environment; the client's
/// own credentials never reach it.
#[tokio::test]
async fn http_headers_come_from_files_and_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = HttpFixture::start(FIXTURE, false).await;
    let token = dir.path().join("token");
    std::fs::write(&token, "upstream-secret\n").unwrap();
    let extra = format!(
        "headers = {{ Authorization = {{ file = {:?}, prefix = \"Bearer \" }}, X-Team = {{ env = \"FIXTURE_TEAM\" }} }}\n",
        token.to_str().unwrap()
    );
    let builder = Stack::builder().env("FIXTURE_TEAM", "platform");
    let (stack, _file, _log) = stack_from(builder, Transport::Http(&fixture.url), &extra, &[]).await;
    let client = stack.client(0).with_bearer("the-client-token");
    wait_for_tool(&client, "fx__whoami", PATIENCE).await;
    let who = whoami(&client).await;
    assert_eq!(who["authorization"], "Bearer upstream-secret", "{who}");
    assert_eq!(who["x-team"], "platform", "{who}");
    let log = stack.workers[0].log();
    assert!(!log.contains("upstream-secret"), "the secret reached the log: {log}");
}

/// `prefix`, the allow- and deny-lists and per-tool settings shape what is published and how
/// each tool runs: `task-required` refuses a call without the Tasks extension, `sync-only`
/// answers inline even when the client could take a task, `ttl_ms` and `poll_interval_ms` are
/// the task's.
#[tokio::test]
async fn names_lists_and_per_tool_settings_shape_the_catalogue() {
    let extra = "prefix = \"fix_\"\ntools = [\"echo\", \"hold\", \"whoami\"]\ndeny_tools = [\"whoami\"]\n\
                 [upstream.tool.hold]\nexecution = \"task-required\"\nttl_ms = 600000\npoll_interval_ms = 2500\n\
                 [upstream.tool.echo]\nexecution = \"sync-only\"\n";
    let (stack, _file, _log) = stack_with(Transport::Stdio { legacy: false }, extra).await;
    let client = stack.client(0);
    wait_for_tool(&client, "fix_hold", PATIENCE).await;
    let listed = client.call("tools/list", json!({})).await;
    let mut names: Vec<&str> =
        listed.result()["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["fix_echo", "fix_hold"], "{}", listed.text);
    // How each call runs is listed in the tool's `_meta`, for clients to show.
    let runs = |name: &str| {
        let tools = listed.result()["tools"].as_array().unwrap();
        tools.iter().find(|t| t["name"] == name).unwrap()["_meta"]["taskgate.dev/execution"].clone()
    };
    assert_eq!(runs("fix_echo"), "sync-only", "{}", listed.text);
    assert_eq!(runs("fix_hold"), "task-required", "{}", listed.text);

    let task = client.create_task("fix_hold", json!({ "ms": 10 })).await;
    let created = client.get_task(&task).await;
    assert_eq!(created.result()["ttlMs"], 600_000, "{}", created.text);
    assert_eq!(created.result()["pollIntervalMs"], 2500, "{}", created.text);
    let without_tasks = json!({ "name": "fix_hold", "arguments": {}, "_meta": taskgate_tests::meta_without_tasks() });
    let refused = client.call("tools/call", without_tasks).await;
    assert_eq!(refused.error_code(), Some(-32021), "{}", refused.text);

    let inline = client.call("tools/call", json!({ "name": "fix_echo", "arguments": { "text": "inline" } })).await;
    assert_eq!(inline.result()["resultType"], "complete", "{}", inline.text);
    assert_eq!(inline.result()["content"][0]["text"], "inline", "{}", inline.text);
}

/// An HTTP server that goes away after it was listed: a call fails at once, naming the server
/// and saying it could not be reached, instead of hanging.
#[tokio::test]
async fn a_call_to_an_http_server_that_is_gone_fails_clearly() {
    let fixture = HttpFixture::start(FIXTURE, false).await;
    let (stack, _file, _log) = stack_with(Transport::Http(&fixture.url), "").await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__echo", PATIENCE).await;
    drop(fixture);
    let done = run(&client, "fx__echo", json!({ "text": "anyone?" })).await;
    assert_eq!(done["status"], "failed", "{done}");
    let message = done["statusMessage"].as_str().unwrap_or_default();
    assert!(message.starts_with("upstream server \"fx\" could not be reached: "), "{done}");
}

/// A stdio child that crashed and cannot be started again: calls wait for it up to
/// `connect_timeout_ms`, then fail naming the server, the reason and the wait.
#[tokio::test]
async fn a_call_to_a_stdio_server_that_stays_down_fails_after_the_connect_timeout() {
    let mut stack = Stack::builder().workers(0).spawn().await;
    let dir = stack.scratch_dir().to_owned();
    let gate = dir.join("may-start");
    std::fs::write(&gate, "").unwrap();
    // A launcher that starts the fixture only while the gate file exists.
    let script = format!("test -e {} || exit 7; exec {} stdio", gate.display(), FIXTURE);
    let body = format!(
        "[[upstream]]\nname = \"fx\"\ncommand = \"/bin/sh\"\nargs = [\"-c\", {script:?}]\nconnect_timeout_ms = 1000\n"
    );
    let file = upstreams_file(&dir, "upstreams.toml", &body);
    stack.add_worker(&["--tools", "", "--upstreams", file.to_str().unwrap()]).await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__crash", PATIENCE).await;
    std::fs::remove_file(&gate).unwrap();
    assert_eq!(run(&client, "fx__crash", json!({})).await["status"], "failed");
    eventually(PATIENCE, "a call to report the server unavailable", || async {
        let done = run(&client, "fx__echo", json!({ "text": "still there?" })).await;
        assert_eq!(done["status"], "failed", "{done}");
        let message = done["statusMessage"].as_str().unwrap_or_default().to_owned();
        (message.starts_with("upstream server \"fx\" is unavailable (") && message.ends_with("waited 1000 ms for it"))
            .then_some(())
    })
    .await;
}

/// Two servers that would publish the same name stop the worker at start, naming the tool.
#[tokio::test]
async fn colliding_names_refuse_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let table = |name: &str| {
        format!(
            "[[upstream]]\nname = \"{name}\"\nprefix = \"\"\ncommand = {FIXTURE:?}\nargs = [\"stdio\"]\ntools = [\"echo\"]\n"
        )
    };
    let file = upstreams_file(dir.path(), "upstreams.toml", &format!("{}\n{}", table("one"), table("two")));
    let run = tokio::process::Command::new(taskgate_tests::Binary::Worker.path())
        .args(["--redis-url", "redis://127.0.0.1:1", "--tools", "", "--upstreams", file.to_str().unwrap()])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(PATIENCE, run).await.expect("the worker exits").unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("tool names collide") && stderr.contains("\"echo\""), "{stderr}");
}

/// `_meta` declaring the Tasks extension and nothing a server could ask for input with.
fn meta_without_input() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": { "extensions": { "io.modelcontextprotocol/tasks": {} } }
    })
}

/// The outstanding input requests of a task parked in `input_required`, once it is.
async fn parked_requests(client: &McpClient, task: &str) -> Value {
    let parked = client.wait_for_status(task, "input_required", PATIENCE).await;
    parked["inputRequests"].clone()
}

/// A 2026-07-28 server's `input_required`, over two rounds: each round parks the task under keys
/// of its own round (the server reuses its key `ok`), and the answers go back with the server's
/// `requestState`, so no round is asked twice.
async fn two_rounds_of_input(transport: Transport<'_>, log: Option<PathBuf>) {
    let (stack, _file, stdio_log) = stack_with(transport, "").await;
    let log = log.unwrap_or(stdio_log);
    let client = stack.client(0);
    wait_for_tool(&client, "fx__approve_twice", PATIENCE).await;
    let task = client.create_task("fx__approve_twice", json!({})).await;

    let first = parked_requests(&client, &task).await;
    assert_eq!(first.as_object().unwrap().keys().collect::<Vec<_>>(), ["r1.ok"], "{first}");
    assert_eq!(first["r1.ok"]["method"], "elicitation/create");
    assert_eq!(first["r1.ok"]["params"]["message"], "Approve step 1?");
    assert_eq!(client.get_task(&task).await.result()["statusMessage"], "Approve step 1?");
    let reply = client.update_task(&task, json!({ "r1.ok": { "action": "accept", "content": { "ok": true } } })).await;
    assert!(reply.error_code().is_none(), "{}", reply.text);

    let second = eventually(PATIENCE, "the second round", || async {
        let requests = parked_requests(&client, &task).await;
        requests.get("r2.ok").is_some().then_some(requests)
    })
    .await;
    assert_eq!(second.as_object().unwrap().len(), 1, "{second}");
    assert_eq!(second["r2.ok"]["params"]["message"], "Approve step 2?");
    client.update_task(&task, json!({ "r2.ok": { "action": "accept", "content": { "ok": true } } })).await;

    let done = terminal(&client, &task).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "approved twice", "{done}");
    let calls: Vec<String> =
        fixture_log(&log).lines().filter(|l| l.starts_with("approve_twice ")).map(str::to_owned).collect();
    assert_eq!(
        calls,
        [
            "approve_twice state=- answer=- elicitation=true",
            "approve_twice state=step1 answer=accept elicitation=true",
            "approve_twice state=step2 answer=accept elicitation=true",
        ]
    );
}

#[tokio::test]
async fn input_required_from_a_stdio_upstream_is_answered_over_two_rounds() {
    two_rounds_of_input(Transport::Stdio { legacy: false }, None).await;
}

#[tokio::test]
async fn input_required_from_an_http_upstream_is_answered_over_two_rounds() {
    let fixture = HttpFixture::start(FIXTURE, false).await;
    let log = fixture.log.clone();
    two_rounds_of_input(Transport::Http(&fixture.url), Some(log)).await;
}

/// The server learns only the input capabilities the task's creator declared, and input it asks
/// for anyway is never forwarded: the task fails with -32021.
#[tokio::test]
async fn an_upstream_is_never_given_input_its_creator_cannot_give() {
    let (stack, _file, _log) = stack_with(Transport::Stdio { legacy: false }, "").await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__approve_twice", PATIENCE).await;
    async fn create(client: &McpClient, force: bool) -> String {
        let params =
            json!({ "name": "fx__approve_twice", "arguments": { "force": force }, "_meta": meta_without_input() });
        let reply = client.call("tools/call", params).await;
        assert_eq!(reply.result()["resultType"], "task", "{}", reply.text);
        reply.result()["taskId"].as_str().unwrap().to_owned()
    }
    let polite = terminal(&client, &create(&client, false).await).await;
    assert_eq!(polite["result"]["content"][0]["text"], "not asked: the client declared no elicitation", "{polite}");
    let forced = terminal(&client, &create(&client, true).await).await;
    assert_eq!(forced["status"], "failed", "{forced}");
    assert_eq!(forced["error"]["code"], -32021, "{forced}");
}

/// The worker that parked the task dies; the answers arrive; another worker continues the
/// server's rounds from the saved state (the tool is not retry-safe, and this is no retry).
#[tokio::test]
async fn a_parked_upstream_call_continues_on_another_worker() {
    let (mut stack, file, log) = stack_with(Transport::Stdio { legacy: false }, "").await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__approve_twice", PATIENCE).await;
    let task = client.create_task("fx__approve_twice", json!({})).await;
    parked_requests(&client, &task).await;
    stack.workers[0].kill().await;
    client.update_task(&task, json!({ "r1.ok": { "action": "accept", "content": { "ok": true } } })).await;
    stack.add_worker(&["--tools", "", "--upstreams", file.to_str().unwrap()]).await;
    eventually(PATIENCE, "the second round", || async {
        parked_requests(&client, &task).await.get("r2.ok").is_some().then_some(())
    })
    .await;
    client.update_task(&task, json!({ "r2.ok": { "action": "decline" } })).await;
    let done = terminal(&client, &task).await;
    assert_eq!(done["result"]["content"][0]["text"], "decline at step2", "{done}");
    assert!(fixture_log(&log).contains("approve_twice state=step1 answer=accept"), "{}", fixture_log(&log));
}

/// A server that answers with a task of its own: followed with `tasks/get`, its input asked as
/// taskgate's own (`t1.go`), the answer sent with `tasks/update`; its id is never shown.
async fn an_upstream_task_is_followed(transport: Transport<'_>, log: Option<PathBuf>) {
    let (stack, _file, stdio_log) = stack_with(transport, "").await;
    let log = log.unwrap_or(stdio_log);
    let client = stack.client(0);
    wait_for_tool(&client, "fx__tasked", PATIENCE).await;
    let task = client.create_task("fx__tasked", json!({ "ms": 300 })).await;
    let requests = parked_requests(&client, &task).await;
    assert_eq!(requests.as_object().unwrap().keys().collect::<Vec<_>>(), ["t1.go"], "{requests}");
    assert_eq!(requests["t1.go"]["params"]["message"], "Go on?");
    let shown = client.get_task(&task).await;
    assert!(!shown.text.contains("fx-task-"), "the server's task id leaked: {}", shown.text);
    client.update_task(&task, json!({ "t1.go": { "action": "accept", "content": { "go": true } } })).await;
    let done = terminal(&client, &task).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "task done: accept", "{done}");
    let log = fixture_log(&log);
    assert_eq!(log.matches("task created").count(), 1, "{log}");
    assert!(log.contains("task update fx-task-") && log.contains(" accept"), "{log}");
}

#[tokio::test]
async fn a_task_of_a_stdio_upstream_is_followed() {
    an_upstream_task_is_followed(Transport::Stdio { legacy: false }, None).await;
}

#[tokio::test]
async fn a_task_of_an_http_upstream_is_followed() {
    let fixture = HttpFixture::start(FIXTURE, false).await;
    let log = fixture.log.clone();
    an_upstream_task_is_followed(Transport::Http(&fixture.url), Some(log)).await;
}

/// A cancel of the taskgate task cancels the server's task (`tasks/cancel`).
#[tokio::test]
async fn cancelling_a_followed_task_cancels_the_upstream_task() {
    let (stack, _file, log) = stack_with(Transport::Stdio { legacy: false }, "").await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__tasked", PATIENCE).await;
    let task = client.create_task("fx__tasked", json!({ "ms": 600_000 })).await;
    eventually(PATIENCE, "the server's task", || async { fixture_log(&log).contains("task created").then_some(()) })
        .await;
    client.cancel_task(&task).await;
    let done = terminal(&client, &task).await;
    assert_eq!(done["status"], "cancelled", "{done}");
    eventually(PATIENCE, "the server's task to be cancelled", || async {
        fixture_log(&log).contains("task cancelled fx-task-").then_some(())
    })
    .await;
}

/// `kill -9` of the worker following a server's task: the next worker follows the same task
/// (its id was saved at once) instead of calling again, although the tool is not retry-safe.
#[tokio::test]
async fn a_followed_task_outlives_its_worker() {
    let fixture = HttpFixture::start(FIXTURE, false).await;
    let log = fixture.log.clone();
    let (mut stack, file, _) =
        stack_from(Stack::builder(), Transport::Http(&fixture.url), "", &["--lease-ms", "1500"]).await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__tasked", PATIENCE).await;
    let task = client.create_task("fx__tasked", json!({ "ms": 4000 })).await;
    eventually(PATIENCE, "the server's task", || async { fixture_log(&log).contains("task created").then_some(()) })
        .await;
    stack.workers[0].kill().await;
    stack.add_worker(&["--tools", "", "--upstreams", file.to_str().unwrap(), "--lease-ms", "1500"]).await;
    let requests = parked_requests(&client, &task).await;
    assert!(requests.get("t1.go").is_some(), "{requests}");
    client.update_task(&task, json!({ "t1.go": { "action": "decline" } })).await;
    let done = terminal(&client, &task).await;
    assert_eq!(done["result"]["content"][0]["text"], "task done: decline", "{done}");
    let log = fixture_log(&log);
    assert_eq!(log.matches("call tasked").count(), 1, "called once only: {log}");
}

/// `follow_tasks = false`: the server is not told the worker takes tasks.
#[tokio::test]
async fn without_follow_tasks_the_server_is_not_offered_tasks() {
    let (stack, _file, log) = stack_with(Transport::Stdio { legacy: false }, "follow_tasks = false\n").await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__tasked", PATIENCE).await;
    let done = run(&client, "fx__tasked", json!({})).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], -32021, "{done}");
    assert!(fixture_log(&log).contains("tasked without the Tasks extension"));
}

/// A server that stops waiting for its question withdraws it: the task shows `working` again,
/// and the call goes on to its end.
#[tokio::test]
async fn a_question_the_server_withdraws_is_taken_back() {
    let (stack, _file, _log) = holding_stack().await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__ask", PATIENCE).await;
    let task = client.create_task("fx__ask", json!({ "withdraw_ms": 1500 })).await;
    let (key, _) = held_question(&client, &task).await;
    let done = terminal(&client, &task).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert!(done["result"]["content"][0]["text"].as_str().unwrap_or_default().starts_with("ask refused"), "{done}");
    let late = client.update_task(&task, json!({ key: { "action": "accept", "content": { "ok": true } } })).await;
    assert!(late.error_code().is_none(), "{}", late.text);
    assert_eq!(client.get_task(&task).await.result()["status"], "completed");
}

/// After a call on a stdio connection was abandoned (cancelled) while the server may still run
/// it, a question naming no call cannot be told apart from one of that call's: it is declined,
/// never shown on another task.
#[tokio::test]
async fn a_question_after_an_abandoned_call_is_declined() {
    let (stack, _file, log) = holding_stack().await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__ask", PATIENCE).await;
    let abandoned = client.create_task("fx__wait_for_cancel", json!({})).await;
    eventually(PATIENCE, "the call to reach the server", || async {
        fixture_log(&log).contains("call wait_for_cancel").then_some(())
    })
    .await;
    client.cancel_task(&abandoned).await;
    assert_eq!(terminal(&client, &abandoned).await["status"], "cancelled");
    let done = run(&client, "fx__ask", json!({})).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert!(done["result"]["content"][0]["text"].as_str().unwrap_or_default().contains("action: Decline"), "{done}");
}

/// A worker that drains while holding a question cannot hand it to another (the session goes
/// with it): the task fails at once, clearly, instead of waiting for the lease to lapse.
#[tokio::test]
async fn a_worker_that_drains_while_holding_a_question_fails_the_task_at_once() {
    let extra = "elicitation = \"hold\"\n";
    let args = ["--lease-ms", "600000", "--drain-grace-ms", "300"];
    let (stack, _file, _log) = stack_from(Stack::builder(), Transport::Stdio { legacy: true }, extra, &args).await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__ask", PATIENCE).await;
    let task = client.create_task("fx__ask", json!({})).await;
    held_question(&client, &task).await;
    stack.workers[0].signal("TERM");
    // The lease is ten minutes long: only the drain can have ended the task within the patience.
    let done = terminal(&client, &task).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert!(done["statusMessage"].as_str().unwrap_or_default().contains("can no longer be answered"), "{done}");
}
