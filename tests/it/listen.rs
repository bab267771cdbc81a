//! `subscriptions/listen` with `notifications/tasks` across replicas, on a standalone server and on a
//! Cluster over mutual TLS (sharded pub/sub).

use std::time::Duration;

use serde_json::{Value, json};
use taskgate_shared::protocol::sse;
use taskgate_shared::task::{Owner, TaskId};
use taskgate_tests::{McpClient, SseItem, SseStream, Topology, meta_without_tasks};

const PATIENCE: Duration = Duration::from_secs(15);

// On a standalone server and on a Cluster over mutual TLS, where task events use sharded pub/sub.
taskgate_tests::on_topologies!(
    [standalone: Standalone, cluster_tls: ClusterTls]
    a_listener_on_another_replica_sees_every_transition,
    unknown_and_foreign_ids_are_dropped_from_the_acknowledgement,
    a_late_subscriber_still_gets_the_terminal_snapshot,
    killing_the_pubsub_connection_loses_no_transition,
    a_slow_reader_still_gets_the_newest_and_terminal_snapshots,
    listen_rules_and_limits,
);

async fn listen(client: &McpClient, ids: &[&str]) -> (Value, SseStream) {
    client.open_stream("subscriptions/listen", json!({"notifications": {"taskIds": ids}})).await
}

/// The params of a `notifications/tasks` message, checked for the subscription id, with the
/// sequence number and version (checked for their type) taken out of its `_meta`.
fn snapshot(message: &Value, subscription: &Value) -> Value {
    numbered(message, subscription).0
}

/// [`snapshot`], with the notification's `io.taskgate/seq` and `io.taskgate/version`.
fn numbered(message: &Value, subscription: &Value) -> (Value, u64, u64) {
    assert_eq!(message["method"], "notifications/tasks", "{message}");
    assert!(message.get("id").is_none());
    let mut params = message["params"].clone();
    let meta = params["_meta"].as_object_mut().expect("a _meta");
    let seq = meta.remove("io.taskgate/seq").and_then(|s| s.as_u64()).expect("a numeric io.taskgate/seq");
    let version = meta.remove("io.taskgate/version").and_then(|v| v.as_u64()).expect("a numeric io.taskgate/version");
    assert_eq!(params["_meta"], json!({"io.modelcontextprotocol/subscriptionId": subscription}));
    assert!(params.get("resultType").is_none());
    (params, seq, version)
}

/// `tasks/get`'s result in the form a notification carries it.
async fn as_notified(client: &McpClient, task_id: &str, subscription: &Value) -> Value {
    let mut result = client.get_task(task_id).await.result().clone();
    let fields = result.as_object_mut().unwrap();
    fields.remove("resultType");
    fields.insert("_meta".into(), json!({"io.modelcontextprotocol/subscriptionId": subscription}));
    result
}

fn assert_closing_result(message: &Value, subscription: &Value) {
    assert_eq!(
        message,
        &json!({"jsonrpc": "2.0", "id": subscription, "result": {
            "resultType": "complete", "_meta": {"io.modelcontextprotocol/subscriptionId": subscription}}})
    );
}

/// Reads snapshots until one has `status`, collecting the statuses seen.
async fn until_status(stream: &mut SseStream, subscription: &Value, status: &str, seen: &mut Vec<String>) -> Value {
    loop {
        let message = stream.next_message(PATIENCE).await.expect("the stream stays open");
        let params = snapshot(&message, subscription);
        let current = params["status"].as_str().unwrap().to_owned();
        if seen.last() != Some(&current) {
            seen.push(current.clone());
        }
        if current == status {
            return params;
        }
    }
}

async fn a_listener_on_another_replica_sees_every_transition(topology: Topology) {
    let mut stack = topology.builder().gateways(2).workers(0).spawn().await;
    // Publish the catalogue, then let the test pace the worker so every state lasts long
    // enough to be seen.
    let w = stack.add_worker(&[]).await;
    stack.workers[w].kill().await;
    let (a, b) = (stack.client(0), stack.client(1));
    let task_id = a.create_task("generate_report", json!({"size": "small"})).await;

    let (request, mut stream) = listen(&b, &[&task_id]).await;
    let subscription = request["id"].clone();
    assert_eq!(stream.status, 200);
    assert_eq!(stream.headers.get("content-type").unwrap(), "text/event-stream");
    assert_eq!(stream.headers.get("cache-control").unwrap(), "no-cache");
    assert_eq!(stream.headers.get("x-accel-buffering").unwrap(), "no");

    let ack = stream.next_message(PATIENCE).await.unwrap();
    assert_eq!(
        ack,
        json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": {
            "notifications": {"taskIds": [task_id]},
            "_meta": {"io.modelcontextprotocol/subscriptionId": subscription}}})
    );
    let mut seen = Vec::new();
    let first = until_status(&mut stream, &subscription, "working", &mut seen).await;
    assert_eq!(first, as_notified(&b, &task_id, &subscription).await, "a snapshot is what tasks/get returns");

    stack.workers[w].restart().await;
    let parked = until_status(&mut stream, &subscription, "input_required", &mut seen).await;
    assert_eq!(parked, as_notified(&b, &task_id, &subscription).await);
    stack.workers[w].kill().await;

    let r =
        a.update_task(&task_id, json!({"approve_outline": {"action": "accept", "content": {"approved": true}}})).await;
    assert_eq!(r.result()["resultType"], "complete");
    until_status(&mut stream, &subscription, "working", &mut seen).await;

    stack.workers[w].restart().await;
    let done = until_status(&mut stream, &subscription, "completed", &mut seen).await;
    assert_eq!(done, as_notified(&b, &task_id, &subscription).await);
    assert_eq!(seen, ["working", "input_required", "working", "completed"]);

    let last = stream.next_message(PATIENCE).await.unwrap();
    assert_closing_result(&last, &subscription);
    assert_eq!(stream.next_message(PATIENCE).await, None, "the stream ends after the result");
    assert!(stream.events.iter().all(|e| e.id.is_none() && e.event.is_none()), "no ids, no replay");
}

async fn unknown_and_foreign_ids_are_dropped_from_the_acknowledgement(topology: Topology) {
    let stack = topology.builder().spawn().await;
    let client = stack.client(0);
    let mine = client.create_task("generate_report", json!({})).await;
    let owner = Owner { tenant: "acme".into(), principal: "mallory".into() };
    let foreign = taskgate_tests::write_task(&stack.store(), &owner).await;
    let unknown = TaskId::generate(16);
    let ids = [unknown.as_str(), foreign.as_str(), "not-an-id", mine.as_str(), mine.as_str()];
    let (request, mut stream) = listen(&client, &ids).await;
    let ack = stream.next_message(PATIENCE).await.unwrap();
    assert_eq!(ack["params"]["notifications"], json!({"taskIds": [mine]}));
    let first = stream.next_message(PATIENCE).await.unwrap();
    assert_eq!(snapshot(&first, &request["id"])["taskId"], mine.as_str());
    client.cancel_task(&mine).await;
    // Nothing about the foreign task ever appears; the stream ends when `mine` is terminal.
    loop {
        let message = stream.next_message(PATIENCE).await.unwrap();
        if message.get("result").is_some() {
            assert_closing_result(&message, &request["id"]);
            break;
        }
        assert_eq!(snapshot(&message, &request["id"])["taskId"], mine.as_str());
    }

    // Nothing accepted: acknowledged empty, then closed at once.
    let (request, mut stream) = listen(&client, &[foreign.as_str()]).await;
    assert_eq!(stream.next_message(PATIENCE).await.unwrap()["params"]["notifications"], json!({"taskIds": []}));
    assert_closing_result(&stream.next_message(PATIENCE).await.unwrap(), &request["id"]);
}

async fn a_late_subscriber_still_gets_the_terminal_snapshot(topology: Topology) {
    let stack = topology.builder().spawn().await;
    let client = stack.client(0);
    let task_id = client.create_task("sleep", json!({"ms": 0})).await;
    client.wait_for_status(&task_id, "completed", PATIENCE).await;
    // A numeric listen id keeps its JSON type in every subscriptionId.
    let body = json!({"jsonrpc": "2.0", "id": 4242, "method": "subscriptions/listen",
                      "params": {"notifications": {"taskIds": [task_id]}, "_meta": taskgate_tests::meta()}});
    let mut request = client.http().post(client.url()).body(body.to_string());
    for (name, value) in taskgate_tests::standard_headers(&body) {
        request = request.header(name, value);
    }
    let text = request.send().await.unwrap().text().await.unwrap();
    let messages: Vec<Value> = sse::data_of(text.as_bytes()).iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    assert_eq!(messages.len(), 3, "{text}");
    assert_eq!(messages[0]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 4242);
    let terminal = snapshot(&messages[1], &json!(4242));
    assert_eq!(terminal["status"], "completed");
    assert_eq!(taskgate_tests::result_token(&terminal), taskgate_tests::record_fence(&stack.store(), &task_id).await);
    assert_closing_result(&messages[2], &json!(4242));
}

async fn killing_the_pubsub_connection_loses_no_transition(topology: Topology) {
    let stack = topology.builder().gateways(2).spawn().await;
    let (a, b) = (stack.client(0), stack.client(1));
    let task_id = a.create_task("dual_approval", json!({"change": "x"})).await;
    a.wait_for_status(&task_id, "input_required", PATIENCE).await;
    let (request, mut stream) = listen(&b, &[&task_id]).await;
    let subscription = request["id"].clone();
    stream.next_message(PATIENCE).await.unwrap();
    let mut seen = Vec::new();
    until_status(&mut stream, &subscription, "input_required", &mut seen).await;

    let mut killed = 0;
    for node in std::iter::once(&stack.redis).chain(&stack.cluster_nodes) {
        let mut conn = node.connection().await;
        let n: i64 = redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub").query_async(&mut conn).await.unwrap();
        killed += n;
    }
    assert!(killed >= 2, "both gateways' subscriptions (and the worker's) were killed: {killed}");
    let accept = json!({"action": "accept", "content": {"approved": true}});
    a.update_task(&task_id, json!({"legal_approval": accept, "finance_approval": accept})).await;

    let done = until_status(&mut stream, &subscription, "completed", &mut seen).await;
    assert_eq!(done["result"]["structuredContent"]["legal"], true);
    assert_closing_result(&stream.next_message(PATIENCE).await.unwrap(), &subscription);
}

async fn a_slow_reader_still_gets_the_newest_and_terminal_snapshots(topology: Topology) {
    let stack = topology.builder().spawn().await;
    let client = stack.client(0);
    let task_id = client.create_task("dual_approval", json!({"change": "y"})).await;
    client.wait_for_status(&task_id, "input_required", PATIENCE).await;
    let (request, mut stream) = listen(&client, &[&task_id]).await;
    let subscription = request["id"].clone();
    // Read nothing while the task moves through several versions to its end.
    let accept = json!({"action": "accept", "content": {"approved": true}});
    client.update_task(&task_id, json!({"legal_approval": accept})).await;
    client.update_task(&task_id, json!({"finance_approval": accept})).await;
    client.wait_for_status(&task_id, "completed", PATIENCE).await;

    let mut versions = Vec::new();
    let mut last = None;
    loop {
        let message = stream.next_message(PATIENCE).await.unwrap();
        if message["method"] == "notifications/subscriptions/acknowledged" {
            continue;
        }
        if message.get("result").is_some() {
            assert_closing_result(&message, &subscription);
            break;
        }
        let params = snapshot(&message, &subscription);
        versions.push(params["lastUpdatedAt"].as_str().unwrap().to_owned());
        last = Some(params);
    }
    assert_eq!(last.unwrap()["status"], "completed");
    let mut sorted = versions.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(versions, sorted, "no duplicate or out-of-order snapshots");
}

async fn listen_rules_and_limits(topology: Topology) {
    let mut stack = topology
        .builder()
        .gateway_args(&[
            "--listen-max-task-ids",
            "2",
            "--listen-max-streams-per-principal",
            "1",
            "--sse-keepalive-ms",
            "200",
        ])
        .spawn()
        .await;
    let client = stack.client(0);
    let r = client
        .call("subscriptions/listen", json!({"notifications": {"taskIds": []}, "_meta": meta_without_tasks()}))
        .await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32021)));
    let r = client.call("subscriptions/listen", json!({"notifications": {"taskIds": ["a", "b", "c"]}})).await;
    assert_eq!(r.body["error"]["message"], "at most 2 taskIds per listen");
    let r = client.call("subscriptions/listen", json!({"notifications": {"taskIds": [1]}})).await;
    assert_eq!(r.body["error"]["message"], "taskIds must be an array of strings");
    let r = client.call("subscriptions/listen", json!({})).await;
    assert_eq!(r.body["error"]["message"], "notifications must be an object");

    let task_id = client.create_task("sleep", json!({"ms": 60_000})).await;
    let (request, mut stream) = listen(&client, &[&task_id]).await;
    // A second stream for the same principal is over the cap: a matter of load, answered 429.
    let r = client.call("subscriptions/listen", json!({"notifications": {"taskIds": [task_id]}})).await;
    assert_eq!((r.status, r.error_code()), (429, Some(-31429)), "{}", r.text);
    assert_eq!(r.body["error"]["data"]["limit"], "listen_streams");
    assert!(r.header("retry-after").is_some());

    // Idle streams carry keep-alive comments.
    let mut comments = 0;
    while comments == 0 {
        if let Some(SseItem::Comment(_)) = stream.next_item(Duration::from_secs(5)).await {
            comments += 1;
        }
    }

    // Shutdown ends the stream with its graceful result, and the gateway exits.
    stack.gateways[0].signal("TERM");
    loop {
        let message = stream.next_message(PATIENCE).await.expect("the result before the end");
        if message.get("result").is_some() {
            assert_closing_result(&message, &request["id"]);
            break;
        }
    }
    assert_eq!(stack.gateways[0].wait_exit(PATIENCE).await, Some(0));
}

/// At the default per-principal cap (a quarter of `--listen-max-streams`), one principal that
/// opens more than its share is refused 429 while another still gets a stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_principal_cannot_take_every_stream() {
    use sha2::Digest as _;
    let mut stack = taskgate_tests::Stack::builder().gateways(0).spawn().await;
    let file = stack.scratch_dir().join("api-keys");
    let hash = |key: &str| sha2::Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect::<String>();
    std::fs::write(&file, format!("{} acme alice\n{} acme bob\n", hash("key-alice"), hash("key-bob"))).unwrap();
    let auth = ["--auth", "api-keys", "--api-keys-file", file.to_str().unwrap(), "--listen-max-streams", "8"];
    stack.add_gateway_with_auth(&auth).await;
    let (alice, bob) = (stack.client_as(0, "key-alice"), stack.client_as(0, "key-bob"));
    let task_id = alice.create_task("sleep", json!({"ms": 60_000})).await;
    let mut open = Vec::new();
    for _ in 0..2 {
        let (_, stream) = listen(&alice, &[&task_id]).await;
        assert_eq!(stream.status, 200);
        open.push(stream);
    }
    let r = alice.call("subscriptions/listen", json!({"notifications": {"taskIds": [task_id]}})).await;
    assert_eq!((r.status, r.error_code()), (429, Some(-31429)), "a third of eight is over a quarter: {}", r.text);
    assert_eq!(r.body["error"]["data"]["limit"], "listen_streams");
    let theirs = bob.create_task("sleep", json!({"ms": 60_000})).await;
    let (_, mut stream) = listen(&bob, &[&theirs]).await;
    assert_eq!(stream.status, 200, "another principal still gets a stream");
    assert_eq!(stream.next_message(PATIENCE).await.unwrap()["params"]["notifications"]["taskIds"], json!([theirs]));
}

/// The default share as an outside check meets it: `--auth none` (every caller is the one
/// principal `anonymous`) and a small `--listen-max-streams` (40) whose per-principal cap is
/// left to the default computation (a quarter: 10, which the gateway logs at start). The
/// principal holds 10 streams over one HTTP/2 connection; an 11th is refused 429 on that
/// connection and on a new HTTP/1.1 one alike (the count is the principal's, not a
/// connection's); the replica counts 10 open; and a stream that ends frees its slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_default_share_one_principal_holds_a_quarter_of_the_streams_on_any_connection() {
    use taskgate_tests::{Scrape, eventually};
    let mut stack = taskgate_tests::Stack::builder().gateways(0).spawn().await;
    stack.add_gateway(&["--listen-max-streams", "40"]).await;
    let started = stack.gateways[0].log();
    assert!(
        started.contains(r#""listen_max_streams":40"#) && started.contains(r#""listen_max_streams_per_principal":10"#),
        "the caps in effect are logged at start: {started}"
    );
    let h1 = stack.client(0);
    let h2 = McpClient::http2(h1.base());
    let task_id = h1.create_task("sleep", json!({"ms": 60_000})).await;
    let mut open = Vec::new();
    for n in 1..=10 {
        let (_, mut stream) = listen(&h2, &[&task_id]).await;
        assert_eq!(stream.status, 200, "stream {n} of the principal's 10");
        let acknowledged = stream.next_message(PATIENCE).await.expect("the acknowledgement");
        assert_eq!(acknowledged["method"], "notifications/subscriptions/acknowledged", "{acknowledged}");
        open.push(stream);
    }
    for (client, over) in [(&h2, "HTTP/2"), (&h1, "HTTP/1.1")] {
        let r = client.call("subscriptions/listen", json!({"notifications": {"taskIds": [task_id]}})).await;
        assert_eq!((r.status, r.error_code()), (429, Some(-31429)), "an 11th over {over}: {}", r.text);
        assert_eq!(r.body["error"]["data"]["limit"], "listen_streams");
    }
    let metrics = format!("{}/metrics", h1.base());
    assert_eq!(Scrape::of(&metrics).await.present("taskgate_gateway_sse_streams", &[]), 10.0);

    drop(open.pop());
    let mut reopened = eventually(PATIENCE, "an ended stream to free its slot", || async {
        let (_, stream) = listen(&h1, &[&task_id]).await;
        (stream.status == 200).then_some(stream)
    })
    .await;
    let acknowledged = reopened.next_message(PATIENCE).await.expect("the acknowledgement");
    assert_eq!(acknowledged["method"], "notifications/subscriptions/acknowledged", "{acknowledged}");
}

/// `io.taskgate/seq` counts a stream's notifications with no hole, across all its tasks, and
/// `io.taskgate/version` is each task's version: rising, and the record's at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seq_and_version() {
    let stack = taskgate_tests::Stack::builder().spawn().await;
    let client = stack.client(0);
    let approval = client.create_task("dual_approval", json!({"change": "z"})).await;
    let report = client.create_task("generate_report", json!({})).await;
    client.wait_for_status(&approval, "input_required", PATIENCE).await;
    client.wait_for_status(&report, "input_required", PATIENCE).await;
    let (request, mut stream) = listen(&client, &[&approval, &report]).await;
    let subscription = request["id"].clone();
    assert_eq!(stream.next_message(PATIENCE).await.unwrap()["method"], "notifications/subscriptions/acknowledged");

    let accept = json!({"action": "accept", "content": {"approved": true}});
    client.update_task(&approval, json!({"legal_approval": accept})).await;
    client.update_task(&report, json!({"approve_outline": accept})).await;
    client.update_task(&approval, json!({"finance_approval": accept})).await;

    let mut seqs = Vec::new();
    let mut versions: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    loop {
        let message = stream.next_message(PATIENCE).await.expect("the stream stays open");
        if message.get("result").is_some() {
            assert_closing_result(&message, &subscription);
            break;
        }
        let (params, seq, version) = numbered(&message, &subscription);
        seqs.push(seq);
        versions.entry(params["taskId"].as_str().unwrap().to_owned()).or_default().push(version);
    }
    let expected: Vec<u64> = (1..=seqs.len() as u64).collect();
    assert_eq!(seqs, expected, "1, 2, 3… with no hole");
    assert!(seqs.len() >= 4, "each task's parked and terminal snapshots at least: {seqs:?}");
    let store = stack.store();
    for task in [&approval, &report] {
        let seen = &versions[task.as_str()];
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "{task}: versions rise: {seen:?}");
        let record = store.keys().task(&TaskId::parse(task).unwrap()).record;
        let stored: u64 = redis::cmd("HGET").arg(record).arg("ver").query_async(&mut store.conn()).await.unwrap();
        assert_eq!(seen.last(), Some(&stored), "{task}: the last is the terminal record's version");
    }
}
