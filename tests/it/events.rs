//! Task status changes as MCP Events (docs/events.md): the outbox the transition scripts append
//! to, through the real binaries.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;
use taskgate_shared::task::{Owner, TaskId};
use taskgate_tests::Stack;

const PATIENCE: Duration = Duration::from_secs(60);

/// The outbox itself: a task of a tenant with events on gets one entry per status change in
/// its owner's stream on its shard, written by the gateway's create and the worker's finish in
/// their own scripts; the record names it in `obx`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbox_entries_appear() {
    let stack = Stack::builder().gateway_args(&["--events", "--events-retention-ms", "60000"]).spawn().await;
    let client = stack.client(0);
    let store = stack.store();
    let id = client.create_task("sleep", json!({"ms": 0})).await;
    client.wait_for_status(&id, "completed", PATIENCE).await;
    let task = TaskId::parse(&id).unwrap();
    let owner =
        taskgate_shared::store::owner_digest(&Owner { tenant: "default".into(), principal: "anonymous".into() });
    let outbox = store.keys().outbox(task.shard(), &owner);
    let entries: Vec<(String, HashMap<String, String>)> =
        redis::cmd("XRANGE").arg(&outbox).arg("-").arg("+").query_async(&mut store.conn()).await.unwrap();
    let changes: Vec<(&str, &str, &str)> =
        entries.iter().map(|(_, f)| (f["t"].as_str(), f["s"].as_str(), f["v"].as_str())).collect();
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert_eq!((changes[0].0, changes[0].1, changes[0].2), (id.as_str(), "working", "1"));
    assert_eq!((changes[1].0, changes[1].1), (id.as_str(), "completed"));
    let obx: String = redis::cmd("HGET")
        .arg(store.keys().task(&task).record)
        .arg("obx")
        .query_async(&mut store.conn())
        .await
        .unwrap();
    assert_eq!(obx, format!("{owner} 60000 10000"));
    let ttl: i64 = redis::cmd("PTTL").arg(&outbox).query_async(&mut store.conn()).await.unwrap();
    assert!(ttl > 60_000 && ttl <= 120_000, "twice the retention: {ttl}");
}
