//! Recovery and exclusivity, one test per way a task could be stranded, run twice at once, or
//! leak a count. Each builds its leftover state by hand (through Redis, a fault proxy or a
//! paused process) instead of hoping a chaos run reaches it, and most run on standalone Redis
//! and on a 3-master Cluster.

use std::collections::HashSet;
use std::time::Duration;

use redis::Value as RedisValue;
use serde_json::{Value, json};
use taskgate_shared::store::{Created, DEFAULT_POOL, Delivery, Finish, Lease, NewTask, Reclaimed, Store, WORKER_GROUP};
use taskgate_shared::task::{Owner, TaskId};
use taskgate_tests::{FaultProxy, RedisServer, Stack, StackBuilder, Topology, eventually, meta_without_tasks};

const PATIENCE: Duration = Duration::from_secs(20);

fn builder(topology: Topology) -> StackBuilder {
    topology.builder()
}

/// A stack with no worker running, but with the catalogue a worker published (and left
/// behind when it was killed), so tools can be called.
async fn without_workers(builder: StackBuilder) -> Stack {
    let mut stack = builder.workers(1).spawn().await;
    stack.workers[0].kill().await;
    stack
}

taskgate_tests::on_topologies!(
    [standalone: Standalone, cluster: Cluster]
    an_unclaimed_delivery_is_recovered_by_an_idle_worker,
    a_worker_that_reclaims_its_own_task_stops_the_old_run,
    script_replays_answer_what_the_first_run_did,
    gateway_side_cancels_release_the_active_count,
    the_store_frees_the_slot_of_a_task_a_worker_or_the_reaper_ends,
    a_listen_stream_survives_a_version_rollback,
    task_reads_are_atomic,
    a_suspend_that_asks_nothing_fails_the_task,
    stream_consumers_do_not_pile_up,
);

/// Runs one command on whichever node holds `key` (the store's connection routes by key).
async fn cmd<T: redis::FromRedisValue>(store: &Store, command: &redis::Cmd) -> T {
    command.query_async(&mut store.conn()).await.expect("the command runs")
}

/// A task's record field.
async fn field(store: &Store, id: &TaskId, name: &str) -> Option<String> {
    cmd(store, redis::cmd("HGET").arg(store.keys().task(id).record).arg(name)).await
}

/// Creates the worker group on `stream` the way a worker would (a test without workers needs it
/// to read deliveries by hand).
async fn ensure_group(store: &Store, stream: &str) {
    let created: redis::RedisResult<()> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg(WORKER_GROUP)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut store.conn())
        .await;
    if let Err(err) = created {
        assert_eq!(err.code(), Some("BUSYGROUP"), "{err}");
    }
}

/// The consumers of the worker group on `stream`, with their pending counts.
async fn consumers(store: &Store, stream: &str) -> Vec<(String, u64)> {
    let reply: Vec<std::collections::HashMap<String, RedisValue>> =
        cmd(store, redis::cmd("XINFO").arg("CONSUMERS").arg(stream).arg(WORKER_GROUP)).await;
    reply
        .into_iter()
        .map(|c| {
            let name = redis::from_redis_value::<String>(c["name"].clone()).unwrap();
            let pending = redis::from_redis_value::<u64>(c["pending"].clone()).unwrap();
            (name, pending)
        })
        .collect()
}

/// Two runs overlapped exactly when a token goes down.
fn assert_no_overlap(tokens: &[u64], what: &str) {
    assert!(tokens.windows(2).all(|w| w[0] <= w[1]), "{what}: runs of one task overlapped: {tokens:?}");
}

/// Finding: a stream entry that was read but never claimed (its reader died between
/// `XREADGROUP` and the claim) must be taken over by an idle worker within a few lease lengths,
/// not left until the task's expiry.
async fn an_unclaimed_delivery_is_recovered_by_an_idle_worker(topology: Topology) {
    let mut stack = without_workers(builder(topology)).await;
    let client = stack.client(0);
    let task_id = client.create_task("noop", json!({})).await;
    let id = TaskId::parse(&task_id).unwrap();
    let store = stack.store();
    let stream = store.keys().task(&id).stream;
    ensure_group(&store, &stream).await;
    let read: Option<redis::streams::StreamReadReply> = cmd(
        &store,
        redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(WORKER_GROUP)
            .arg("ghost")
            .arg("COUNT")
            .arg(1)
            .arg("STREAMS")
            .arg(&stream)
            .arg(">"),
    )
    .await;
    assert_eq!(read.map(|r| r.keys[0].ids.len()), Some(1), "the ghost consumer holds the delivery");

    stack.add_worker(&["--lease-ms", "1000"]).await;
    client.wait_for_status(&task_id, "completed", Duration::from_secs(6)).await;
}

/// Finding: a worker that re-claims its own task after losing the lease (reclaimed by hand here,
/// as another reaper would after the lease ran out) runs the new claim alone. The old run stops
/// at its next renewal, and its end does not take the new run's lease bookkeeping with it, so
/// the new run is renewed to the end and completes under its own token.
async fn a_worker_that_reclaims_its_own_task_stops_the_old_run(topology: Topology) {
    let ledger_dir = tempfile::tempdir().unwrap();
    let dir = ledger_dir.path().display().to_string();
    let stack = builder(topology).worker_args(&["--lease-ms", "1000", "--ledger-dir", &dir]).spawn().await;
    let client = stack.client(0);
    let task_id = client.create_task("ledger", json!({"steps": 80, "stepMs": 50})).await;
    let id = TaskId::parse(&task_id).unwrap();
    let store = stack.store();
    // Past a lease into the run (30 steps of 50 ms), so the old run has renewed its lease and
    // the new claim outlives that bookkeeping.
    eventually(PATIENCE, "the first run to be a lease and a half in", || async {
        (taskgate_tests::ledger_tokens(ledger_dir.path(), &task_id).len() >= 30).then_some(())
    })
    .await;
    let keys = store.keys().task(&id);
    // What `reclaim_task` does to an expired lease: holder gone, counted, requeued.
    let _: RedisValue = cmd(
        &store,
        redis::cmd("EVAL")
            .arg(
                "redis.call('HDEL', KEYS[1], 'holder', 'lease'); redis.call('ZREM', KEYS[2], ARGV[1]); \
                 redis.call('HINCRBY', KEYS[1], 'reclaims', 1); redis.call('XADD', KEYS[3], '*', 'id', ARGV[1]); return 1",
            )
            .arg(3)
            .arg(&keys.record)
            .arg(&keys.leases)
            .arg(&keys.stream)
            .arg(&task_id),
    )
    .await;
    let done = client.wait_for_status(&task_id, "completed", PATIENCE).await;
    let token = taskgate_tests::result_token(&done);
    assert_eq!(field(&store, &id, "reclaims").await.as_deref(), Some("1"), "only the reclaim made by hand");
    let tokens = taskgate_tests::ledger_tokens(ledger_dir.path(), &task_id);
    let first = tokens[0];
    assert!(token > first, "the second run finished it: {token} after {first}");
    let first_new = tokens.iter().position(|t| *t == token).expect("the second run wrote");
    let old_after = tokens[first_new..].iter().filter(|t| **t == first).count();
    // The old run stops at its next renewal (a third of the lease): a few 50 ms steps at most.
    assert!(old_after <= 12, "the old run went on after the new claim: {old_after} steps, {tokens:?}");
}

/// Finding: a script re-sent after a lost reply (a timeout, or a Cluster retry after a dropped
/// connection) answers what its first run did, instead of a refusal that is then believed.
async fn script_replays_answer_what_the_first_run_did(topology: Topology) {
    let stack = builder(topology).workers(0).spawn().await;
    let store = stack.store();
    let owner = Owner { tenant: "acme".into(), principal: "alice".into() };
    let id = TaskId::generate(16);
    let task = NewTask { counted: true, ..taskgate_tests::sleep_task(&id, &owner) };
    // create: the same owner repeating the same id gets the task it made.
    let created = store.create_task(task.clone()).await.expect("created");
    let Created::New { created_at_ms } = created else { panic!("a new task: {created:?}") };
    let replayed = store.create_task(task.clone()).await.expect("a replayed create answers");
    assert_eq!(replayed, Created::Replayed { created_at_ms }, "the task it made, not a new one");
    let stranger = Owner { tenant: "acme".into(), principal: "mallory".into() };
    assert!(store.create_task(NewTask { owner: &stranger, ..task.clone() }).await.is_err(), "not another owner's");

    // claim: the same worker and entry get the same claim.
    let keys = store.keys().task(&id);
    ensure_group(&store, &keys.stream).await;
    let mut reader = store.blocking_connection().await.unwrap();
    let shard = id.shard();
    let deliveries = store
        .read_deliveries(&mut reader, &[shard], DEFAULT_POOL, "w-replay", 10, Duration::from_millis(100))
        .await
        .unwrap();
    let delivery: Delivery = deliveries.into_iter().find(|d| d.task_id == id).expect("delivered");
    let lease = Duration::from_secs(30);
    let first = store.claim(&mut delivery.clone(), DEFAULT_POOL, "w-replay", lease).await.unwrap().expect("claimed");
    let again = store
        .claim(&mut delivery.clone(), DEFAULT_POOL, "w-replay", lease)
        .await
        .unwrap()
        .expect("a replayed claim answers");
    assert_eq!((again.fence, &again.tool), (first.fence, &first.tool));
    assert!(
        store.claim(&mut delivery.clone(), DEFAULT_POOL, "w-other", lease).await.unwrap().is_none(),
        "not another worker's"
    );

    // finish: a replayed completion is reported written, not as a lost lease.
    let held = Lease { task_id: &id, worker: "w-replay", fence: first.fence, outbox: None };
    let outcome = Finish::Completed { result: "{\"content\":[]}", message: None };
    assert!(store.finish(held, outcome.clone()).await.unwrap());
    assert!(store.finish(held, outcome).await.unwrap(), "a replayed finish answers written");
    let stale = Lease { task_id: &id, worker: "w-replay", fence: first.fence + 1, outbox: None };
    assert!(!store.finish(stale, Finish::Cancelled { message: "x" }).await.unwrap(), "other tokens stay refused");
    assert_eq!(field(&store, &id, "status").await.as_deref(), Some("completed"));

    // reclaim: a replay that finds the task already ended says so (and the store frees the
    // slot again: its script reads the tenant, as the decoding test shows).
    let reclaimed = store.reclaim(&id, DEFAULT_POOL, 3, "{}", "failed", "cancelled").await.unwrap();
    assert_eq!(reclaimed, Reclaimed::AlreadyEnded);
}

/// Finding: every way the gateway itself ends a counted task releases its active-task slot: an
/// inline call that timed out, and a create whose replicas never acknowledged it.
async fn gateway_side_cancels_release_the_active_count(topology: Topology) {
    let stack = without_workers(builder(topology).gateway_args(&[
        "--tenant-max-active-tasks",
        "1",
        "--inline-timeout-ms",
        "200",
    ]))
    .await;
    let client = stack.client(0);
    let inline =
        client.call("tools/call", json!({"name": "noop", "arguments": {}, "_meta": meta_without_tasks()})).await;
    assert_eq!(inline.error_code(), Some(-32603), "the inline call times out: {}", inline.text);
    eventually(Duration::from_secs(5), "a create to be admitted again", || async {
        let r = client.call("tools/call", json!({"name": "noop", "arguments": {}})).await;
        (r.result()["resultType"] == "task").then_some(())
    })
    .await;
    drop(stack);

    // No replica will ever acknowledge: each create fails, and none holds a slot.
    let stack = without_workers(builder(topology).gateway_args(&[
        "--tenant-max-active-tasks",
        "1",
        "--durability-replicas",
        "1",
        "--durability-timeout-ms",
        "50",
    ]))
    .await;
    let client = stack.client(0);
    for attempt in 0..3 {
        let r = client.call("tools/call", json!({"name": "noop", "arguments": {}})).await;
        // The gateway frees the slot before it answers, so the next attempt is admitted.
        assert_eq!(r.error_code(), Some(-32603), "attempt {attempt}: {}", r.text);
    }
}

/// Finding: a task a worker's finish or the reaper ends gives back its tenant's active-task
/// slot inside the store call that ended it, not in a caller that may die before freeing it.
async fn the_store_frees_the_slot_of_a_task_a_worker_or_the_reaper_ends(topology: Topology) {
    let stack = builder(topology).workers(0).spawn().await;
    let store = stack.store();
    let owner = Owner { tenant: "acme".into(), principal: "alice".into() };
    let active = store.keys().tenant("acme").active;
    let mut reader = store.blocking_connection().await.unwrap();
    for ended_by in ["a finish", "the reaper"] {
        // Admitted as the gateway admits it: the id in the tenant's active set, the task counted.
        let id = TaskId::generate(16);
        let expiry = taskgate_shared::task::now_ms() + 600_000;
        let _: i64 = cmd(&store, redis::cmd("ZADD").arg(&active).arg(expiry).arg(id.as_str())).await;
        store.create_task(NewTask { counted: true, ..taskgate_tests::sleep_task(&id, &owner) }).await.unwrap();
        ensure_group(&store, &store.keys().task(&id).stream).await;
        let deliveries = store
            .read_deliveries(&mut reader, &[id.shard()], DEFAULT_POOL, "w-slot", 10, Duration::from_millis(100))
            .await
            .unwrap();
        let delivery: Delivery = deliveries.into_iter().find(|d| d.task_id == id).expect("delivered");
        let lease = if ended_by == "a finish" { PATIENCE } else { Duration::from_millis(50) };
        let claim = store.claim(&mut delivery.clone(), DEFAULT_POOL, "w-slot", lease).await.unwrap().expect("claimed");
        if ended_by == "a finish" {
            let held = Lease { task_id: &id, worker: "w-slot", fence: claim.fence, outbox: None };
            let outcome = Finish::Completed { result: "{\"content\":[]}", message: None };
            assert!(store.finish(held, outcome).await.unwrap());
        } else {
            // No reclaim allowed: the first expiry fails the task.
            eventually(PATIENCE, "the lease to expire and the reaper to fail the task", || async {
                let reclaimed = store.reclaim(&id, DEFAULT_POOL, 0, "{}", "failed", "cancelled").await.unwrap();
                matches!(reclaimed, Reclaimed::Failed).then_some(())
            })
            .await;
        }
        let held: Option<f64> = cmd(&store, redis::cmd("ZSCORE").arg(&active).arg(id.as_str())).await;
        assert_eq!(held, None, "the task {ended_by} ended still holds its slot");
    }
}

/// Finding: a failover that loses the latest writes sends a task's version backwards. The
/// stream must keep delivering, the terminal snapshot included.
async fn a_listen_stream_survives_a_version_rollback(topology: Topology) {
    let stack = without_workers(builder(topology)).await;
    let client = stack.client(0);
    let task_id = client.create_task("sleep", json!({"ms": 60_000})).await;
    let id = TaskId::parse(&task_id).unwrap();
    let store = stack.store();
    let record = store.keys().task(&id).record;
    // The task's own channel (a shard's on a Cluster), so the change is heard at once rather
    // than at the stream's backstop.
    let channel = store.events_channel(&id);
    let publish = if store.sharded_events() { "SPUBLISH" } else { "PUBLISH" };
    let (body, mut stream) =
        client.open_stream("subscriptions/listen", json!({"notifications": {"taskIds": [task_id]}})).await;
    let subscription = body["id"].clone();
    let ack = stream.next_message(PATIENCE).await.unwrap();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged", "{ack}");
    let first = stream.next_message(PATIENCE).await.unwrap();
    assert_eq!(first["params"]["status"], "working");

    // Three status changes land (version 4) and are seen...
    let _: () = cmd(&store, redis::cmd("HSET").arg(&record).arg("ver").arg(4).arg("msg").arg("Step four.")).await;
    let _: i64 = cmd(&store, redis::cmd(publish).arg(&channel).arg(format!("{task_id} 4 working"))).await;
    let seen = stream.next_message(PATIENCE).await.unwrap();
    assert_eq!(seen["params"]["statusMessage"], "Step four.", "{seen}");
    // ...then a failover loses them: the record is back at version 1.
    let _: () = cmd(&store, redis::cmd("HSET").arg(&record).arg("ver").arg(1).arg("msg").arg("Sleeping.")).await;
    // The cancel writes version 2, below what the stream has sent.
    assert_eq!(client.cancel_task(&task_id).await.result()["resultType"], "complete");
    let terminal = stream.next_message(PATIENCE).await.expect("the terminal snapshot");
    assert_eq!(terminal["params"]["status"], "cancelled", "{terminal}");
    let closing = stream.next_message(PATIENCE).await.expect("the closing result");
    assert_eq!(closing["id"], subscription, "{closing}");
}

/// Finding: a read of a task pairs its record with its inputs atomically, so `input_required`
/// at one version never shows inputs written after an answer. Seen through `MONITOR` on every
/// node: the inputs are only ever read inside a script (or a transaction) with the record.
async fn task_reads_are_atomic(topology: Topology) {
    let stack = builder(topology).workers(1).spawn().await;
    let client = stack.client(0);
    let task_id = client.create_task("generate_report", json!({"size": "small"})).await;
    client.wait_for_status(&task_id, "input_required", PATIENCE).await;
    let id = TaskId::parse(&task_id).unwrap();
    let inputs_key = stack.store().keys().task(&id).inputs;

    let nodes: Vec<&RedisServer> = std::iter::once(&stack.redis).chain(&stack.cluster_nodes).collect();
    let mut monitors = Vec::new();
    for node in &nodes {
        monitors.push(monitor(node.port()).await);
    }
    // A listen stream reads the parked task at acceptance; an inline re-read path uses the same read.
    let (_, mut stream) =
        client.open_stream("subscriptions/listen", json!({"notifications": {"taskIds": [task_id]}})).await;
    stream.next_message(PATIENCE).await.unwrap();
    let parked = stream.next_message(PATIENCE).await.unwrap();
    assert_eq!(parked["params"]["status"], "input_required");
    drop(stream);
    let mut lines = Vec::new();
    eventually(PATIENCE, "MONITOR to show the inputs being read", || {
        lines.extend(monitors.iter_mut().flat_map(|m| m.take()));
        let seen = lines.iter().any(|l| l.contains("\"HGETALL\"") && l.contains(&inputs_key));
        async move { seen.then_some(()) }
    })
    .await;
    for line in lines.iter().filter(|l| l.contains("\"HGETALL\"") && l.contains(&inputs_key)) {
        assert!(line.contains(" lua]"), "the inputs were read outside a script: {line}");
    }
}

/// A `MONITOR` connection collecting lines in the background.
struct Monitor {
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    _reader: tokio::task::JoinHandle<()>,
}

impl Monitor {
    fn take(&mut self) -> Vec<String> {
        std::mem::take(&mut self.lines.lock().unwrap())
    }
}

async fn monitor(port: u16) -> Monitor {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut socket = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    socket.write_all(b"MONITOR\r\n").await.unwrap();
    let mut reader = tokio::io::BufReader::new(socket);
    let mut ok = String::new();
    reader.read_line(&mut ok).await.unwrap();
    assert_eq!(ok.trim(), "+OK");
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = lines.clone();
    let reader = tokio::spawn(async move {
        let mut line = String::new();
        while reader.read_line(&mut line).await.is_ok_and(|n| n > 0) {
            sink.lock().unwrap().push(std::mem::take(&mut line));
        }
    });
    Monitor { lines, _reader: reader }
}

/// Finding: a tool that suspends without asking anything would park a task nobody can answer.
/// It fails with a clear error instead.
async fn a_suspend_that_asks_nothing_fails_the_task(topology: Topology) {
    let stack = builder(topology).spawn().await;
    let client = stack.client(0);
    let task_id = client.create_task("faulty", json!({"mode": "suspend"})).await;
    let failed = client.wait_for_status(&task_id, "failed", PATIENCE).await;
    let message = failed["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("without asking"), "{failed}");
    assert_eq!(failed["error"]["code"], -32603);
}

/// Finding: each worker start added a consumer to every shard's group, forever. A worker that
/// exits cleanly deletes its own; the idle consumers of dead workers are deleted once nothing
/// is pending on them (a pending entry is first taken over).
async fn stream_consumers_do_not_pile_up(topology: Topology) {
    let mut stack = builder(topology).workers(0).spawn().await;
    let store = stack.store();
    let shards: Vec<String> = (0..16u8).map(|s| store.keys().shard(s).stream).collect();
    for stream in &shards {
        ensure_group(&store, stream).await;
        let _: i64 =
            cmd(&store, redis::cmd("XGROUP").arg("CREATECONSUMER").arg(stream).arg(WORKER_GROUP).arg("dead-worker"))
                .await;
    }
    // Alone, and with a long lease (its own reaper deletes only consumers idle for two), so
    // nothing but its clean exit can remove its consumers.
    let quitter = stack.add_worker(&["--lease-ms", "60000"]).await;
    let quitter_id = worker_id(&stack.workers[quitter].log());
    // A consumer exists once something was delivered to it (Redis 7.0 does not create one for
    // a read that finds nothing).
    let client = stack.client(0);
    for _ in 0..4 {
        let id = client.create_task("noop", json!({})).await;
        client.wait_for_status(&id, "completed", PATIENCE).await;
    }
    let names = async || {
        let mut names = HashSet::new();
        for stream in &shards {
            names.extend(consumers(&store, stream).await.into_iter().map(|(n, _)| n));
        }
        names
    };
    assert!(names().await.contains(&quitter_id), "the quitter's consumers exist");
    stack.workers[quitter].signal("TERM");
    assert_eq!(stack.workers[quitter].wait_exit(PATIENCE).await, Some(0));
    let left = names().await;
    assert!(!left.contains(&quitter_id), "a clean exit deletes the worker's own consumers: {left:?}");
    assert!(left.contains("dead-worker"), "nothing else deleted the dead one yet");
    // Another worker's reaper deletes the dead worker's, idle and empty.
    stack.add_worker(&["--lease-ms", "1000"]).await;
    eventually(PATIENCE, "the dead worker's consumers to be gone", || async {
        (!names().await.contains("dead-worker")).then_some(())
    })
    .await;
}

/// The worker id a worker logged at start.
fn worker_id(log: &str) -> String {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|l| l["worker_id"].as_str().map(str::to_owned))
        .expect("the worker logs its id")
}

/// Finding: a worker that cannot renew its lease stops its tool before the lease can have run
/// out, so the run that reclaims the task never overlaps it. Its connections to Redis are
/// stalled by a proxy while the process and its tool keep running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_worker_stops_its_tool_before_its_lease_runs_out() {
    let ledger_dir = tempfile::tempdir().unwrap();
    let dir = ledger_dir.path().display().to_string();
    let mut stack = Stack::builder().workers(0).spawn().await;
    let proxy = FaultProxy::start(([127, 0, 0, 1], stack.redis.port()).into()).await;
    let worker_args = ["--lease-ms", "1500", "--ledger-dir", dir.as_str()];
    stack.add_worker_via(&proxy.url(), &worker_args).await;
    let client = stack.client(0);
    let task_id = client.create_task("ledger", json!({"steps": 60, "stepMs": 50})).await;
    eventually(PATIENCE, "the first run to write", || async {
        (taskgate_tests::ledger_tokens(ledger_dir.path(), &task_id).len() >= 3).then_some(())
    })
    .await;
    proxy.partition();
    stack.add_worker(&worker_args).await;
    let done = client.wait_for_status(&task_id, "completed", PATIENCE).await;
    proxy.heal();
    let tokens = taskgate_tests::ledger_tokens(ledger_dir.path(), &task_id);
    let (first, token) = (tokens[0], taskgate_tests::result_token(&done));
    assert!(token > first, "the second run finished it: {token} after {first}");
    assert_no_overlap(&tokens, "partitioned worker");
    assert!(tokens.iter().filter(|t| **t == first).count() < 60, "the partitioned run was stopped: {tokens:?}");
    let log = stack.workers[0].log();
    assert!(log.contains("lease no longer known to be valid"), "the partitioned worker says why it stopped");
}

/// Finding: a lease is only as good as the renewals that keep it, so a command timeout that
/// does not fit well inside a third of the lease is refused at start.
#[tokio::test]
async fn a_redis_timeout_too_long_for_the_lease_is_refused() {
    let worker = tokio::process::Command::new(taskgate_tests::Binary::Worker.path())
        .args(["--redis-url", "redis://127.0.0.1:1", "--lease-ms", "1500", "--redis-timeout-ms", "1000"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let output = tokio::time::timeout(Duration::from_secs(10), worker.wait_with_output())
        .await
        .expect("the worker refuses to start instead of running")
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--redis-timeout-ms") && stderr.contains("--lease-ms"), "{stderr}");
}

/// Finding: `WAIT` counts the replicas that acknowledged *this connection's* writes, so it must
/// go on the connection that wrote the create, right behind it: one pipeline, one write. A
/// `WAIT` sent separately can meet a reconnect first, count a fresh connection with no writes,
/// and return at once. Seen through a proxy: the bytes that carry the create carry its `WAIT`.
/// Then the gateway's connection is cut just after the create's reply, with the only replica
/// paused: the create must be refused, not reported durable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_counts_the_create_it_follows() {
    let stack = without_workers(Stack::builder()).await;
    let replica = RedisServer::start_replica_of(&stack.redis).await;
    let mut primary = stack.redis.connection().await;
    let proxy = FaultProxy::start(([127, 0, 0, 1], stack.redis.port()).into()).await;
    let mut stack = stack;
    stack.redis_url = proxy.url();
    stack.gateways.clear();
    stack
        .add_gateway(&["--durability-replicas", "1", "--durability-timeout-ms", "500", "--redis-timeout-ms", "2000"])
        .await;
    let client = stack.client(0);
    // Durable while the replica answers.
    let ok = client.call("tools/call", json!({"name": "sleep", "arguments": {"ms": 1}})).await;
    assert_eq!(ok.result()["resultType"], "task", "{}", ok.text);

    replica.signal("STOP");
    proxy.cut_after_reply_to(b"3456789");
    let r = client.call("tools/call", json!({"name": "sleep", "arguments": {"ms": 3456789}})).await;
    replica.signal("CONT");
    let sent = proxy.captured();
    assert_eq!(sent.len(), 1, "the create went out once");
    let create = String::from_utf8_lossy(&sent[0]);
    assert!(create.contains("EVALSHA") && create.contains("WAIT"), "the create and its WAIT in one write: {create}");
    assert_eq!(r.error_code(), Some(-32603), "a create no replica acknowledged is not reported durable: {}", r.text);
    let _: () = redis::cmd("PING").query_async(&mut primary).await.unwrap();
}
