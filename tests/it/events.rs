//! Task status changes as MCP Events (docs/events.md): the outbox the transition scripts append
//! to, and `events/list` / `events/poll` / `events/stream` reading it, through the real binaries.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use sha2::Digest as _;
use taskgate_shared::store::{DEFAULT_POOL, OutboxLimits, Store, WORKER_GROUP};
use taskgate_shared::task::{Owner, TaskId};
use taskgate_tests::{McpClient, SseStream, Stack, Topology, eventually};

const PATIENCE: Duration = Duration::from_secs(60);
const NAME: &str = "taskgate.task.status";

/// One `events/poll` of the status type.
async fn poll(client: &McpClient, cursor: &Value, arguments: Value, max_events: Option<u64>) -> taskgate_tests::Reply {
    let mut params = json!({ "name": NAME, "arguments": arguments, "cursor": cursor });
    if let Some(n) = max_events {
        params["maxEvents"] = json!(n);
    }
    client.call("events/poll", params).await
}

/// Polls from `cursor` until `hasMore` is false; every event read, and the last cursor.
async fn drain(client: &McpClient, cursor: &Value, arguments: &Value) -> (Vec<Value>, Value) {
    let mut cursor = cursor.clone();
    let mut events = Vec::new();
    loop {
        let r = poll(client, &cursor, arguments.clone(), None).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let result = r.result();
        assert!(result["cursor"].is_string(), "{}", r.text);
        events.extend(result["events"].as_array().unwrap().iter().cloned());
        cursor = result["cursor"].clone();
        if result["hasMore"] != true {
            return (events, cursor);
        }
    }
}

/// A fresh cursor: "now".
async fn now_cursor(client: &McpClient) -> Value {
    let r = poll(client, &Value::Null, json!({}), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.result()["events"], json!([]), "{}", r.text);
    assert_eq!(r.result()["truncated"], false);
    r.result()["cursor"].clone()
}

/// Every outbox key in Redis.
async fn outbox_keys(store: &Store) -> Vec<String> {
    redis::cmd("KEYS").arg("*:outbox:*").query_async(&mut store.conn()).await.unwrap()
}

/// Task id -> its events' statuses in version order, after de-duplication by `eventId`; and
/// how many duplicates there were. Checks each occurrence's shape on the way.
fn by_task(events: &[Value]) -> (BTreeMap<String, Vec<(u64, String)>>, usize) {
    let mut seen = HashSet::new();
    let mut duplicates = 0;
    let mut tasks: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    for event in events {
        assert_eq!(event["name"], NAME, "{event}");
        let data = &event["data"];
        let (task, status, version) =
            (data["taskId"].as_str().unwrap(), data["status"].as_str().unwrap(), data["version"].as_u64().unwrap());
        let id = event["eventId"].as_str().unwrap();
        assert!(id.starts_with(&format!("{task}:{version}:")), "{event}");
        let ms: i64 = id.rsplit(':').next().unwrap().parse().unwrap();
        let at = taskgate_shared::task::parse_iso8601_ms(event["timestamp"].as_str().unwrap()).unwrap();
        assert_eq!(at as i64, ms, "the timestamp is the change's time: {event}");
        if !seen.insert(id.to_owned()) {
            duplicates += 1;
            continue;
        }
        tasks.entry(task.to_owned()).or_default().push((version, status.to_owned()));
    }
    for changes in tasks.values_mut() {
        let order: Vec<u64> = changes.iter().map(|(v, _)| *v).collect();
        changes.sort();
        let sorted: Vec<u64> = changes.iter().map(|(v, _)| *v).collect();
        assert_eq!(order, sorted, "a task's events arrive in version order");
    }
    (tasks, duplicates)
}

fn statuses(changes: &[(u64, String)]) -> Vec<&str> {
    changes.iter().map(|(_, s)| s.as_str()).collect()
}

fn approve() -> Value {
    json!({"approve_outline": {"action": "accept", "content": {"approved": true}}})
}

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

/// (a) About 200 tasks of four kinds through two gateways, a poller paging through the second
/// while they run: after de-duplication by `eventId`, each task's events are exactly the status
/// changes it went through, in version order, and a last poll from the last cursor is empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once() {
    let stack = Stack::builder()
        .gateways(2)
        .gateway_args(&["--events", "--tenant-rps", "0", "--tenant-create-rps", "0"])
        .worker_args(&["--concurrency", "4"])
        .spawn()
        .await;
    let (a, b) = (stack.client(0), stack.client(1));
    let start = now_cursor(&b).await;

    // The poller pages with its cursor while the tasks run, until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let poller = {
        let (b, stop, mut cursor) = (stack.client(1), stop.clone(), start.clone());
        tokio::spawn(async move {
            let mut events = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let (more, next) = drain(&b, &cursor, &json!({})).await;
                events.extend(more);
                cursor = next;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let (more, next) = drain(&b, &cursor, &json!({})).await;
            events.extend(more);
            (events, next)
        })
    };

    let client = |i: usize| if i.is_multiple_of(2) { &a } else { &b };
    let mut expected: HashMap<String, Vec<&str>> = HashMap::new();
    let mut quick = Vec::new();
    for i in 0..150 {
        quick.push(client(i).create_task("sleep", json!({"ms": 0})).await);
    }
    let mut reports = Vec::new();
    for i in 0..20 {
        reports.push(client(i).create_task("generate_report", json!({"size": "small"})).await);
    }
    // Four run at once; the rest wait queued: cancels end both kinds.
    let mut long = Vec::new();
    for i in 0..30 {
        long.push(client(i).create_task("sleep", json!({"ms": 600_000})).await);
    }
    for (i, id) in reports.iter().enumerate() {
        client(i).wait_for_status(id, "input_required", PATIENCE).await;
        let r = client(i + 1).update_task(id, approve()).await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    for (i, id) in long.iter().enumerate() {
        let r = client(i).cancel_task(id).await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    for (i, id) in quick.iter().enumerate() {
        client(i).wait_for_status(id, "completed", PATIENCE).await;
        expected.insert(id.clone(), vec!["working", "completed"]);
    }
    for (i, id) in reports.iter().enumerate() {
        client(i).wait_for_status(id, "completed", PATIENCE).await;
        expected.insert(id.clone(), vec!["working", "input_required", "working", "completed"]);
    }
    for (i, id) in long.iter().enumerate() {
        client(i).wait_for_status(id, "cancelled", PATIENCE).await;
        expected.insert(id.clone(), vec!["working", "cancelled"]);
    }
    stop.store(true, Ordering::Relaxed);
    let (events, last) = poller.await.unwrap();
    let (tasks, duplicates) = by_task(&events);
    println!("{} events read, {duplicates} duplicates", events.len());
    assert_eq!(tasks.len(), expected.len(), "every task and nothing else");
    for (id, want) in &expected {
        let got = tasks.get(id).unwrap_or_else(|| panic!("no events for {id}"));
        assert_eq!(statuses(got), *want, "{id}: {got:?}");
    }
    // Nothing after the last cursor, through either gateway.
    for client in [&a, &b] {
        let r = poll(client, &last, json!({}), None).await;
        assert_eq!(r.result()["events"], json!([]), "{}", r.text);
        assert_eq!((r.result()["hasMore"].clone(), r.result()["truncated"].clone()), (json!(false), json!(false)));
    }
    // The whole history again, from the first cursor, through the other gateway.
    let (again, _) = drain(&a, &start, &json!({})).await;
    let (replayed, _) = by_task(&again);
    assert_eq!(replayed, tasks, "a replay from the first cursor reads the same changes");
}

fn api_keys(stack: &Stack, keys: &[(&str, &str, &str)]) -> String {
    let file = stack.scratch_dir().join("api-keys");
    let hash = |key: &str| sha2::Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect::<String>();
    let lines: String = keys.iter().map(|(key, tenant, who)| format!("{} {tenant} {who}\n", hash(key))).collect();
    std::fs::write(&file, lines).unwrap();
    file.to_str().unwrap().to_owned()
}

taskgate_tests::on_topologies!([standalone: Standalone, cluster: Cluster] every_shard_is_read);

/// Tasks on many shards (on a Cluster, on every node): one poll reads each shard's outbox, and
/// pages of a few events at a time lose and repeat nothing.
async fn every_shard_is_read(topology: Topology) {
    let stack = topology.builder().gateway_args(&["--events"]).spawn().await;
    let client = stack.client(0);
    let start = now_cursor(&client).await;
    let mut ids = HashSet::new();
    for _ in 0..24 {
        ids.insert(client.create_task("sleep", json!({"ms": 0})).await);
    }
    let shards: HashSet<u8> = ids.iter().map(|id| TaskId::parse(id).unwrap().shard()).collect();
    assert!(shards.len() > 4, "spread over shards: {shards:?}");
    for id in &ids {
        client.wait_for_status(id, "completed", PATIENCE).await;
    }
    let mut cursor = start;
    let mut events = Vec::new();
    loop {
        let r = poll(&client, &cursor, json!({}), Some(5)).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let page = r.result()["events"].as_array().unwrap().clone();
        assert!(page.len() <= 5);
        events.extend(page);
        cursor = r.result()["cursor"].clone();
        if r.result()["hasMore"] != true {
            break;
        }
    }
    let (tasks, duplicates) = by_task(&events);
    assert_eq!(duplicates, 0);
    assert_eq!(tasks.keys().cloned().collect::<HashSet<_>>(), ids);
    assert!(tasks.values().all(|changes| statuses(changes) == ["working", "completed"]), "{tasks:?}");
}

/// (b) Principals A and B of one tenant, C of another: each reads only its own tasks' events;
/// `taskIds` naming another's tasks reads what a made-up id reads. `events/list` offers
/// webhooks with authentication on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_never() {
    let mut stack = Stack::builder().gateways(0).gateway_args(&["--events"]).spawn().await;
    let file = api_keys(&stack, &[("key-a", "acme", "alice"), ("key-b", "acme", "bob"), ("key-c", "globex", "carol")]);
    stack.add_gateway_with_auth(&["--auth", "api-keys", "--api-keys-file", &file]).await;
    let callers: Vec<McpClient> = ["key-a", "key-b", "key-c"].iter().map(|k| stack.client_as(0, k)).collect();
    let listed = callers[0].call("events/list", json!({})).await;
    assert_eq!(listed.result()["events"][0]["delivery"], json!(["poll", "push", "webhook"]), "{}", listed.text);
    let mut cursors = Vec::new();
    for caller in &callers {
        cursors.push(now_cursor(caller).await);
    }
    let mut owned: Vec<HashSet<String>> = vec![HashSet::new(); 3];
    for round in 0..5 {
        for (i, caller) in callers.iter().enumerate() {
            let id = caller.create_task("sleep", json!({"ms": round * 10})).await;
            owned[i].insert(id);
        }
    }
    for (i, caller) in callers.iter().enumerate() {
        for id in &owned[i] {
            caller.wait_for_status(id, "completed", PATIENCE).await;
        }
    }
    for (i, caller) in callers.iter().enumerate() {
        let (events, _) = drain(caller, &cursors[i], &json!({})).await;
        let (tasks, _) = by_task(&events);
        let seen: HashSet<String> = tasks.keys().cloned().collect();
        assert_eq!(seen, owned[i], "caller {i} reads exactly its own tasks");
    }
    // B names A's tasks, then C names them; then each names a made-up id: the same answers.
    let made_up = TaskId::generate(16).to_string();
    for intruder in [1, 2] {
        let theirs: Vec<&String> = owned[0].iter().collect();
        let foreign = poll(&callers[intruder], &cursors[intruder], json!({"taskIds": theirs}), None).await;
        let unknown = poll(&callers[intruder], &cursors[intruder], json!({"taskIds": [made_up]}), None).await;
        assert_eq!(foreign.status, unknown.status);
        let strip = |mut v: Value| {
            // The cursor carries the time of the read (the positions in it are the caller's
            // own), and the JSON-RPC id is the request's.
            v["result"].as_object_mut().unwrap().remove("cursor");
            v.as_object_mut().unwrap().remove("id");
            v
        };
        assert_eq!(strip(foreign.body.clone()), strip(unknown.body.clone()), "{} / {}", foreign.text, unknown.text);
        assert_eq!(foreign.body["result"]["events"], json!([]));
    }
}

/// (c) Cursor rules: null is now; `maxEvents` pages with `hasMore`; filters; a malformed cursor
/// is `-32602` and an unknown event name `-32023`, both with HTTP 200; discovery advertises the
/// extension, and `events/list` offers poll and push without authentication.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_rules() {
    let stack = Stack::builder().gateway_args(&["--events", "--events-poll-interval-ms", "1500"]).spawn().await;
    let client = stack.client(0);
    let discover = client.call("server/discover", json!({})).await;
    assert_eq!(discover.result()["capabilities"]["extensions"]["io.modelcontextprotocol/events"], json!({}));
    let listed = client.call("events/list", json!({})).await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    let descriptor = &listed.result()["events"][0];
    assert_eq!(descriptor["name"], NAME);
    assert_eq!(descriptor["delivery"], json!(["poll", "push"]), "no webhooks without authentication");

    let before = now_cursor(&client).await;
    let done = client.create_task("sleep", json!({"ms": 0})).await;
    client.wait_for_status(&done, "completed", PATIENCE).await;
    // Null is now: nothing that happened before.
    let r = poll(&client, &Value::Null, json!({}), None).await;
    assert_eq!(r.result()["events"], json!([]));
    assert_eq!(r.result()["nextPollMs"], 1500);
    // Paged one at a time.
    let first = poll(&client, &before, json!({}), Some(1)).await;
    assert_eq!(first.result()["events"].as_array().unwrap().len(), 1, "{}", first.text);
    assert_eq!(first.result()["events"][0]["data"]["status"], "working");
    assert_eq!(first.result()["hasMore"], true);
    let second = poll(&client, &first.result()["cursor"], json!({}), Some(1)).await;
    assert_eq!(second.result()["events"][0]["data"]["status"], "completed", "{}", second.text);
    let third = poll(&client, &second.result()["cursor"], json!({}), Some(1)).await;
    assert_eq!(third.result()["events"], json!([]));
    assert_eq!(third.result()["hasMore"], false);
    // Filters: by status, by task; a filtered-out entry still moves the cursor.
    let (ended, after) = drain(&client, &before, &json!({"statuses": ["completed"]})).await;
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0]["data"]["taskId"], done.as_str());
    let (none, _) = drain(&client, &after, &json!({})).await;
    assert_eq!(none, Vec::<Value>::new());
    let (mine, _) = drain(&client, &before, &json!({"taskIds": [done]})).await;
    assert_eq!(mine.len(), 2);
    // Refusals.
    for (params, code) in [
        (json!({"name": NAME, "cursor": "c1.!!"}), -32602),
        (json!({"name": NAME, "cursor": "not a cursor"}), -32602),
        (json!({"name": NAME, "cursor": 7}), -32602),
        (json!({"name": NAME, "arguments": {"taskIds": "x"}}), -32602),
        (json!({"name": NAME, "arguments": {"statuses": ["done"]}}), -32602),
        (json!({"name": NAME, "arguments": {"other": 1}}), -32602),
        (json!({"name": NAME, "arguments": {"taskIds": vec!["x"; 101]}}), -32602),
        (json!({"name": NAME, "maxEvents": 0}), -32602),
        (json!({"name": NAME, "maxAgeMs": -1}), -32602),
        (json!({"name": "mcp.something.else"}), -32023),
    ] {
        let r = client.call("events/poll", params.clone()).await;
        assert_eq!(r.status, 200, "{params}: {}", r.text);
        assert_eq!(r.error_code(), Some(code), "{params}: {}", r.text);
        if code == -32023 {
            assert_eq!(r.error()["data"]["kind"], "event");
        }
    }
}

/// (d) Gaps: a cursor older than twice the retention reads `truncated`, never an error (and a
/// stream from it opens with a truncated `active`); a fresh cursor on a quiet principal does
/// not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gaps() {
    let stack = Stack::builder().gateway_args(&["--events", "--events-retention-ms", "1000"]).spawn().await;
    let client = stack.client(0);
    let old = now_cursor(&client).await;
    let id = client.create_task("sleep", json!({"ms": 0})).await;
    client.wait_for_status(&id, "completed", PATIENCE).await;
    let fresh = poll(&client, &old, json!({}), None).await;
    assert_eq!(fresh.result()["truncated"], false, "{}", fresh.text);
    let drained = fresh.result()["cursor"].clone();
    eventually(PATIENCE, "a cursor older than twice the retention to read as a gap", || async {
        let r = poll(&client, &old, json!({}), None).await;
        assert_eq!(r.status, 200, "{}", r.text);
        (r.result()["truncated"] == true).then_some(())
    })
    .await;
    // A cursor renewed by polling never sees a false gap.
    let mut cursor = drained;
    for _ in 0..3 {
        let r = poll(&client, &cursor, json!({}), None).await;
        assert_eq!(r.result()["truncated"], false, "{}", r.text);
        cursor = r.result()["cursor"].clone();
    }
    // A stream from that cursor opens with `active` truncated, and a fresh cursor. (Whether a
    // poll from it is a gap again depends on whether the entries after it expired meanwhile,
    // which at this retention is a race; the unit tests of the merge hold where it points.)
    let (sid, mut stream) = open_stream(&client, &old, json!({})).await;
    let (method, params) = notice(&mut stream, &sid).await;
    assert_eq!(method, "notifications/events/active", "{params}");
    assert_eq!(params["truncated"], true, "{params}");
    assert!(params["cursor"].is_string() && params["cursor"] != old, "{params}");
    drop(stream);
}

/// (e) The reaper's reclaim of a task with an outbox (an expired lease with a cancel pending,
/// built by hand) writes its event, though the reaper does not know the owner: the script
/// names the outbox and the store sends it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaim_by_the_reaper_writes_its_event() {
    let mut stack = Stack::builder().workers(0).gateway_args(&["--events"]).spawn().await;
    let client = stack.client(0);
    let store = stack.store();
    let cursor = now_cursor(&client).await;
    // The gateway's caller without authentication.
    let owner = Owner { tenant: "default".into(), principal: "anonymous".into() };
    let id = TaskId::generate(16);
    let limits = OutboxLimits { retention_ms: 3_600_000, cap: 10_000 };
    store
        .create_task(taskgate_shared::store::NewTask {
            events: Some(limits),
            ..taskgate_tests::sleep_task(&id, &owner)
        })
        .await
        .unwrap();
    let stream = store.keys().task(&id).stream;
    let created: redis::RedisResult<()> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&stream)
        .arg(WORKER_GROUP)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut store.conn())
        .await;
    if let Err(err) = created {
        assert!(err.to_string().contains("BUSYGROUP"), "{err}");
    }
    let mut reader = store.blocking_connection().await.unwrap();
    let deliveries = store
        .read_deliveries(&mut reader, &[id.shard()], DEFAULT_POOL, "w-gone", 10, Duration::from_millis(100))
        .await
        .unwrap();
    let mut delivery = deliveries.into_iter().find(|d| d.task_id == id).expect("delivered");
    store.claim(&mut delivery, DEFAULT_POOL, "w-gone", Duration::from_millis(300)).await.unwrap().expect("claimed");
    // A cancel of a running task only flags it; its worker is gone, so the reaper ends it.
    assert_eq!(
        store.cancel_task(&id, &owner, "cancelled").await.unwrap(),
        taskgate_shared::store::CancelOutcome::Signalled
    );
    stack.add_worker(&["--lease-ms", "1000"]).await;
    let (events, _) = eventually(PATIENCE, "the reaper to end the task and write its event", || async {
        let (events, cursor) = drain(&client, &cursor, &json!({})).await;
        (events.len() == 2).then_some((events, cursor))
    })
    .await;
    let (tasks, _) = by_task(&events);
    assert_eq!(statuses(&tasks[id.as_str()]), ["working", "cancelled"]);
    let r = client.get_task(id.as_str()).await;
    assert_eq!(r.result()["status"], "cancelled");
}

/// (g) Events off: `events/*` is `-32601` like an unknown method, discovery does not offer
/// the extension, and no outbox key is ever written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_means_off() {
    let stack = Stack::builder().spawn().await;
    let client = stack.client(0);
    for method in ["events/list", "events/poll"] {
        let r = client.call(method, json!({ "name": NAME })).await;
        assert_eq!(r.error_code(), Some(-32601), "{method}: {}", r.text);
        let unknown = client.call("events/nothing", json!({})).await;
        assert_eq!((r.status, r.body["error"].clone()), (unknown.status, unknown.body["error"].clone()));
    }
    let discover = client.call("server/discover", json!({})).await;
    assert!(discover.result()["capabilities"]["extensions"].get("io.modelcontextprotocol/events").is_none());
    let done = client.create_task("sleep", json!({"ms": 0})).await;
    let report = client.create_task("generate_report", json!({})).await;
    client.wait_for_status(&report, "input_required", PATIENCE).await;
    client.update_task(&report, approve()).await;
    client.wait_for_status(&done, "completed", PATIENCE).await;
    client.wait_for_status(&report, "completed", PATIENCE).await;
    assert_eq!(outbox_keys(&stack.store()).await, Vec::<String>::new());
}

/// `--events-tenants`: a tenant not listed writes no outbox, and its polls read nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_listed_tenants_write_an_outbox() {
    let mut stack = Stack::builder().gateways(0).gateway_args(&["--events", "--events-tenants", "acme"]).spawn().await;
    let file = api_keys(&stack, &[("key-a", "acme", "alice"), ("key-c", "globex", "carol")]);
    stack.add_gateway_with_auth(&["--auth", "api-keys", "--api-keys-file", &file]).await;
    let (acme, globex) = (stack.client_as(0, "key-a"), stack.client_as(0, "key-c"));
    let (from_a, from_c) = (now_cursor(&acme).await, now_cursor(&globex).await);
    let a = acme.create_task("sleep", json!({"ms": 0})).await;
    let c = globex.create_task("sleep", json!({"ms": 0})).await;
    acme.wait_for_status(&a, "completed", PATIENCE).await;
    globex.wait_for_status(&c, "completed", PATIENCE).await;
    assert_eq!(drain(&acme, &from_a, &json!({})).await.0.len(), 2);
    assert_eq!(drain(&globex, &from_c, &json!({})).await.0.len(), 0);
    let acme_digest = taskgate_shared::store::owner_digest(&Owner { tenant: "acme".into(), principal: "alice".into() });
    let keys = outbox_keys(&stack.store()).await;
    assert!(!keys.is_empty() && keys.iter().all(|k| k.ends_with(&acme_digest)), "{keys:?}");
}

/// Opens an `events/stream` of the status type: an SSE stream, and the request's id.
async fn open_stream(client: &McpClient, cursor: &Value, arguments: Value) -> (Value, SseStream) {
    let params = json!({ "name": NAME, "arguments": arguments, "cursor": cursor });
    let (request, stream) = client.open_stream("events/stream", params).await;
    assert_eq!(stream.status, 200);
    let content_type = stream.headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("");
    assert!(content_type.starts_with("text/event-stream"), "{content_type}");
    (request["id"].clone(), stream)
}

/// The stream's next notification (method, params), checked to name the stream's request id.
async fn notice(stream: &mut SseStream, id: &Value) -> (String, Value) {
    let message = stream.next_message(PATIENCE).await.expect("a notification before the stream ends");
    assert_eq!(message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], *id, "{message}");
    (message["method"].as_str().unwrap_or_default().to_owned(), message["params"].clone())
}

/// The stream's `active` notification: its cursor, checked not truncated.
async fn active(stream: &mut SseStream, id: &Value) -> Value {
    let (method, params) = notice(stream, id).await;
    assert_eq!(method, "notifications/events/active", "{params}");
    assert_eq!(params["truncated"], false, "{params}");
    assert!(params["cursor"].is_string(), "{params}");
    params["cursor"].clone()
}

/// Events off the stream (heartbeats passed over, anything else refused) until `enough` holds
/// for those read so far.
async fn events_until(stream: &mut SseStream, id: &Value, enough: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let mut events = Vec::new();
    while !enough(&events) {
        let (method, params) = notice(stream, id).await;
        match method.as_str() {
            "notifications/events/event" => {
                assert!(params["cursor"].is_string(), "every event carries its cursor: {params}");
                events.push(params);
            }
            "notifications/events/heartbeat" => assert!(params["cursor"].is_string(), "{params}"),
            _ => panic!("unexpected {method}: {params}"),
        }
    }
    events
}

/// `(taskId, status)` of each event, in the order they came.
fn changes(events: &[Value]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| (e["data"]["taskId"].as_str().unwrap().to_owned(), e["data"]["status"].as_str().unwrap().to_owned()))
        .collect()
}

fn has(events: &[Value], task: &str, status: &str) -> bool {
    events.iter().any(|e| e["data"]["taskId"] == task && e["data"]["status"] == status)
}

/// Push: `active` first, then the backlog from the cursor, then live events, of the caller's
/// own tasks only (another principal's of the same tenant never appear), in order; every
/// event's cursor resumes a poll exactly after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_sends_active_backlog_then_live_events_of_its_own() {
    let mut stack = Stack::builder().gateways(0).gateway_args(&["--events"]).spawn().await;
    let file = api_keys(&stack, &[("key-a", "acme", "alice"), ("key-b", "acme", "bob")]);
    stack.add_gateway_with_auth(&["--auth", "api-keys", "--api-keys-file", &file]).await;
    let (alice, bob) = (stack.client_as(0, "key-a"), stack.client_as(0, "key-b"));
    let start = now_cursor(&alice).await;
    let before = alice.create_task("sleep", json!({"ms": 0})).await;
    let theirs = bob.create_task("sleep", json!({"ms": 0})).await;
    alice.wait_for_status(&before, "completed", PATIENCE).await;
    bob.wait_for_status(&theirs, "completed", PATIENCE).await;

    let (id, mut stream) = open_stream(&alice, &start, json!({})).await;
    let opened_at = active(&mut stream, &id).await;
    let backlog = events_until(&mut stream, &id, |e| e.len() == 2).await;
    assert_eq!(
        changes(&backlog),
        [(before.clone(), "working".to_owned()), (before.clone(), "completed".to_owned())],
        "the backlog, in order"
    );

    // Live: the other principal's task ends first, then the caller's; only the caller's comes.
    let theirs_live = bob.create_task("sleep", json!({"ms": 0})).await;
    bob.wait_for_status(&theirs_live, "completed", PATIENCE).await;
    let created = tokio::time::Instant::now();
    let live = alice.create_task("sleep", json!({"ms": 0})).await;
    let later = events_until(&mut stream, &id, |e| has(e, &live, "completed")).await;
    let took = created.elapsed();
    assert!(took < Duration::from_secs(5), "woken by the change, not read by the 10 s backstop: {took:?}");
    assert_eq!(changes(&later), [(live.clone(), "working".to_owned()), (live.clone(), "completed".to_owned())]);
    let all: Vec<Value> = backlog.iter().chain(&later).cloned().collect();
    let (tasks, duplicates) = by_task(&all);
    assert_eq!(duplicates, 0);
    assert_eq!(tasks.keys().cloned().collect::<HashSet<_>>(), HashSet::from([before.clone(), live.clone()]));

    // Cursors: `active`'s reads the whole backlog and what followed; each event's, exactly what
    // followed it; the last one's, nothing.
    let (from_active, _) = drain(&alice, &opened_at, &json!({})).await;
    assert_eq!(changes(&from_active), changes(&all), "the active cursor is the stream's start");
    for (i, event) in all.iter().enumerate() {
        let (after, _) = drain(&alice, &event["cursor"], &json!({})).await;
        assert_eq!(changes(&after), changes(&all[i + 1..]), "after event {i}: {}", event["cursor"]);
    }
    let last = poll(&alice, &all[3]["cursor"], json!({}), None).await;
    assert_eq!(last.result()["events"], json!([]), "{}", last.text);
    assert_eq!((last.result()["hasMore"].clone(), last.result()["truncated"].clone()), (json!(false), json!(false)));
}

taskgate_tests::on_topologies!([standalone: Standalone, cluster: Cluster] stream_across_replicas_and_a_lost_subscription);

/// Push across replicas: a stream on one gateway gets the events of tasks created through
/// another (the change messages come over Redis pub/sub), and killing every pub/sub connection
/// loses none (the resubscription re-reads every shard).
async fn stream_across_replicas_and_a_lost_subscription(topology: Topology) {
    let stack = topology.builder().gateways(2).gateway_args(&["--events"]).spawn().await;
    let (a, b) = (stack.client(0), stack.client(1));
    let (id, mut stream) = open_stream(&b, &Value::Null, json!({})).await;
    active(&mut stream, &id).await;
    let first = a.create_task("sleep", json!({"ms": 0})).await;
    let seen = events_until(&mut stream, &id, |e| has(e, &first, "completed")).await;
    assert_eq!(changes(&seen), [(first.clone(), "working".to_owned()), (first.clone(), "completed".to_owned())]);

    let mut killed = 0;
    for node in std::iter::once(&stack.redis).chain(&stack.cluster_nodes) {
        let mut conn = node.connection().await;
        let n: i64 = redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub").query_async(&mut conn).await.unwrap();
        killed += n;
    }
    assert!(killed >= 2, "both gateways' subscriptions were killed: {killed}");
    let mut created = Vec::new();
    for _ in 0..5 {
        created.push(a.create_task("sleep", json!({"ms": 0})).await);
    }
    let seen = events_until(&mut stream, &id, |e| created.iter().all(|t| has(e, t, "completed"))).await;
    let (tasks, duplicates) = by_task(&seen);
    assert_eq!(duplicates, 0, "no event twice");
    assert_eq!(tasks.keys().cloned().collect::<HashSet<_>>(), created.iter().cloned().collect());
    assert!(tasks.values().all(|c| statuses(c) == ["working", "completed"]), "{tasks:?}");
}

/// Stream rules: an invalid subscription is the error a poll gives, with no stream; a quiet
/// stream sends heartbeats with a cursor that a poll accepts; a stream holds a listen slot
/// (the per-principal share counts both kinds); shutdown ends it with the empty result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_rules_heartbeat_slots_and_shutdown() {
    let mut stack = Stack::builder()
        .gateway_args(&["--events", "--events-heartbeat-ms", "200", "--listen-max-streams-per-principal", "1"])
        .spawn()
        .await;
    let client = stack.client(0);
    for (params, code) in [
        (json!({"name": "mcp.something.else"}), -32023),
        (json!({"name": NAME, "cursor": "c1.!!"}), -32602),
        (json!({"name": NAME, "arguments": {"statuses": ["done"]}}), -32602),
        (json!({"name": NAME, "maxAgeMs": -1}), -32602),
    ] {
        let streamed = client.call("events/stream", params.clone()).await;
        let polled = client.call("events/poll", params.clone()).await;
        assert_eq!((streamed.status, streamed.error_code()), (200, Some(code)), "{params}: {}", streamed.text);
        assert_eq!(streamed.body["error"], polled.body["error"], "{params}: the error a poll gives");
        assert!(streamed.header("content-type").is_some_and(|c| c.starts_with("application/json")), "no stream");
    }

    let (id, mut stream) = open_stream(&client, &Value::Null, json!({})).await;
    let opened_at = active(&mut stream, &id).await;
    // Quiet: heartbeats, each with a cursor a poll reads from without a gap.
    let mut heartbeats = 0;
    while heartbeats < 2 {
        let (method, params) = notice(&mut stream, &id).await;
        assert_eq!(method, "notifications/events/heartbeat", "{params}");
        let r = poll(&client, &params["cursor"], json!({}), None).await;
        assert_eq!((r.result()["events"].clone(), r.result()["truncated"].clone()), (json!([]), json!(false)));
        heartbeats += 1;
    }
    let r = poll(&client, &opened_at, json!({}), None).await;
    assert_eq!(r.result()["events"], json!([]), "{}", r.text);

    // The principal's one slot is taken: another stream of either kind is 429.
    for (method, params) in
        [("events/stream", json!({"name": NAME})), ("subscriptions/listen", json!({"notifications": {"taskIds": []}}))]
    {
        let r = client.call(method, params).await;
        assert_eq!((r.status, r.error_code()), (429, Some(-31429)), "{method}: {}", r.text);
        assert_eq!(r.body["error"]["data"]["limit"], "listen_streams");
    }

    stack.gateways[0].signal("TERM");
    loop {
        let message = stream.next_message(PATIENCE).await.expect("the result before the end");
        if message.get("result").is_some() {
            assert_eq!(message["id"], id);
            assert_eq!(message["result"]["resultType"], "complete", "{message}");
            assert_eq!(message["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"], id, "{message}");
            break;
        }
        assert_eq!(message["method"], "notifications/events/heartbeat", "{message}");
    }
    assert_eq!(stack.gateways[0].wait_exit(PATIENCE).await, Some(0));
}

/// A freed slot: a stream that ends frees its listen slot for the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stream_frees_its_slot() {
    let stack = Stack::builder().gateway_args(&["--events", "--listen-max-streams-per-principal", "1"]).spawn().await;
    let client = stack.client(0);
    let (id, mut stream) = open_stream(&client, &Value::Null, json!({})).await;
    active(&mut stream, &id).await;
    drop(stream);
    eventually(PATIENCE, "the slot of a dropped stream to be free", || async {
        let (request, mut next) = client.open_stream("events/stream", json!({ "name": NAME })).await;
        if next.status != 200 {
            return None;
        }
        Some(active(&mut next, &request["id"]).await)
    })
    .await;
}

/// An early `events/poll` (from the cursor the caller's last answer returned, sooner than the
/// tolerance) is held: to the end of `nextPollMs` while nothing happens, and only until the
/// change when one of the caller's tasks changes. A poll from another cursor is not held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_poll_is_held_until_an_event_or_the_interval() {
    use taskgate_tests::Scrape;
    let stack = Stack::builder()
        .gateway_option("--poll-tolerance", "0.5")
        .gateway_args(&["--events", "--events-poll-interval-ms", "3000"])
        .spawn()
        .await;
    let client = stack.client(0);
    let metrics = format!("{}/metrics", client.base());
    let held = || async { Scrape::of(&metrics).await.get("taskgate_gateway_held_polls_total", &[("outcome", "held")]) };
    // The gateway's pub/sub subscription, once made, forgets what was answered before it (a
    // change may have been missed): until then a poll may be read at once.
    let (cursor, waited) = eventually(PATIENCE, "an early poll to be held", || async {
        let cursor = now_cursor(&client).await;
        let started = tokio::time::Instant::now();
        let quiet = poll(&client, &cursor, json!({}), None).await;
        assert_eq!(quiet.result()["events"], json!([]), "{}", quiet.text);
        (held().await >= 1.0).then(|| (cursor, started.elapsed()))
    })
    .await;
    assert!(waited >= Duration::from_secs(2), "held to the interval since the last answer: {waited:?}");
    assert!(waited < Duration::from_secs(20), "{waited:?}");
    assert_eq!(held().await, 1.0);
    // A replay from another cursor (the first one again) is read at once.
    let started = tokio::time::Instant::now();
    let replay = poll(&client, &cursor, json!({}), None).await;
    assert_eq!(held().await, 1.0, "not held: {:?}", started.elapsed());

    // From the cursor the last answer returned, again early: held until the change.
    let next = replay.result()["cursor"].clone();
    let waiting = {
        let client = stack.client(0);
        tokio::spawn(async move { poll(&client, &next, json!({}), None).await })
    };
    // Only once the poll is held does the task change.
    eventually(PATIENCE, "the poll to be held", || async { (held().await >= 2.0).then_some(()) }).await;
    let changed = tokio::time::Instant::now();
    let id = client.create_task("sleep", json!({"ms": 0})).await;
    let woken = waiting.await.unwrap();
    let after = changed.elapsed();
    assert_eq!(woken.result()["events"][0]["data"]["taskId"], id.as_str(), "{}", woken.text);
    assert!(after < Duration::from_secs(2), "answered on the change, not at the interval: {after:?}");
    let woken_count = Scrape::of(&metrics).await.get("taskgate_gateway_held_polls_total", &[("outcome", "woken")]);
    assert_eq!(woken_count, 1.0);
}

/// Redis lost under an open stream: one `notifications/events/error` (a recoverable failure:
/// the stream stays open and heartbeats go on), and once Redis is back a new task's events
/// arrive on the same stream.
#[tokio::test]
async fn a_stream_reports_a_lost_store_and_carries_on() {
    let mut stack = Stack::builder().gateway_args(&["--events", "--events-heartbeat-ms", "200"]).spawn().await;
    let client = stack.client(0);
    let (id, mut stream) = open_stream(&client, &Value::Null, json!({})).await;
    active(&mut stream, &id).await;
    stack.redis.kill().await;
    loop {
        let (method, params) = notice(&mut stream, &id).await;
        match method.as_str() {
            "notifications/events/heartbeat" => {}
            "notifications/events/error" => {
                assert_eq!(params["error"]["code"], -32603, "{params}");
                break;
            }
            other => panic!("{other} while Redis is down: {params}"),
        }
    }
    stack.redis.restart().await;
    let task = eventually(PATIENCE, "a task created once Redis is back", || async {
        let r = client.call("tools/call", json!({ "name": "sleep", "arguments": { "ms": 0 } })).await;
        (r.body["result"]["resultType"] == "task").then(|| r.result()["taskId"].as_str().unwrap().to_owned())
    })
    .await;
    loop {
        let (method, params) = notice(&mut stream, &id).await;
        match method.as_str() {
            "notifications/events/heartbeat" | "notifications/events/active" => {}
            "notifications/events/event" if params["data"]["taskId"] == task.as_str() => break,
            "notifications/events/event" => {}
            other => panic!("{other} once Redis is back: {params}"),
        }
    }
}
