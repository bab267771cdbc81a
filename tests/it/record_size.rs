//! The stored form of a task: what a completed task costs Redis, and that what it leaves out of
//! its record comes back unchanged to every reader (the client's `tasks/get`, the worker's claim).

use std::time::Duration;

use serde_json::{Value, json};
use taskgate_shared::store::{DEFAULT_POOL, TaskKeys};
use taskgate_shared::task::TaskId;
use taskgate_tests::Stack;

const PATIENCE: Duration = Duration::from_secs(20);

/// The record is a hash; Redis keeps it in the compact listpack encoding only while every value
/// fits `hash-max-listpack-value` (64 bytes by default, as here).
async fn encoding_and_bytes(stack: &Stack, id: &TaskId) -> (String, u64) {
    let key = stack.store().keys().task(id).record;
    let mut conn = stack.redis.connection().await;
    let encoding: String = redis::cmd("OBJECT").arg("ENCODING").arg(&key).query_async(&mut conn).await.unwrap();
    let bytes: u64 = redis::cmd("MEMORY").arg("USAGE").arg(&key).query_async(&mut conn).await.unwrap();
    (encoding, bytes)
}

#[tokio::test]
async fn a_completed_small_task_keeps_the_compact_encoding_and_its_full_result() {
    let stack = Stack::builder().spawn().await;
    let client = stack.client(0);
    let task = client.create_task("noop", json!({})).await;
    let done = client.wait_for_status(&task, "completed", PATIENCE).await;

    // The wire form is whole: the parts every result shares are put back when it is read.
    let result = &done["result"];
    assert_eq!(result["resultType"], "complete", "{done}");
    assert_eq!(result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "taskgate", "{done}");
    assert_eq!(result["content"][0]["text"], "ok", "{done}");

    let id = TaskId::parse(&task).unwrap();
    let (encoding, bytes) = encoding_and_bytes(&stack, &id).await;
    assert_eq!(encoding, "listpack", "a value over 64 bytes converted the record");
    assert!(bytes <= 600, "a completed no-op task's record takes {bytes} bytes");
}

/// Real clients declare elicitation, sampling and roots: 75 bytes of JSON, stored packed
/// (`store/compact.rs`), so the record stays compact. (The worker reads them back whole:
/// `a_worker_claims_the_capabilities_its_creator_declared`, and `inline::only_declared_input_kinds_are_asked`.)
#[tokio::test]
async fn a_client_declaring_every_kind_of_input_keeps_the_compact_encoding() {
    let stack = Stack::builder().spawn().await;
    let client = stack.client(0);
    let mut meta = taskgate_tests::meta();
    meta["io.modelcontextprotocol/clientCapabilities"] = json!({
        "elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {"listChanged": true},
        "extensions": {"io.modelcontextprotocol/tasks": {}},
    });
    let reply = client.call("tools/call", json!({"name": "noop", "arguments": {}, "_meta": meta})).await;
    let task = reply.result()["taskId"].as_str().unwrap_or_else(|| panic!("a task: {}", reply.text)).to_owned();
    client.wait_for_status(&task, "completed", PATIENCE).await;
    let (encoding, bytes) = encoding_and_bytes(&stack, &TaskId::parse(&task).unwrap()).await;
    assert_eq!(encoding, "listpack", "the capabilities converted the record");
    assert!(bytes <= 600, "a completed no-op task's record takes {bytes} bytes");
}

#[tokio::test]
async fn a_worker_claims_the_capabilities_its_creator_declared() {
    let mut stack = Stack::builder().workers(0).spawn().await;
    // Publish the catalogue, then create with no worker running: the test claims the task.
    let w = stack.add_worker(&[]).await;
    stack.workers[w].kill().await;
    let store = stack.store();
    let client = stack.client(0);
    let declared = json!({
        "elicitation": {"form": {}},
        "extensions": {"io.modelcontextprotocol/tasks": {}, "x.example/other": {"on": true}}
    });
    let mut meta = taskgate_tests::meta();
    meta["io.modelcontextprotocol/clientCapabilities"] = declared.clone();
    let reply = client.call("tools/call", json!({ "name": "sleep", "arguments": {"ms": 1}, "_meta": meta })).await;
    let task = reply.result()["taskId"].as_str().unwrap_or_else(|| panic!("a task: {}", reply.text)).to_owned();
    let id = TaskId::parse(&task).unwrap();

    store.ensure_groups(id.shard() as u16 + 1, DEFAULT_POOL).await.unwrap();
    let mut reader = store.blocking_connection().await.unwrap();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let delivery = loop {
        let deliveries = store
            .read_deliveries(&mut reader, &[id.shard()], DEFAULT_POOL, "w-test", 10, Duration::from_millis(100))
            .await
            .unwrap();
        if let Some(delivery) = deliveries.into_iter().find(|d| d.task_id == id) {
            break delivery;
        }
        assert!(tokio::time::Instant::now() < deadline, "the task was not delivered");
    };
    let claim = store
        .claim(&mut delivery.clone(), DEFAULT_POOL, "w-test", Duration::from_secs(30))
        .await
        .unwrap()
        .expect("claimed");
    let claimed: Value = serde_json::from_str(&claim.client_capabilities).unwrap();
    assert_eq!(claimed, declared);
}

/// A key set aside beside a task's record (`outcome` or `args`): its value and when it expires,
/// and when the record expires (Unix ms; -1 for no expiry, -2 for no key). Absolute times, so
/// the two reads compare exactly however far apart they are taken.
async fn aside(stack: &Stack, id: &TaskId, which: fn(&TaskKeys) -> &String) -> (Option<String>, i64, i64) {
    let keys = stack.store().keys().task(id);
    let mut conn = stack.redis.connection().await;
    let value: Option<String> = redis::cmd("GET").arg(which(&keys)).query_async(&mut conn).await.unwrap();
    let expiry: i64 = redis::cmd("PEXPIRETIME").arg(which(&keys)).query_async(&mut conn).await.unwrap();
    let record_expiry: i64 = redis::cmd("PEXPIRETIME").arg(&keys.record).query_async(&mut conn).await.unwrap();
    (value, expiry, record_expiry)
}

fn outcome(keys: &TaskKeys) -> &String {
    &keys.outcome
}

fn args(keys: &TaskKeys) -> &String {
    &keys.args
}

/// Arguments, a result or an error longer than a compact value are each kept in a key of their
/// own, so the record stays a listpack; every reader (the worker's claim, `tasks/get`, the
/// service's read, the console) gets them back whole, and they expire with the record.
#[tokio::test]
async fn long_arguments_and_outcomes_are_kept_beside_a_compact_record() {
    let stack = Stack::builder().spawn().await;
    let client = stack.client(0);
    let padding = "y".repeat(100);
    let long = client.create_task("noop", json!({"bytes": 200, "padding": padding})).await;
    let failed = client.create_task("faulty", json!({"mode": "rpc_error"})).await;
    let short = client.create_task("noop", json!({})).await;

    let done = client.wait_for_status(&long, "completed", PATIENCE).await;
    assert_eq!(done["result"]["content"][0]["text"], "x".repeat(200), "{done}");
    let id = TaskId::parse(&long).unwrap();
    let (encoding, bytes) = encoding_and_bytes(&stack, &id).await;
    assert_eq!(encoding, "listpack", "the long result converted the record");
    assert!(bytes <= 600, "the record of a task with a 200-byte result takes {bytes} bytes");
    let (result, result_expiry, record_expiry) = aside(&stack, &id, outcome).await;
    assert!(result.as_deref().is_some_and(|o| o.contains(&"x".repeat(200))), "{result:?}");
    assert!(
        result_expiry > 0 && result_expiry <= record_expiry,
        "outcome expires at {result_expiry}, record at {record_expiry}"
    );
    // The claim read the arguments whole (the 200 bytes asked for came back, above).
    let (arguments, arguments_expiry, record_expiry) = aside(&stack, &id, args).await;
    assert!(arguments.as_deref().is_some_and(|a| a.contains(&padding)), "{arguments:?}");
    assert!(
        arguments_expiry > 0 && arguments_expiry <= record_expiry,
        "arguments expire at {arguments_expiry}, record at {record_expiry}"
    );
    // The service's own read (no poll marker) and the console's give it back too.
    let snapshot = stack.store().get_task(&id).await.unwrap().expect("the task");
    assert!(snapshot.result.expect("a result").get().contains(&"x".repeat(200)));
    let inspected = stack.store().inspect_task(&id).await.unwrap().expect("the task");
    assert!(inspected.record["result"].contains(&"x".repeat(200)), "{:?}", inspected.record);
    assert!(inspected.record["args"].contains(&padding), "{:?}", inspected.record);

    let ended = client.wait_for_status(&failed, "failed", PATIENCE).await;
    assert_eq!(ended["error"]["data"]["reason"], "demo", "{ended}");
    let failed_id = TaskId::parse(&failed).unwrap();
    assert_eq!(encoding_and_bytes(&stack, &failed_id).await.0, "listpack");
    assert!(aside(&stack, &failed_id, outcome).await.0.is_some(), "the error, over 64 bytes, is kept aside");

    // Short ones stay in the record, with no key beside it.
    client.wait_for_status(&short, "completed", PATIENCE).await;
    let short_id = TaskId::parse(&short).unwrap();
    assert_eq!(aside(&stack, &short_id, outcome).await.0, None);
    assert_eq!(aside(&stack, &short_id, args).await.0, None);
}
