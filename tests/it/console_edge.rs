//! The console's edge through the real binaries: every route's deadlines and limits, its
//! share of Redis (rate, concurrency, a cached overview), the sign-in cookie and CSRF secret,
//! and an overview that is true for a gateway started before its workers.

use std::time::Duration;

use serde_json::json;
use taskgate_tests::{Stack, eventually};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::console::{As, Console, api_keys, console_stack, sign_in};
use crate::pipeline::{authority, read_until_closed};

const PATIENCE: Duration = Duration::from_secs(20);

/// Sends a sign-in head that announces a body of `length` bytes, then nothing.
async fn stalled_sign_in(address: &str, length: usize) -> TcpStream {
    let mut stream = TcpStream::connect(address).await.unwrap();
    let head = format!(
        "POST /console/login HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: {length}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_whose_body_never_comes_is_answered_408_and_closed_within_the_body_timeout() {
    let stack = Stack::builder().workers(0).gateway_args(&["--console", "--body-timeout-ms", "1000"]).spawn().await;
    let address = authority(&stack.client(0));
    let started = std::time::Instant::now();
    let mut stream = stalled_sign_in(&address, 2_000_000).await;
    let answer = read_until_closed(&mut stream, Duration::from_secs(10)).await.expect("closed, not held");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(6), "closed after {:?}", started.elapsed());

    // An oversize form is refused before it is read.
    let mut stream = stalled_sign_in(&address, 1_000_000).await;
    stream.write_all(&vec![b'a'; 64 * 1024]).await.ok();
    let answer = read_until_closed(&mut stream, Duration::from_secs(10)).await.expect("closed");
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_requests_past_the_replicas_cap_are_shed_with_503_and_retry_after() {
    let stack = Stack::builder()
        .workers(0)
        .gateway_args(&["--console", "--console-max-in-flight", "1", "--body-timeout-ms", "15000"])
        .spawn()
        .await;
    let client = stack.client(0);
    let console = Console::new(&client);
    // One sign-in waits for its body, holding the only console slot. A page load of this loop
    // may reach the gateway first and take the slot, and the sign-in is then shed itself (it
    // is answered at once): another takes its place.
    let address = authority(&client);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut held = stalled_sign_in(&address, 100).await;
    let shed = loop {
        assert!(tokio::time::Instant::now() < deadline, "no console request was shed");
        let mut answered = [0u8; 1];
        if held.try_read(&mut answered).is_ok() {
            held = stalled_sign_in(&address, 100).await;
        }
        let page = console.get("/console/", As::Nobody).await;
        if page.status == 503 {
            break page;
        }
    };
    assert_eq!(shed.header("retry-after"), "1");
    // `/mcp` is not the console's: it is served meanwhile.
    assert!(client.call("tools/list", json!({})).await.result()["tools"].is_array());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_pages_spend_the_tenants_request_rate() {
    let stack = Stack::builder()
        .workers(0)
        .gateway_args(&["--console", "--tenant-rps", "0.1", "--tenant-burst", "3"])
        .spawn()
        .await;
    let console = Console::new(&stack.client(0));
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let page = console.get("/console/tasks", As::Nobody).await;
        if page.status == 429 {
            assert!(page.header("retry-after").parse::<u64>().is_ok_and(|s| s >= 1), "{:?}", page.headers);
        }
        statuses.push(page.status);
    }
    assert!(statuses.starts_with(&[200, 200, 200]) && statuses.contains(&429), "{statuses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csrf_tokens_come_from_a_secret_every_replica_shares() {
    let mut stack = console_stack(0).await;
    let keys = api_keys(&stack);
    let auth = ["--auth", "api-keys", "--api-keys-file", &keys, "--console"];
    stack.add_gateway_with_auth(&auth).await;
    let first = Console::new(&stack.client(0)).get("/console/", As::Bearer("key-op")).await.csrf();
    let second = Console::new(&stack.client(1)).get("/console/", As::Bearer("key-op")).await.csrf();
    assert_eq!(first, second, "a form from one replica posts to another");

    // The secret, not the credential alone, makes the token: with another secret in Redis, a
    // new gateway makes another token for the same credential.
    let store = stack.store();
    let secret = store.keys().console_secret();
    let _: () = redis::cmd("SET").arg(&secret).arg("ab".repeat(32)).query_async(&mut store.conn()).await.unwrap();
    stack.add_gateway_with_auth(&auth).await;
    let third = Console::new(&stack.client(2)).get("/console/", As::Bearer("key-op")).await.csrf();
    assert_ne!(third, first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_loopback_the_cookie_is_secure_and_the_consoles_own_origin_may_post() {
    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let keys = api_keys(&stack);
    stack.add_gateway_listening("0.0.0.0", &["--auth", "api-keys", "--api-keys-file", &keys, "--console"]).await;
    let console = Console::new(&stack.client(0));
    let http = reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let sign_in = |origin: String| {
        http.post(format!("{}/console/login", console.origin()))
            .header("origin", origin)
            // Anyone can send this: it must not decide the cookie's attributes.
            .header("x-forwarded-proto", "http")
            .header("content-type", "application/x-www-form-urlencoded")
            .body("token=key-op")
            .send()
    };
    let foreign = sign_in("https://evil.example".into()).await.unwrap();
    assert_eq!(foreign.status(), 403);
    let own = sign_in(console.origin()).await.unwrap();
    assert_eq!(own.status(), 303, "a browser's sign-in from the console's own page, without --allowed-origins");
    let cookie = own.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(cookie.starts_with("__Host-taskgate_console=key-op"), "{cookie}");
    assert!(cookie.contains("Secure") && cookie.contains("Path=/") && !cookie.contains("Domain"), "{cookie}");
    let session = cookie.split(';').next().unwrap();
    assert_eq!(console.get("/console/", As::Cookie(session)).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_loopback_a_cookie_without_the_host_prefix_is_refused() {
    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let keys = api_keys(&stack);
    stack.add_gateway_listening("0.0.0.0", &["--auth", "api-keys", "--api-keys-file", &keys, "--console"]).await;
    let console = Console::new(&stack.client(0));
    // The unprefixed cookie could have been set by a sibling domain or over plain HTTP: it is
    // not a credential here, even with a token that is one.
    for path in ["/console/", "/console/tasks", "/console/api/tasks/tsk_00000000000000000000000000000000"] {
        let page = console.get(path, As::Cookie("taskgate_console=key-op")).await;
        assert_eq!(page.status, 401, "{path}: {}", page.body);
    }
    assert_eq!(console.get("/console/", As::Cookie("__Host-taskgate_console=key-op")).await.status, 200);
    let both = "taskgate_console=key-nobody; __Host-taskgate_console=key-op";
    assert_eq!(console.get("/console/", As::Cookie(both)).await.status, 200, "the prefixed one is the one read");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_of_a_gateway_started_before_its_workers_shows_them() {
    // A gateway that re-reads the catalogue only every ten minutes, started first.
    let mut stack =
        Stack::builder().workers(0).gateway_args(&["--console", "--catalogue-refresh-ms", "600000"]).spawn().await;
    let console = Console::new(&stack.client(0));
    assert!(console.get("/console/", As::Nobody).await.body.contains("No worker serves any tool"));
    stack.add_worker(&[]).await;
    let task = stack.client(0).create_task("sleep", json!({"ms": 60_000})).await;
    stack.wait_until_held(&task, PATIENCE).await;
    let page = eventually(PATIENCE, "the overview to show the worker", || async {
        let page = console.get("/console/", As::Nobody).await;
        (page.body.contains("<code>sleep</code>") && page.body.contains(" ago)")).then_some(page)
    })
    .await;
    assert!(!page.body.contains("No worker serves any tool"), "{}", page.body);
    assert!(!page.body.contains("No worker has sent a heartbeat"), "{}", page.body);
    // The run it holds is counted from the task records, whatever its last heartbeat said.
    let workers = &page.body[page.body.find("Workers alive").unwrap()..];
    let row = &workers[workers.find("<tbody>").unwrap()..workers.find("</tbody>").unwrap()];
    assert!(row.contains("</code></td><td>1</td>"), "one run under way: {row}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reveal_is_written_to_the_timeline_and_a_question_is_not_shown_before_it() {
    let stack = console_stack(1).await;
    let console = Console::new(&stack.client(0));
    let op = As::Bearer("key-op");
    let alice = stack.client_as(0, "key-alice");
    let task = alice.create_task("generate_report", json!({"size": "large"})).await;
    alice.wait_for_status(&task, "input_required", PATIENCE).await;
    // The question's text is the task's status message (the client sees it: it is theirs).
    let question = "Waiting for outline approval.";
    assert_eq!(alice.get_task(&task).await.result()["statusMessage"], question);
    for path in [format!("/console/tasks/{task}"), "/console/tasks".into(), format!("/console/api/tasks/{task}")] {
        let page = console.get(&path, op).await;
        assert_eq!(page.status, 200, "{path}");
        assert!(!page.body.contains(question), "{path} shows the question before a reveal: {}", page.body);
    }
    assert!(console.timeline(&task, op).await.iter().all(|e| e["ev"] != "revealed"));

    let shown = console.get(&format!("/console/tasks/{task}?reveal=1"), op).await;
    assert!(shown.body.contains(question), "{}", shown.body);
    assert!(shown.body.contains(">revealed<"), "the revealed page shows its own reveal: {}", shown.body);
    let timeline = console.timeline(&task, op).await;
    let reveal = timeline.iter().find(|e| e["ev"] == "revealed").expect("the reveal in the timeline");
    assert_eq!(reveal["by"], "ops/op");
    assert!(reveal["at"].as_i64().is_some_and(|at| at > 0), "{reveal}");

    // A cookie session signs in as before on loopback.
    let cookie = sign_in(&console, "key-op").await;
    assert_eq!(console.get("/console/", As::Cookie(&cookie)).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reveals_are_bounded_and_never_push_the_tasks_transitions_out_of_its_timeline() {
    let stack = console_stack(1).await;
    let console = Console::new(&stack.client(0));
    let op = As::Bearer("key-op");
    let task = stack.client_as(0, "key-alice").create_task("sleep", json!({"ms": 60_000})).await;
    stack.wait_until_held(&task, PATIENCE).await;
    let reveals = taskgate_shared::store::REVEALS_KEPT + 5;
    for _ in 0..reveals {
        assert_eq!(console.get(&format!("/console/tasks/{task}?reveal=1"), op).await.status, 200);
    }
    let timeline = console.timeline(&task, op).await;
    let kept: Vec<i64> = timeline.iter().filter(|e| e["ev"] == "revealed").map(|e| e["n"].as_i64().unwrap()).collect();
    // The newest reveals, numbered, so their count survives the ones removed.
    let newest = i64::try_from(reveals).unwrap();
    assert_eq!(kept, (newest - kept.len() as i64 + 1..=newest).collect::<Vec<_>>());
    assert_eq!(kept.len(), taskgate_shared::store::REVEALS_KEPT, "{timeline:?}");
    assert_eq!(timeline[0]["ev"], "created", "the transitions stay: {timeline:?}");
    assert!(timeline.iter().any(|e| e["ev"] == "claimed"), "{timeline:?}");

    // The whole list is bounded too, the newest kept: a timeline filled by hand to past its
    // bound is trimmed by the next entry.
    let store = stack.store();
    let key = store.keys().task(&taskgate_shared::task::TaskId::parse(&task).unwrap()).timeline;
    let filler = vec![json!({"at": 1, "ev": "filler"}).to_string(); taskgate_shared::store::TIMELINE_MAX];
    let _: i64 = redis::cmd("RPUSH").arg(&key).arg(&filler).query_async(&mut store.conn()).await.unwrap();
    assert_eq!(console.get(&format!("/console/tasks/{task}?reveal=1"), op).await.status, 200);
    let length: usize = redis::cmd("LLEN").arg(&key).query_async(&mut store.conn()).await.unwrap();
    assert_eq!(length, taskgate_shared::store::TIMELINE_MAX);
    let timeline = console.timeline(&task, op).await;
    assert_eq!(timeline.last().unwrap()["n"], newest + 1, "the newest entry is this reveal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reveal_that_cannot_be_recorded_shows_nothing() {
    let mut stack = console_stack(1).await;
    let keys = api_keys(&stack);
    // A replica without the console: the tasks it creates keep no timeline.
    let plain = stack.add_gateway_with_auth(&["--auth", "api-keys", "--api-keys-file", &keys]).await;
    let alice = stack.client_as(plain, "key-alice");
    let task = alice.create_task("generate_report", json!({"size": "large"})).await;
    alice.wait_for_status(&task, "input_required", PATIENCE).await;
    let question = "Waiting for outline approval.";

    let console = Console::new(&stack.client(0));
    let op = As::Bearer("key-op");
    let refused = console.get(&format!("/console/tasks/{task}?reveal=1"), op).await;
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert!(!refused.body.contains(question) && !refused.body.contains("large"), "{}", refused.body);
    assert!(refused.body.contains("could not be recorded"), "{}", refused.body);
    assert!(console.timeline(&task, op).await.is_empty(), "nothing was written");
    // The page itself is served, redacted, as for any task.
    let page = console.get(&format!("/console/tasks/{task}"), op).await;
    assert_eq!(page.status, 200);
    assert!(!page.body.contains(question), "{}", page.body);
}

/// Calls of one Redis command so far, from `INFO commandstats`.
async fn calls(stack: &Stack, command: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut stack.store().conn()).await.unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overviews_in_quick_succession_are_read_from_redis_once() {
    let stack = Stack::builder().gateway_args(&["--console"]).spawn().await;
    let console = Console::new(&stack.client(0));
    stack.client(0).create_task("noop", json!({})).await;
    let before = calls(&stack, "zrevrangebyscore").await;
    assert_eq!(console.get("/console/overview", As::Nobody).await.status, 200);
    let one = calls(&stack, "zrevrangebyscore").await - before;
    assert!(one > 0, "an overview reads the index");
    for _ in 0..10 {
        assert_eq!(console.get("/console/overview", As::Nobody).await.status, 200);
    }
    let eleven = calls(&stack, "zrevrangebyscore").await - before;
    // Within two seconds they are served from memory: at most a second read if the ten loads
    // straddle the end of those two seconds on a slow machine.
    assert!(eleven <= 2 * one, "{eleven} index reads for eleven overviews, {one} for one");
}
