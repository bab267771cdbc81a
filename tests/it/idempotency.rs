//! Idempotent task creation through the real binaries: a `tools/call` retried with the same
//! idempotency key (header or `_meta`), through any replica and even while the first is in
//! flight, gets the same task as it is now and runs the tool once; a retry is neither admitted
//! nor counted as a new task, and a keyed task is never abandoned when its replicas lag; the
//! same key with other arguments or other pre-task answers is refused with 422; another
//! caller's same key is another task.

use std::time::Duration;

use serde_json::{Value, json};
use taskgate_tests::{McpClient, RedisServer, Reply, Scrape, Stack, meta, standard_headers};

use crate::console::api_keys;

const PATIENCE: Duration = Duration::from_secs(20);

/// `tools/call` with the key in the header (`Some`) and/or in `_meta`.
pub(crate) async fn keyed_call(
    client: &McpClient,
    tool: &str,
    arguments: Value,
    header: Option<&str>,
    in_meta: Option<&str>,
) -> Reply {
    let params = json!({ "name": tool, "arguments": arguments, "_meta": meta() });
    keyed_params(client, params, header, in_meta).await
}

/// [`keyed_call`] with the whole `params` given (MRTR rounds carry more than arguments).
async fn keyed_params(client: &McpClient, mut params: Value, header: Option<&str>, in_meta: Option<&str>) -> Reply {
    if let Some(key) = in_meta {
        params["_meta"]["io.taskgate/idempotencyKey"] = json!(key);
    }
    let body = client.envelope("tools/call", params);
    let mut headers = standard_headers(&body);
    if let Some(key) = header {
        headers.push(("Idempotency-Key".to_owned(), format!("\"{key}\"")));
    }
    client.send(&headers, body.to_string().into_bytes()).await
}

pub(crate) fn task_id(reply: &Reply) -> String {
    assert_eq!(reply.result()["resultType"], "task", "{}", reply.text);
    reply.result()["taskId"].as_str().expect("taskId").to_owned()
}

async fn fence(stack: &Stack, id: &str) -> String {
    let store = stack.store();
    let id = taskgate_shared::task::TaskId::parse(id).unwrap();
    let fence: Option<String> = redis::cmd("HGET")
        .arg(store.keys().task(&id).record)
        .arg("fence")
        .query_async(&mut store.conn())
        .await
        .unwrap();
    fence.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_with_the_same_key_through_either_replica_gets_the_same_task_and_one_run() {
    let stack = Stack::builder().gateways(2).spawn().await;
    let (a, b) = (stack.client(0), stack.client(1));
    let arguments = json!({ "ms": 500 });
    // The second is sent while the first is in flight, through the other replica.
    let (first, second) = tokio::join!(
        keyed_call(&a, "sleep", arguments.clone(), Some("order-7f3a"), None),
        keyed_call(&b, "sleep", arguments.clone(), Some("order-7f3a"), None),
    );
    let id = task_id(&first);
    assert_eq!(task_id(&second), id, "one key, one task");
    // The body's form of the key names the same task.
    let third = keyed_call(&b, "sleep", json!({"ms": 500}), None, Some("order-7f3a")).await;
    assert_eq!(task_id(&third), id);
    let done = a.wait_for_status(&id, "completed", PATIENCE).await;
    // Claimed once: the result is the only claim's (a second claim would carry a later token).
    let once = fence(&stack, &id).await;
    assert_eq!(taskgate_tests::result_token(&done).to_string(), once, "claimed and run once");
    // A retry after it ended still names it, and runs nothing again.
    let late = keyed_call(&a, "sleep", arguments, Some("order-7f3a"), None).await;
    assert_eq!(task_id(&late), id);
    assert_eq!(late.result()["status"], "completed", "the task as it is now: {}", late.text);
    assert_eq!(a.get_task(&id).await.result()["status"], "completed");
    assert_eq!(fence(&stack, &id).await, once, "not claimed again");
    // Without a key, every call is a task of its own.
    assert_ne!(a.create_task("sleep", json!({"ms": 1})).await, a.create_task("sleep", json!({"ms": 1})).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_for_another_call_is_refused_and_bad_keys_are_named() {
    let stack = Stack::builder().spawn().await;
    let client = stack.client(0);
    let id = task_id(&keyed_call(&client, "sleep", json!({"ms": 1}), Some("k-1"), None).await);
    // The body's form of the key, for the same call, names the same task.
    assert_eq!(task_id(&keyed_call(&client, "sleep", json!({"ms": 1}), None, Some("k-1")).await), id);
    for (tool, arguments) in [("sleep", json!({"ms": 2})), ("noop", json!({}))] {
        let refused = keyed_call(&client, tool, arguments, Some("k-1"), None).await;
        assert_eq!((refused.status, refused.error_code()), (422, Some(-32602)), "{}", refused.text);
        assert!(refused.error()["message"].as_str().unwrap().contains("idempotency key was used"), "{}", refused.text);
    }
    let too_long = "k".repeat(256);
    for (header, in_meta) in
        [(Some(too_long.as_str()), None), (Some("a b"), None), (Some("a"), Some("b")), (None, Some(""))]
    {
        let refused = keyed_call(&client, "sleep", json!({"ms": 1}), header, in_meta).await;
        assert_eq!(refused.error_code(), Some(-32602), "{header:?} {in_meta:?}: {}", refused.text);
    }
    // The first task is untouched by the refusals.
    client.wait_for_status(&id, "completed", PATIENCE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_callers_same_key_is_another_task() {
    let mut stack = Stack::builder().gateways(0).spawn().await;
    let keys = api_keys(&stack);
    stack.add_gateway_with_auth(&["--auth", "api-keys", "--api-keys-file", &keys]).await;
    let alice = stack.client_as(0, "key-alice");
    let bob = stack.client_as(0, "key-bob");
    let admin = stack.client_as(0, "key-admin");
    let mine = task_id(&keyed_call(&alice, "sleep", json!({"ms": 1}), Some("shared-key"), None).await);
    let theirs = task_id(&keyed_call(&bob, "sleep", json!({"ms": 2}), Some("shared-key"), None).await);
    let same_tenant = task_id(&keyed_call(&admin, "sleep", json!({"ms": 3}), Some("shared-key"), None).await);
    assert_ne!(mine, theirs, "another tenant");
    assert_ne!(mine, same_tenant, "another principal of the same tenant");
    assert_eq!(task_id(&keyed_call(&alice, "sleep", json!({"ms": 1}), Some("shared-key"), None).await), mine);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_lost_answer_gets_the_task_the_first_call_made_and_one_run() {
    let ledger = tempfile::tempdir().unwrap();
    let dir = ledger.path().to_str().unwrap().to_owned();
    let stack = Stack::builder().worker_args(&["--ledger-dir", &dir]).spawn().await;
    let gateway: std::net::SocketAddr = stack.client(0).base().trim_start_matches("http://").parse().unwrap();
    let proxy = taskgate_tests::FaultProxy::start(gateway).await;
    let client = McpClient::new(&format!("http://127.0.0.1:{}", proxy.port()));
    let arguments = json!({ "steps": 3, "stepMs": 50 });

    // The gateway makes the task and answers; the answer is lost with the connection.
    proxy.drop_reply_to(b"ledger-run-1");
    let params = json!({ "name": "ledger", "arguments": arguments, "_meta": meta() });
    let body = client.envelope("tools/call", params);
    let mut request = client.http().post(client.url()).body(body.to_string());
    for (name, value) in standard_headers(&body) {
        request = request.header(name, value);
    }
    let lost = request.header("Idempotency-Key", "\"ledger-run-1\"").send().await;
    let lost = match lost {
        Ok(response) => response.text().await.map(|_| ()),
        Err(err) => Err(err),
    };
    assert!(lost.is_err(), "the first answer must not arrive");
    assert_eq!(proxy.captured().len(), 1, "the call reached the gateway");

    // The client retries with the same key: the task the first call made, run once.
    let retry = keyed_call(&client, "ledger", arguments, Some("ledger-run-1"), None).await;
    let id = task_id(&retry);
    client.wait_for_status(&id, "completed", PATIENCE).await;
    let files: Vec<_> = std::fs::read_dir(ledger.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(files, [std::ffi::OsString::from(&id)], "one task was made");
    let lines = std::fs::read_to_string(ledger.path().join(&id)).unwrap();
    let lines: Vec<(&str, &str)> = lines.lines().map(|l| l.split_once(' ').unwrap()).collect();
    let token = lines[0].0;
    assert_eq!(lines, [(token, "0"), (token, "1"), (token, "2")], "one run of three steps");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_work_on_a_cluster_where_the_key_picks_the_tasks_slot() {
    let stack = Stack::builder().cluster(3).gateways(2).spawn().await;
    let (a, b) = (stack.client(0), stack.client(1));
    let mut ids = std::collections::HashSet::new();
    // Keys land on different shards (so different nodes); each names one task.
    for n in 0..8 {
        let key = format!("cluster-key-{n}");
        let first = task_id(&keyed_call(&a, "sleep", json!({"ms": 1}), Some(&key), None).await);
        let again = task_id(&keyed_call(&b, "sleep", json!({"ms": 1}), None, Some(&key)).await);
        assert_eq!(first, again, "{key}");
        let refused = keyed_call(&b, "sleep", json!({"ms": 2}), Some(&key), None).await;
        assert_eq!((refused.status, refused.error_code()), (422, Some(-32602)), "{}", refused.text);
        ids.insert(first[4..6].to_owned());
    }
    assert!(ids.len() > 1, "the keys spread over shards: {ids:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_call_ignores_a_key_and_runs_each_time() {
    let stack = Stack::builder().worker_args(&["--tools", "conformance"]).spawn().await;
    let client = stack.client(0);
    // `greet` runs inline: no task for a retry to find, so any key, even a malformed one, is
    // not read, and each call runs and answers.
    for key in ["greet-1", "greet-1", "not a key"] {
        let reply = keyed_call(&client, "greet", json!({"name": "Ada"}), Some(key), None).await;
        assert_eq!(reply.result()["resultType"], "complete", "{}", reply.text);
        assert_eq!(reply.result()["content"][0]["text"], "Hello, Ada!");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_task_is_never_abandoned_when_its_replicas_lag() {
    let mut stack = Stack::builder().gateways(0).spawn().await;
    let replica = RedisServer::start_replica_of(&stack.redis).await;
    stack.add_gateway(&["--durability-replicas", "1", "--durability-timeout-ms", "300"]).await;
    let client = stack.client(0);
    let arguments = json!({ "ms": 1500 });
    let id = task_id(&keyed_call(&client, "sleep", arguments.clone(), Some("lagging-1"), None).await);

    // The replica stops acknowledging: a retry cannot confirm the task on it, and says so...
    replica.signal("STOP");
    let refused = keyed_call(&client, "sleep", arguments.clone(), Some("lagging-1"), None).await;
    assert_eq!((refused.status, refused.error_code()), (500, Some(-32603)), "{}", refused.text);
    assert!(refused.text.contains("retry with the same idempotency key"), "{}", refused.text);
    // ...but leaves the task the first request made as it was.
    let status = client.get_task(&id).await.result()["status"].clone();
    assert_eq!(status, "working", "the retry did not end the task");

    // Once the replica is back, the retry answers the task as it is in Redis, and it completes.
    replica.signal("CONT");
    let again = keyed_call(&client, "sleep", arguments, Some("lagging-1"), None).await;
    assert_eq!(task_id(&again), id);
    let read = client.get_task(&id).await;
    assert_eq!(again.result()["status"], read.result()["status"], "the reply says what tasks/get says");
    let done = client.wait_for_status(&id, "completed", PATIENCE).await;
    assert_eq!(done["status"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_takes_no_active_task_slot_and_counts_no_create() {
    let stack = Stack::builder().gateway_args(&["--tenant-max-active-tasks", "1"]).spawn().await;
    let client = stack.client(0);
    let metrics = format!("{}/metrics", stack.gateways[0].url.as_deref().unwrap());
    let created = |scrape: &Scrape| scrape.get("taskgate_tasks_created_total", &[("tool", "sleep")]);
    let started =
        |scrape: &Scrape| scrape.get("taskgate_task_transitions_total", &[("from", "none"), ("to", "working")]);

    // At the cap, a retry of the one active task is answered, not refused.
    let running = task_id(&keyed_call(&client, "sleep", json!({"ms": 1000}), Some("slot-1"), None).await);
    let before = Scrape::of(&metrics).await;
    let retry = keyed_call(&client, "sleep", json!({"ms": 1000}), Some("slot-1"), None).await;
    assert_eq!(task_id(&retry), running, "{}", retry.text);
    client.wait_for_status(&running, "completed", PATIENCE).await;

    // A retry of the finished task is answered with it, and leaves the slot free.
    let finished = keyed_call(&client, "sleep", json!({"ms": 1000}), Some("slot-1"), None).await;
    assert_eq!(task_id(&finished), running);
    assert_eq!(finished.result()["status"], "completed", "{}", finished.text);
    let after = Scrape::of(&metrics).await;
    assert_eq!(created(&after), created(&before), "retries are not created tasks");
    assert_eq!(started(&after), started(&before), "retries make no transition");
    let next = client.call("tools/call", json!({"name": "sleep", "arguments": {"ms": 0}})).await;
    assert_eq!(next.result()["resultType"], "task", "the slot is free: {}", next.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_covers_the_answers_given_before_the_task_existed() {
    let stack = Stack::builder().worker_args(&["--tools", "conformance"]).spawn().await;
    let client = stack.client(0);
    let tool = "test_tool_with_task";
    let first = client.call("tools/call", json!({ "name": tool, "_meta": meta() })).await;
    assert_eq!(first.result()["resultType"], "input_required", "{}", first.text);
    let state = first.result()["requestState"].clone();
    let round = |name: &str| {
        let answer = json!({ "action": "accept", "content": { "name": name } });
        json!({ "name": tool, "inputResponses": { "user_name": answer }, "requestState": state, "_meta": meta() })
    };
    let id = task_id(&keyed_params(&client, round("Ada"), Some("greet-ada"), None).await);
    assert_eq!(task_id(&keyed_params(&client, round("Ada"), Some("greet-ada"), None).await), id, "the same retry");
    let other = keyed_params(&client, round("Bob"), Some("greet-ada"), None).await;
    assert_eq!((other.status, other.error_code()), (422, Some(-32602)), "another answer: {}", other.text);
    let done = client.wait_for_status(&id, "completed", PATIENCE).await;
    assert!(done.to_string().contains("Hello, Ada!"), "{done}");
}
