//! The upstream bridge against servers that leak, misroute or misbehave: an HTTP server's URL
//! (which may carry a credential) never reaches tasks or logs, redirects stay within the
//! server's origin, reads are bounded in time, and what a server sends is bounded in size and
//! rate. Through the real gateway, worker and Redis, with the hermetic fixture server, and tiny
//! HTTP servers of the test's own where a misrouting server is needed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use taskgate_tests::upstream::{HttpFixture, fixture_log, upstreams_file, wait_for_tool};
use taskgate_tests::{Scrape, Stack, eventually, free_port};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

use crate::upstream::{FIXTURE, PATIENCE, Transport, run, stack_from, stack_with};

/// A stack whose one worker serves the upstreams file `body`.
async fn stack_serving(builder: taskgate_tests::StackBuilder, body: &str) -> Stack {
    let mut stack = builder.workers(0).spawn().await;
    let file = upstreams_file(stack.scratch_dir(), "upstreams.toml", body);
    stack.add_worker(&["--tools", "", "--upstreams", file.to_str().unwrap()]).await;
    stack
}

/// The worker's JSON log lines with this message.
fn log_lines(stack: &Stack, message: &str) -> Vec<Value> {
    stack.workers[0]
        .log()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["message"] == message)
        .collect()
}

/// The reason of the first "upstream down" line about `upstream`, once there is one.
async fn down_reason(stack: &Stack, upstream: &str) -> String {
    eventually(PATIENCE, &format!("upstream {upstream} to be reported down"), || async {
        log_lines(stack, "upstream down")
            .into_iter()
            .find(|l| l["upstream"] == upstream)
            .and_then(|l| l["reason"].as_str().map(str::to_owned))
    })
    .await
}

/// A port nothing listens on.
async fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port()
}

/// An HTTP server's URL carries a secret in its path and query: neither a failed call's error
/// and status, nor the reason it is down, nor any log line, nor `tools/list` shows it.
#[tokio::test]
async fn an_http_upstreams_url_never_reaches_tasks_or_logs() {
    let fixture = HttpFixture::start(FIXTURE, false).await;
    let secret_url = format!("{}/SECRET-TOKEN-123?key=SECRET", fixture.url);
    let unreachable = format!("http://127.0.0.1:{}/mcp/SECRET-TOKEN-456?key=SECRET", closed_port().await);
    let body = format!(
        "[[upstream]]\nname = \"fx\"\nurl = {secret_url:?}\n\n\
         [[upstream]]\nname = \"gone\"\nurl = {unreachable:?}\nconnect_timeout_ms = 1000\n"
    );
    let stack = stack_serving(Stack::builder(), &body).await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__echo", PATIENCE).await;
    let reason = down_reason(&stack, "gone").await;
    assert!(!reason.contains("SECRET"), "{reason}");

    // The server goes away: the call's error names the server, not its URL.
    drop(fixture);
    let done = run(&client, "fx__echo", json!({ "text": "anyone?" })).await;
    assert_eq!(done["status"], "failed", "{done}");
    let message = done["statusMessage"].as_str().unwrap_or_default();
    assert!(message.starts_with("upstream server \"fx\" could not be reached: "), "{done}");
    assert!(!done.to_string().contains("SECRET"), "the URL reached the task: {done}");
    assert!(!done.to_string().contains("127.0.0.1"), "the URL reached the task: {done}");

    let listed = client.call("tools/list", json!({})).await;
    assert!(!listed.text.contains("SECRET"), "{}", listed.text);
    let log = stack.workers[0].log();
    let leaks: Vec<&str> = log.lines().filter(|l| l.contains("SECRET")).collect();
    assert!(leaks.is_empty(), "the URL reached the worker's log: {leaks:#?}");
}

/// The URL of an HTTP server may come from the worker's environment or from a file, as its
/// headers can; the plain form keeps working (every other test uses it).
#[tokio::test]
async fn an_http_upstreams_url_comes_from_the_environment_or_a_file() {
    let fixture = HttpFixture::start(FIXTURE, false).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("url");
    std::fs::write(&file, format!("{}\n", fixture.url)).unwrap();
    let body = format!(
        "[[upstream]]\nname = \"fx\"\nurl = {{ env = \"FX_UPSTREAM_URL\" }}\n\n\
         [[upstream]]\nname = \"fy\"\nurl = {{ file = {:?} }}\n",
        file.to_str().unwrap()
    );
    let stack = stack_serving(Stack::builder().env("FX_UPSTREAM_URL", &fixture.url), &body).await;
    let client = stack.client(0);
    for (tool, text) in [("fx__echo", "from the environment"), ("fy__echo", "from a file")] {
        wait_for_tool(&client, tool, PATIENCE).await;
        let done = run(&client, tool, json!({ "text": text })).await;
        assert_eq!(done["result"]["content"][0]["text"], text, "{done}");
    }
}

/// A server that answers every request with `status` and `location` (for `/moved…` paths,
/// `moved` and its own `/mcp`), counting the requests.
async fn redirector(status: &'static str, location: String) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counted = counted.clone();
            let location = location.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                counted.fetch_add(1, Ordering::SeqCst);
                let (status, location) = if head.starts_with(b"POST /moved") || head.starts_with(b"GET /moved") {
                    ("301 Moved Permanently", format!("http://127.0.0.1:{port}/mcp"))
                } else {
                    (status, location)
                };
                let reply = format!(
                    "HTTP/1.1 {status}\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                let _ = socket.write_all(reply.as_bytes()).await;
            });
        }
    });
    (port, requests)
}

/// A listener that counts the connections it is given, and never answers.
async fn witness() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            held.push(socket);
        }
    });
    (port, connections)
}

/// A redirect to another origin (a 307, which would keep the POST and its headers) is refused,
/// and so is a same-origin 301 (it would turn the POST into a GET): the other port never sees a
/// connection, and the server is down with the reason.
#[tokio::test]
async fn redirects_leave_neither_the_origin_nor_the_request() {
    let (elsewhere, reached) = witness().await;
    let (port, requests) = redirector("307 Temporary Redirect", format!("http://127.0.0.1:{elsewhere}/mcp")).await;
    let body = format!(
        "[[upstream]]\nname = \"away\"\nurl = \"http://127.0.0.1:{port}/mcp\"\nconnect_timeout_ms = 2000\n\
         headers = {{ X-Api-Key = {{ env = \"FX_API_KEY\" }} }}\n\n\
         [[upstream]]\nname = \"moved\"\nurl = \"http://127.0.0.1:{port}/moved\"\nconnect_timeout_ms = 2000\n"
    );
    let stack = stack_serving(Stack::builder().env("FX_API_KEY", "key-for-the-server-only"), &body).await;
    let away = down_reason(&stack, "away").await;
    assert!(away.contains("refused a redirect to another origin"), "{away}");
    let moved = down_reason(&stack, "moved").await;
    assert!(moved.contains("refused a 301 redirect"), "{moved}");
    // Both were tried again, and still nothing went elsewhere.
    eventually(PATIENCE, "the servers to be tried again", || async {
        (requests.load(Ordering::SeqCst) >= 4).then_some(())
    })
    .await;
    assert_eq!(reached.load(Ordering::SeqCst), 0, "a redirect was followed to another origin");
}

/// A server that takes the request and then says nothing: the read timeout ends the wait long
/// before the handshake's own (connect) timeout would.
#[tokio::test]
async fn a_silent_http_server_is_cut_by_the_read_timeout() {
    let (port, connections) = witness().await;
    let body = format!(
        "[[upstream]]\nname = \"mute\"\nurl = \"http://127.0.0.1:{port}/mcp\"\nconnect_timeout_ms = 8000\n\
         read_timeout_ms = 300\n"
    );
    let stack = stack_serving(Stack::builder(), &body).await;
    let reason = down_reason(&stack, "mute").await;
    assert!(!reason.contains("no handshake within"), "{reason}");
    assert!(reason.contains("timed out"), "{reason}");
    assert!(connections.load(Ordering::SeqCst) >= 1);
}

/// A stdio table of the fixture named `name`, logging to `log`, with `env` added to its
/// environment (`, KEY = "value"`) and `extra` lines.
fn stdio_table(name: &str, log: &std::path::Path, legacy: bool, env: &str, extra: &str) -> String {
    let legacy = if legacy { ", \"--legacy\"" } else { "" };
    format!(
        "[[upstream]]\nname = \"{name}\"\ncommand = {FIXTURE:?}\nargs = [\"stdio\"{legacy}]\n\
         env = {{ FIXTURE_LOG = {:?}{env} }}\n{extra}\n",
        log.to_str().unwrap()
    )
}

/// A tool error (`isError`) or a JSON-RPC error over the result cap fails the task with a
/// fixed error, and the giant payload is stored nowhere.
#[tokio::test]
async fn oversized_errors_fail_the_task_with_a_fixed_error() {
    let args = ["--max-result-bytes", "65536"];
    let (stack, _file, _log) = stack_from(Stack::builder(), Transport::Stdio { legacy: false }, "", &args).await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__huge_error", PATIENCE).await;
    for rpc in [true, false] {
        let done = run(&client, "fx__huge_error", json!({ "bytes": 200_000, "rpc": rpc })).await;
        assert_eq!(done["status"], "failed", "rpc {rpc}");
        let shown = done.to_string();
        assert!(shown.len() < 4096, "rpc {rpc}: {} bytes shown", shown.len());
        assert!(shown.contains("over the 65536-byte limit"), "{shown}");
    }
}

/// A progress message becomes the task's status cut to 1 KiB, without control characters,
/// and with the amount kept.
#[tokio::test]
async fn a_progress_message_is_cut_and_cleaned() {
    let (stack, _file, _log) = stack_with(Transport::Stdio { legacy: false }, "").await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__loud_progress", PATIENCE).await;
    let task = client.create_task("fx__loud_progress", json!({ "bytes": 100_000, "ms": 60_000 })).await;
    let status = eventually(PATIENCE, "the loud progress", || async {
        let task = client.get_task(&task).await.result().clone();
        task["statusMessage"].as_str().filter(|m| m.contains("LOUD")).map(str::to_owned)
    })
    .await;
    assert!(status.len() <= 1024, "{} bytes", status.len());
    assert!(!status.chars().any(char::is_control), "{status:?}");
    assert!(status.ends_with("… (1/2)"), "{status}");
    client.cancel_task(&task).await;
}

/// A question over 64 KiB is never stored: held mid-call, it is refused to the server with a
/// JSON-RPC error and the call goes on; asked as a 2026-07-28 round, it fails the task.
#[tokio::test]
async fn an_oversized_question_is_refused() {
    let mut stack = Stack::builder().workers(0).spawn().await;
    let log = stack.scratch_dir().join("fixture.log");
    let body = stdio_table("fx", &log, true, "", "elicitation = \"hold\"") + &stdio_table("fn", &log, false, "", "");
    let file = upstreams_file(stack.scratch_dir(), "upstreams.toml", &body);
    stack.add_worker(&["--tools", "", "--upstreams", file.to_str().unwrap()]).await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__ask_huge", PATIENCE).await;
    wait_for_tool(&client, "fn__ask_huge", PATIENCE).await;

    let held = run(&client, "fx__ask_huge", json!({ "bytes": 100_000 })).await;
    assert_eq!(held["status"], "completed", "{held}");
    let text = held["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.starts_with("ask_huge refused") && text.contains("64 KiB"), "{text}");

    let round = run(&client, "fn__ask_huge", json!({ "bytes": 100_000, "round": true })).await;
    assert_eq!(round["status"], "failed", "{round}");
    assert!(round["statusMessage"].as_str().unwrap_or_default().contains("asked for input over 64 KiB"), "{round}");
    assert!(round.to_string().len() < 4096);
}

/// A server whose every page names a next one is read for 100 pages, then listed with what
/// those held; the cut is logged once.
#[tokio::test]
async fn an_endless_listing_is_cut_at_its_page_limit() {
    let mut stack = Stack::builder().workers(0).spawn().await;
    let log = stack.scratch_dir().join("fixture.log");
    let body = stdio_table("fx", &log, false, ", FIXTURE_ENDLESS_PAGES = \"1\"", "");
    let file = upstreams_file(stack.scratch_dir(), "upstreams.toml", &body);
    stack.add_worker(&["--tools", "", "--upstreams", file.to_str().unwrap()]).await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__echo", PATIENCE).await;
    assert_eq!(fixture_log(&log).matches("list page ").count(), 100);
    let cut = log_lines(&stack, "the upstream's listing goes on past the page limit; keeping the pages read");
    assert_eq!(cut.len(), 1, "{cut:?}");
    assert_eq!(cut[0]["upstream"], "fx");
}

/// A storm of `list_changed` costs at most one listing a second, and the change the storm ends
/// with still reaches the catalogue.
#[tokio::test]
async fn a_storm_of_list_changes_relists_at_most_once_a_second() {
    let listen = format!("127.0.0.1:{}", free_port());
    let args = ["--metrics-listen", listen.as_str()];
    let (stack, _file, _log) = stack_from(Stack::builder(), Transport::Stdio { legacy: false }, "", &args).await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__storm", PATIENCE).await;
    let done = run(&client, "fx__storm", json!({ "count": 40, "every_ms": 25 })).await;
    assert_eq!(done["status"], "completed", "{done}");
    wait_for_tool(&client, "fx__late", PATIENCE).await;
    let scrape = Scrape::of(&format!("http://{listen}/metrics")).await;
    let relists = scrape.get("taskgate_upstream_list_refreshes_total", &[("upstream", "fx")]);
    assert!((1.0..=3.0).contains(&relists), "{relists} listings for a one-second storm");
}
