//! The whole lifecycle and listen against a local 3-master Redis Cluster: every script
//! stays inside one hash tag, deliveries are read shard by shard, task events go by sharded
//! pub/sub to the shard's node only, and signals reach every process whichever node it is
//! connected to.

use std::time::Duration;

use serde_json::{Value, json};
use taskgate_shared::task::TaskId;
use taskgate_tests::{Scrape, Stack, meta_without_tasks};

const PATIENCE: Duration = Duration::from_secs(20);

fn statuses_of(message: &Value) -> Option<String> {
    (message["method"] == "notifications/tasks").then(|| message["params"]["status"].as_str().unwrap().to_owned())
}

/// Reads notifications until one has `status`, recording each status change seen.
async fn until_status(stream: &mut taskgate_tests::SseStream, status: &str, seen: &mut Vec<String>) {
    while seen.last().map(String::as_str) != Some(status) {
        let message = stream.next_message(PATIENCE).await.expect("notifications until the status");
        if let Some(current) = statuses_of(&message)
            && seen.last() != Some(&current)
        {
            seen.push(current);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_and_listen_on_a_cluster() {
    let stack = Stack::builder().cluster(3).gateways(2).workers(2).spawn().await;
    let (a, b) = (stack.client(0), stack.client(1));

    // Input and listen across replicas.
    let task_id = a.create_task("generate_report", json!({"size": "small"})).await;
    let (request, mut stream) =
        b.open_stream("subscriptions/listen", json!({"notifications": {"taskIds": [&task_id]}})).await;
    assert_eq!(stream.status, 200);
    let ack = stream.next_message(PATIENCE).await.expect("the acknowledgement");
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged", "{ack}");
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([task_id]));
    // Answer only once the stream has shown the park: a stream coalesces to the newest state,
    // so an answer sent earlier could legitimately take it past `input_required` unseen.
    let mut seen: Vec<String> = Vec::new();
    until_status(&mut stream, "input_required", &mut seen).await;
    let r =
        b.update_task(&task_id, json!({"approve_outline": {"action": "accept", "content": {"approved": true}}})).await;
    assert_eq!(r.result()["resultType"], "complete", "{}", r.text);
    let done = a.wait_for_status(&task_id, "completed", PATIENCE).await;
    assert!(done["result"]["structuredContent"].is_object(), "{done}");
    until_status(&mut stream, "completed", &mut seen).await;
    assert!(matches!(seen.first().map(String::as_str), Some("working" | "input_required")), "{seen:?}");
    assert_eq!(seen.last().map(String::as_str), Some("completed"), "{seen:?}");
    let closing = stream.next_message(PATIENCE).await.expect("the closing result");
    assert_eq!(closing["id"], request["id"]);
    assert_eq!(closing["result"]["resultType"], "complete");

    // Many tasks land on every shard, hence on every node, and all complete.
    let mut ids = Vec::new();
    for i in 0..48 {
        let client = if i % 2 == 0 { &a } else { &b };
        ids.push(client.create_task("sleep", json!({"ms": 0})).await);
    }
    for id in &ids {
        a.wait_for_status(id, "completed", PATIENCE).await;
    }
    let shards: std::collections::HashSet<u8> = ids.iter().map(|id| TaskId::parse(id).unwrap().shard()).collect();
    assert!(shards.len() >= 8, "tasks spread over shards: {shards:?}");
    let mut nodes_with_tasks = 0;
    for node in std::iter::once(&stack.redis).chain(&stack.cluster_nodes) {
        let mut conn = node.connection().await;
        let keys: i64 = redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap();
        if keys > 0 {
            nodes_with_tasks += 1;
        }
    }
    assert_eq!(nodes_with_tasks, 3, "every master holds some of the state");

    // A running task is cancelled through its worker's signal channel, across the cluster bus.
    let running = a.create_task("sleep", json!({"ms": 60_000})).await;
    a.wait_for_status(&running, "working", PATIENCE).await;
    assert!(b.cancel_task(&running).await.result().is_object());
    let r = a.wait_for_status(&running, "cancelled", Duration::from_secs(5)).await;
    assert_eq!(r["statusMessage"], "Sleep was cancelled.");

    // An inline call waits on the gateway's event subscription.
    let r = a.call("tools/call", json!({"name": "noop", "arguments": {}, "_meta": meta_without_tasks()})).await;
    assert_eq!(r.result()["resultType"], "complete", "{}", r.text);

    for service in stack.gateways.iter().chain(&stack.workers) {
        let log = service.log().to_lowercase();
        assert!(!log.contains("crossslot") && !log.contains("cross-slot"), "a cross-slot command: {log}");
    }
    for node in std::iter::once(&stack.redis).chain(&stack.cluster_nodes) {
        let mut conn = node.connection().await;
        let errors: String = redis::cmd("INFO").arg("errorstats").query_async(&mut conn).await.unwrap();
        assert!(!errors.contains("CROSSSLOT"), "node {} refused a cross-slot command: {errors}", node.port());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_task_is_reclaimed_on_a_cluster() {
    let mut stack = Stack::builder().cluster(3).workers(2).worker_args(&["--lease-ms", "1000"]).spawn().await;
    let client = stack.client(0);
    let task_id = client.create_task("sleep", json!({"ms": 1500})).await;
    let id = TaskId::parse(&task_id).unwrap();
    let key = stack.store().keys().task(&id).record;
    let store = stack.store();
    let holder = taskgate_tests::eventually(PATIENCE, "a worker to claim the task", || {
        let (store, key) = (store.clone(), key.clone());
        async move {
            let mut conn = store.conn();
            redis::cmd("HGET").arg(&key).arg("holder").query_async::<Option<String>>(&mut conn).await.ok().flatten()
        }
    })
    .await;
    let index: usize = holder.split('-').next().unwrap().trim_start_matches('w').parse().unwrap();
    let first = taskgate_tests::record_fence(&store, &task_id).await;
    stack.workers[index].kill().await;
    let done = client.wait_for_status(&task_id, "completed", PATIENCE).await;
    let token = taskgate_tests::result_token(&done);
    assert!(token > first, "a later claim finished it: {token} after {first}");
}

/// The cluster bus's count of classic pub/sub messages sent, summed over every node.
async fn bus_publishes(stack: &Stack) -> u64 {
    let mut sent = 0;
    for node in std::iter::once(&stack.redis).chain(&stack.cluster_nodes) {
        let mut conn = node.connection().await;
        let info: String = redis::cmd("CLUSTER").arg("INFO").query_async(&mut conn).await.unwrap();
        sent += info
            .lines()
            .filter_map(|l| l.strip_prefix("cluster_stats_messages_publish_sent:"))
            .map(|v| v.trim().parse::<u64>().unwrap())
            .sum::<u64>();
    }
    sent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_events_stay_on_their_shards_node() {
    // Over mutual TLS, on the cluster bus too, as a managed cluster would run.
    let stack = Stack::builder().cluster(3).tls().gateways(2).workers(1).spawn().await;
    let (a, b) = (stack.client(0), stack.client(1));

    // Every gateway subscribes to every shard's channel, on the node that owns it.
    for shard in 0..16u8 {
        let channel = format!("{}:{{s{shard:02x}}}:events", stack.namespace);
        let mut subscribers = 0;
        for node in std::iter::once(&stack.redis).chain(&stack.cluster_nodes) {
            let mut conn = node.connection().await;
            let reply: (String, i64) =
                redis::cmd("PUBSUB").arg("SHARDNUMSUB").arg(&channel).query_async(&mut conn).await.unwrap();
            subscribers += reply.1;
        }
        assert_eq!(subscribers, 2, "{channel}: one subscription per gateway");
    }
    // Each held as one connection lent by the gateway's pool of sharded subscriptions.
    let metrics = Scrape::of(&format!("{}/metrics", stack.gateways[0].url.as_deref().unwrap())).await;
    let held = [("pool", "shard_pubsub"), ("state", "in_use")];
    assert_eq!(metrics.present("taskgate_redis_pool_connections", &held), 1.0);

    let before = bus_publishes(&stack).await;
    // A task followed on the other replica: its wake-ups arrive by sharded pub/sub.
    let task_id = a.create_task("generate_report", json!({"size": "small"})).await;
    let (_, mut stream) =
        b.open_stream("subscriptions/listen", json!({"notifications": {"taskIds": [&task_id]}})).await;
    let mut seen = Vec::new();
    until_status(&mut stream, "input_required", &mut seen).await;
    b.update_task(&task_id, json!({"approve_outline": {"action": "accept", "content": {"approved": true}}})).await;
    until_status(&mut stream, "completed", &mut seen).await;
    // Tasks on every shard, each waited for inline through the events.
    for _ in 0..24 {
        let r = a.call("tools/call", json!({"name": "noop", "arguments": {}, "_meta": meta_without_tasks()})).await;
        assert_eq!(r.result()["resultType"], "complete", "{}", r.text);
    }
    assert_eq!(bus_publishes(&stack).await, before, "no task event crossed the cluster bus");
    // The count does see a classic PUBLISH, which Redis broadcasts to every node.
    let mut conn = stack.redis.connection().await;
    let _: i64 = redis::cmd("PUBLISH").arg("anything").arg("x").query_async(&mut conn).await.unwrap();
    assert!(bus_publishes(&stack).await > before, "a classic PUBLISH crosses the bus");
}

/// Moves the slot of hash tag `tag`, with its keys, to another node of the stack's cluster.
/// Returns the port of the node that owns it now.
async fn move_slot(stack: &Stack, tag: &str) -> u16 {
    let nodes: Vec<&taskgate_tests::RedisServer> = std::iter::once(&stack.redis).chain(&stack.cluster_nodes).collect();
    let mut conn = nodes[0].connection().await;
    let slot: i64 =
        redis::cmd("CLUSTER").arg("KEYSLOT").arg(format!("{{{tag}}}")).query_async(&mut conn).await.unwrap();
    let mut ids = Vec::new();
    let mut owner = None;
    for (i, node) in nodes.iter().enumerate() {
        let mut conn = node.connection().await;
        ids.push(redis::cmd("CLUSTER").arg("MYID").query_async::<String>(&mut conn).await.unwrap());
        // A node answers COUNTKEYSINSLOT only for its own slots' keys, so ask who serves it.
        let slots: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER").arg("SLOTS").query_async(&mut conn).await.unwrap();
        if i == 0 {
            for range in &slots {
                let (start, end): (i64, i64) =
                    (redis::from_redis_value_ref(&range[0]).unwrap(), redis::from_redis_value_ref(&range[1]).unwrap());
                if (start..=end).contains(&slot) {
                    let master: Vec<redis::Value> = redis::from_redis_value_ref(&range[2]).unwrap();
                    let port: i64 = redis::from_redis_value_ref(&master[1]).unwrap();
                    owner = nodes.iter().position(|n| i64::from(n.port()) == port);
                }
            }
        }
    }
    let source = owner.expect("the slot's owner");
    let target = (source + 1) % nodes.len();
    let (mut from, mut to) = (nodes[source].connection().await, nodes[target].connection().await);
    let () = redis::cmd("CLUSTER")
        .arg(&["SETSLOT", &slot.to_string(), "IMPORTING", &ids[source]][..])
        .query_async(&mut to)
        .await
        .unwrap();
    let () = redis::cmd("CLUSTER")
        .arg(&["SETSLOT", &slot.to_string(), "MIGRATING", &ids[target]][..])
        .query_async(&mut from)
        .await
        .unwrap();
    loop {
        let keys: Vec<String> =
            redis::cmd("CLUSTER").arg("GETKEYSINSLOT").arg(slot).arg(100).query_async(&mut from).await.unwrap();
        if keys.is_empty() {
            break;
        }
        let () = redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(nodes[target].port())
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(&keys)
            .query_async(&mut from)
            .await
            .unwrap();
    }
    for node in &nodes {
        let mut conn = node.connection().await;
        let () = redis::cmd("CLUSTER")
            .arg(&["SETSLOT", &slot.to_string(), "NODE", &ids[target]][..])
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    nodes[target].port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_stream_survives_its_shards_slot_moving() {
    let mut stack = Stack::builder().cluster(3).gateways(1).workers(0).spawn().await;
    // Publish the catalogue, then stop the worker so the task waits while its slot moves.
    let w = stack.add_worker(&[]).await;
    stack.workers[w].kill().await;
    let client = stack.client(0);
    let task_id = client.create_task("generate_report", json!({"size": "small"})).await;
    let (_, mut stream) =
        client.open_stream("subscriptions/listen", json!({"notifications": {"taskIds": [&task_id]}})).await;
    let mut seen = Vec::new();
    until_status(&mut stream, "working", &mut seen).await;

    let tag = format!("s{:02x}", TaskId::parse(&task_id).unwrap().shard());
    let channel = format!("{}:{{{tag}}}:events", stack.namespace);
    let new_owner = move_slot(&stack, &tag).await;
    // The gateway subscribes again on the node that owns the channel now.
    let owner = std::iter::once(&stack.redis).chain(&stack.cluster_nodes).find(|n| n.port() == new_owner).unwrap();
    let conn = owner.connection().await;
    taskgate_tests::eventually(PATIENCE, "the gateway to resubscribe on the new owner", || {
        let mut conn = conn.clone();
        let channel = channel.clone();
        async move {
            let (_, n): (String, i64) =
                redis::cmd("PUBSUB").arg("SHARDNUMSUB").arg(&channel).query_async(&mut conn).await.ok()?;
            (n == 1).then_some(())
        }
    })
    .await;

    // Changes after the move still reach the open stream.
    stack.workers[w].restart().await;
    until_status(&mut stream, "input_required", &mut seen).await;
    client.update_task(&task_id, json!({"approve_outline": {"action": "accept", "content": {"approved": true}}})).await;
    until_status(&mut stream, "completed", &mut seen).await;
}
