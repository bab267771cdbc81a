//! Worker pools: each tool's tasks are queued on its pool's streams and claimed only by that
//! pool's workers; a pool with no running worker leaves its tasks queued while other pools go
//! on; an expired lease puts the task back on its own pool's queue, whichever worker reaps it;
//! and a tool that moves to another pool sends new tasks there without moving queued ones.

use std::time::Duration;

use serde_json::json;
use taskgate_shared::store::Store;
use taskgate_shared::task::TaskId;
use taskgate_tests::upstream::{upstreams_file, wait_for_tool};
use taskgate_tests::{McpClient, Stack, Topology, eventually};

const PATIENCE: Duration = Duration::from_secs(20);

taskgate_tests::on_topologies!(
    [standalone: Standalone, cluster: Cluster]
    each_pool_runs_only_its_own_tasks_and_a_stopped_pool_waits,
    a_stopped_stdio_pool_runs_its_task_at_once_after_sigcont,
    an_expired_lease_is_requeued_on_the_tasks_own_pool,
    a_tool_moved_to_another_pool_leaves_queued_tasks_where_they_are,
    prompts_and_resources_go_to_the_pool_that_serves_them,
);

async fn field(store: &Store, id: &str, name: &str) -> Option<String> {
    let record = store.keys().task(&TaskId::parse(id).unwrap()).record;
    redis::cmd("HGET").arg(record).arg(name).query_async(&mut store.conn()).await.unwrap()
}

/// The task ids queued on `pool`'s stream of `id`'s shard.
async fn queued(store: &Store, id: &str, pool: &str) -> Vec<String> {
    let stream = store.keys().queue(TaskId::parse(id).unwrap().shard(), pool).stream;
    let entries: Vec<(String, Vec<(String, String)>)> =
        redis::cmd("XRANGE").arg(stream).arg("-").arg("+").query_async(&mut store.conn()).await.unwrap();
    entries.into_iter().flat_map(|(_, fields)| fields).filter(|(k, _)| k == "id").map(|(_, v)| v).collect()
}

/// How many times the task was claimed: its timeline's `claimed` entries (the gateway keeps
/// timelines with `--console`).
async fn claims(store: &Store, id: &str) -> usize {
    let timeline = store.keys().task(&TaskId::parse(id).unwrap()).timeline;
    let entries: Vec<String> =
        redis::cmd("LRANGE").arg(timeline).arg(0).arg(-1).query_async(&mut store.conn()).await.unwrap();
    entries.iter().filter(|e| e.contains(r#""ev":"claimed""#)).count()
}

/// The consumers of the worker group on `pool`'s stream of `id`'s shard.
async fn consumers(store: &Store, id: &str, pool: &str) -> Vec<String> {
    let stream = store.keys().queue(TaskId::parse(id).unwrap().shard(), pool).stream;
    let reply: Option<redis::streams::StreamInfoConsumersReply> = redis::cmd("XINFO")
        .arg("CONSUMERS")
        .arg(stream)
        .arg(taskgate_shared::store::WORKER_GROUP)
        .query_async(&mut store.conn())
        .await
        .ok();
    reply.map(|r| r.consumers.into_iter().map(|c| c.name).collect()).unwrap_or_default()
}

/// A tool of the `default` pool (the conformance pack), answered inline.
async fn default_pool_answers(client: &McpClient) {
    let r = client.call("tools/call", json!({ "name": "test_simple_text", "arguments": {} })).await;
    assert!(r.body.get("error").is_none(), "{}", r.text);
    assert!(r.result()["content"][0]["text"].is_string(), "{}", r.text);
}

/// Two pools, each serving its own tools: `default` (conformance pack, worker 0) and `gpu`
/// (demo pack, worker 1), behind a gateway with the operator console open.
async fn two_pools(topology: Topology, worker_args: &[&str]) -> Stack {
    let mut stack = topology.builder().workers(0).gateway_args(&["--console"]).worker_args(worker_args).spawn().await;
    stack.add_worker_in_pool("default", &["--tools", "conformance"]).await;
    stack.add_worker_in_pool("gpu", &["--tools", "demo"]).await;
    stack
}

async fn each_pool_runs_only_its_own_tasks_and_a_stopped_pool_waits(topology: Topology) {
    let stack = two_pools(topology, &[]).await;
    let (client, store) = (stack.client(0), stack.store());
    let gpu_worker = Stack::worker_prefix(1);

    let first = client.create_task("sleep", json!({"ms": 0})).await;
    client.wait_for_status(&first, "completed", PATIENCE).await;
    assert_eq!(field(&store, &first, "pool").await.as_deref(), Some("gpu"), "the record keeps its pool");
    let finisher = field(&store, &first, "finisher").await.unwrap_or_default();
    assert!(finisher.starts_with(&gpu_worker), "ran on {finisher}");
    default_pool_answers(&client).await;
    // Each pool's worker reads only its own pool's streams.
    let gpu_readers = consumers(&store, &first, "gpu").await;
    assert!(!gpu_readers.is_empty() && gpu_readers.iter().all(|c| c.starts_with(&gpu_worker)), "{gpu_readers:?}");
    let default_readers = consumers(&store, &first, "default").await;
    assert!(default_readers.iter().all(|c| c.starts_with(&Stack::worker_prefix(0))), "{default_readers:?}");

    // The only gpu worker stops: its pool's task waits, the other pool goes on.
    stack.workers[1].signal("STOP");
    let waiting = client.create_task("sleep", json!({"ms": 0})).await;
    for _ in 0..3 {
        default_pool_answers(&client).await;
    }
    assert_eq!(queued(&store, &waiting, "gpu").await, vec![waiting.clone()], "on its own pool's queue");
    assert!(queued(&store, &waiting, "default").await.is_empty(), "and on no other");
    assert_eq!(field(&store, &waiting, "holder").await, None, "no worker of another pool claimed it");
    assert_eq!(field(&store, &waiting, "fence").await.as_deref(), Some("0"));
    let snapshot = client.get_task(&waiting).await;
    assert_eq!(snapshot.result()["status"], "working", "{}", snapshot.text);

    stack.workers[1].signal("CONT");
    let done = client.wait_for_status(&waiting, "completed", PATIENCE).await;
    assert_eq!(claims(&store, &waiting).await, 1, "claimed exactly once: {done}");
    assert_eq!(taskgate_tests::result_token(&done), taskgate_tests::record_fence(&store, &waiting).await);
    assert_eq!(field(&store, &waiting, "reclaims").await, None, "never reclaimed (no count is kept for 0)");
    let finisher = field(&store, &waiting, "finisher").await.unwrap_or_default();
    assert!(finisher.starts_with(&gpu_worker), "ran on {finisher}");

    // An answer resumes a parked gpu task onto the gpu queue (the gateway's first guess is the
    // default pool's queue: the script refuses it and the store sends it again with gpu's).
    let parked = client.create_task("generate_report", json!({"size": "large"})).await;
    client.wait_for_status(&parked, "input_required", PATIENCE).await;
    stack.workers[1].signal("STOP");
    let answer = json!({"approve_outline": {"action": "accept", "content": {"approved": true}}});
    let updated = client.update_task(&parked, answer).await;
    assert!(updated.body.get("error").is_none(), "{}", updated.text);
    assert_eq!(queued(&store, &parked, "gpu").await, vec![parked.clone()], "resumed on its own pool's queue");
    assert!(queued(&store, &parked, "default").await.is_empty(), "and on no other");
    stack.workers[1].signal("CONT");
    let done = client.wait_for_status(&parked, "completed", PATIENCE).await;
    assert_eq!(field(&store, &parked, "finisher").await.map(|f| f.starts_with(&gpu_worker)), Some(true), "{done}");
}

/// The pending deliveries of the worker group on `pool`'s stream of `id`'s shard: (consumer,
/// milliseconds since the entry was delivered).
async fn pending(store: &Store, id: &str, pool: &str) -> Vec<(String, u64)> {
    let stream = store.keys().queue(TaskId::parse(id).unwrap().shard(), pool).stream;
    let entries: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
        .arg(stream)
        .arg(taskgate_shared::store::WORKER_GROUP)
        .arg("-")
        .arg("+")
        .arg(100)
        .query_async(&mut store.conn())
        .await
        .unwrap_or_default();
    entries.into_iter().map(|(_, consumer, idle, _)| (consumer, idle)).collect()
}

/// A pool of one worker serving only server-everything over stdio, at the default lease
/// (30 s), is paused with `SIGSTOP` while its reader is blocked in `XREADGROUP`: Redis hands the
/// new task's entry to that read, whose reply then comes after the read's timeout (1 s of block
/// and 2 s of command timeout) and is dropped. After `SIGCONT` the task must run at once, not
/// once the entry has idled a whole lease and is taken over as stale; meanwhile the other pool
/// goes on.
async fn a_stopped_stdio_pool_runs_its_task_at_once_after_sigcont(topology: Topology) {
    let taskgate_tests::interop::Servers { node, everything, .. } = taskgate_tests::interop::servers();
    let mut stack = topology.builder().workers(0).gateway_args(&["--console"]).spawn().await;
    let body = format!("[[upstream]]\nname = \"everything\"\ncommand = {node:?}\nargs = [{everything:?}, \"stdio\"]\n");
    let file = upstreams_file(stack.scratch_dir(), "files.toml", &body);
    stack.add_worker_in_pool("default", &["--tools", "demo"]).await;
    stack.add_worker_in_pool("files", &["--tools", "", "--upstreams", file.to_str().unwrap()]).await;
    let (client, store) = (stack.client(0), stack.store());
    let files_worker = Stack::worker_prefix(1);
    wait_for_tool(&client, "everything__echo", PATIENCE).await;
    let echo = json!({"message": "after the pause"});
    let first = client.create_task("everything__echo", echo.clone()).await;
    client.wait_for_status(&first, "completed", PATIENCE).await;

    // The pause must catch the reader inside a blocking read for the entry to be handed to it;
    // a pause between two reads leaves the entry undelivered (nothing to show), so try again.
    let mut attempts = 0;
    let waiting = loop {
        attempts += 1;
        assert!(attempts <= 5, "the paused worker's blocking read never received a task");
        stack.workers[1].signal("STOP");
        let id = client.create_task("everything__echo", echo.clone()).await;
        // A read blocks at most 1 s on Redis's side, so by then the entry is delivered or not.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        let delivered = loop {
            let pending = pending(&store, &id, "files").await;
            if pending.iter().any(|(consumer, _)| consumer.starts_with(&files_worker)) {
                break true;
            }
            if tokio::time::Instant::now() >= deadline {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        if delivered {
            break id;
        }
        stack.workers[1].signal("CONT");
        client.wait_for_status(&id, "completed", PATIENCE).await;
    };
    // The other pool goes on.
    let core = client.create_task("sleep", json!({"ms": 0})).await;
    client.wait_for_status(&core, "completed", PATIENCE).await;
    // Paused past the read's timeout (the entry was delivered after the read was sent).
    eventually(PATIENCE, "the paused read's timeout to pass", || async {
        pending(&store, &waiting, "files").await.iter().any(|(_, idle)| *idle >= 4_000).then_some(())
    })
    .await;
    let snapshot = client.get_task(&waiting).await;
    assert_eq!(snapshot.result()["status"], "working", "{}", snapshot.text);
    assert_eq!(field(&store, &waiting, "holder").await, None, "nobody claimed it while the pool was paused");

    stack.workers[1].signal("CONT");
    // Well within the lease: a stale delivery is taken over only once it idled a whole lease.
    let done = client.wait_for_status(&waiting, "completed", Duration::from_secs(15)).await;
    assert_eq!(done["result"]["content"][0]["text"], "Echo: after the pause", "{done}");
    assert_eq!(claims(&store, &waiting).await, 1, "claimed exactly once: {done}");
    let finisher = field(&store, &waiting, "finisher").await.unwrap_or_default();
    assert!(finisher.starts_with(&files_worker), "ran on {finisher}");
}

async fn an_expired_lease_is_requeued_on_the_tasks_own_pool(topology: Topology) {
    // Heartbeats run out quickly, so the console soon sees that no gpu worker is left.
    let mut stack = two_pools(topology, &["--lease-ms", "1000", "--catalogue-ttl-ms", "1500"]).await;
    let (client, store) = (stack.client(0), stack.store());
    let task = client.create_task("sleep", json!({"ms": 600_000})).await;
    stack.wait_until_held(&task, PATIENCE).await;
    let holder = field(&store, &task, "holder").await.unwrap_or_default();
    assert!(holder.starts_with(&Stack::worker_prefix(1)), "held by {holder}");
    let first = taskgate_tests::record_fence(&store, &task).await;

    // The gpu worker dies; the only reaper left is the default pool's worker's.
    stack.workers[1].kill().await;
    eventually(PATIENCE, "the expired lease to be reclaimed", || async {
        let reclaimed = field(&store, &task, "reclaims").await.as_deref() == Some("1");
        (reclaimed && field(&store, &task, "holder").await.is_none()).then_some(())
    })
    .await;
    assert_eq!(queued(&store, &task, "gpu").await, vec![task.clone()], "requeued on its own pool's queue");
    assert!(queued(&store, &task, "default").await.is_empty(), "and on no other");
    // The default worker is reading and answering, and still never takes the gpu task.
    default_pool_answers(&client).await;
    assert_eq!(field(&store, &task, "holder").await, None);
    // The task's console page says what it waits for once the gpu worker's heartbeat ran out.
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let page = format!("{}/console/tasks/{task}", client.base());
    eventually(PATIENCE, "the task page to name the pool it waits for", || async {
        let body = http.get(&page).send().await.ok()?.text().await.ok()?;
        (body.contains("waiting-for-pool") && body.contains("<code>gpu</code>")).then_some(())
    })
    .await;
    // The overview's pools: gpu has no live worker and this one task queued.
    let overview = http.get(format!("{}/console/", client.base())).send().await.unwrap().text().await.unwrap();
    let pools = overview.split("id=\"pools\"").nth(1).expect("the pools table").split("</table>").next().unwrap();
    let gpu = pools.split("<tr>").find(|row| row.contains("<code>gpu</code>")).expect("a row for gpu");
    assert!(gpu.contains("no live worker"), "{gpu}");
    let cells: Vec<&str> = gpu.split("<td>").collect();
    assert!(cells.get(4).is_some_and(|queued| queued.starts_with("1<")), "one task queued: {gpu}");
    let default = pools.split("<tr>").find(|row| row.contains("<code>default</code>")).expect("a row for default");
    assert!(!default.contains("no live worker"), "{default}");

    let replacement = stack.add_worker_in_pool("gpu", &["--tools", "demo"]).await;
    eventually(PATIENCE, "a worker of the task's pool to claim it again", || async {
        let holder = field(&store, &task, "holder").await?;
        assert!(holder.starts_with(&Stack::worker_prefix(replacement)), "claimed by {holder}");
        Some(())
    })
    .await;
    assert!(taskgate_tests::record_fence(&store, &task).await > first, "claimed again, with a new token");
    assert_eq!(claims(&store, &task).await, 2);
    let body = http.get(&page).send().await.unwrap().text().await.unwrap();
    assert!(!body.contains("waiting-for-pool"), "a running task waits for nothing");
}

/// A rolling move of `sleep` from pool `a` to pool `b`: once `b` serves it, new tasks go to
/// `b` (the pool that most recently started serving it), and a task queued on `a` before stays
/// there for `a`'s workers.
async fn a_tool_moved_to_another_pool_leaves_queued_tasks_where_they_are(topology: Topology) {
    // The console keeps timelines, which count each task's claims.
    let mut stack = topology.builder().workers(0).gateway_args(&["--console"]).spawn().await;
    let (client, store) = (stack.client(0), stack.store());
    stack.add_worker_in_pool("a", &[]).await;
    let on_a = client.create_task("sleep", json!({"ms": 0})).await;
    client.wait_for_status(&on_a, "completed", PATIENCE).await;
    assert_eq!(field(&store, &on_a, "pool").await.as_deref(), Some("a"));

    stack.workers[0].signal("STOP");
    let queued_on_a = client.create_task("sleep", json!({"ms": 0})).await;
    // Pool b publishes its own spec of `sleep` (another poll interval).
    stack.add_worker_in_pool("b", &["--tool-poll-ms", "sleep=777"]).await;
    // The gateways see the new route at their next catalogue refresh; tasks created before
    // then go to `a` and wait there too.
    let mut left_on_a = vec![queued_on_a];
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let on_b = loop {
        let id = client.create_task("sleep", json!({"ms": 0})).await;
        if field(&store, &id, "pool").await.as_deref() == Some("b") {
            break id;
        }
        left_on_a.push(id);
        assert!(tokio::time::Instant::now() < deadline, "new tasks never went to pool b");
        // Paced like `eventually`: a create every 200 ms until the route is seen.
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let done = client.wait_for_status(&on_b, "completed", PATIENCE).await;
    assert_eq!(claims(&store, &on_b).await, 1, "{done}");
    assert_eq!(done["pollIntervalMs"], 777, "b's spec is the one listed: {done}");
    for id in &left_on_a {
        assert_eq!(field(&store, id, "pool").await.as_deref(), Some("a"));
        assert_eq!(queued(&store, id, "a").await.iter().filter(|q| *q == id).count(), 1, "still queued on a");
        assert!(!queued(&store, id, "b").await.contains(id), "never moved to b");
    }

    // Pool a comes back: it runs what was queued for it, each once; the route stays with b.
    let catalogue = store.keys().catalogue();
    let a_live_until = async || -> f64 {
        let score: Option<f64> =
            redis::cmd("ZSCORE").arg(&catalogue.serving).arg("a sleep").query_async(&mut store.conn()).await.unwrap();
        score.unwrap_or(0.0)
    };
    let before = a_live_until().await;
    stack.workers[0].signal("CONT");
    for id in &left_on_a {
        let done = client.wait_for_status(id, "completed", PATIENCE).await;
        assert_eq!(claims(&store, id).await, 1, "{done}");
        let finisher = field(&store, id, "finisher").await.unwrap_or_default();
        assert!(finisher.starts_with(&Stack::worker_prefix(0)), "ran on {finisher}");
    }
    eventually(PATIENCE, "pool a to send a heartbeat again", || async {
        (a_live_until().await > before).then_some(())
    })
    .await;
    let spec: String =
        redis::cmd("HGET").arg(&catalogue.specs).arg("sleep").query_async(&mut store.conn()).await.unwrap();
    let spec: serde_json::Value = serde_json::from_str(&spec).unwrap();
    assert_eq!(spec["pollIntervalMs"], 777, "pool a's heartbeat did not write its own spec over b's");
    let after = client.create_task("sleep", json!({"ms": 0})).await;
    assert_eq!(field(&store, &after, "pool").await.as_deref(), Some("b"), "pool a's heartbeats leave the route");
}

/// Prompts, resources and completions are made by the pool that publishes them, like tools:
/// here the only worker is in pool `gpu`, and its prompt, resource and completion are answered
/// (with nothing queued for the `default` pool, which has no worker).
async fn prompts_and_resources_go_to_the_pool_that_serves_them(topology: Topology) {
    let mut stack = topology.builder().workers(0).spawn().await;
    stack.add_worker_in_pool("gpu", &["--tools", "conformance"]).await;
    let client = stack.client(0);
    let prompt = client.call("prompts/get", json!({"name": "test_simple_prompt"})).await;
    assert_eq!(prompt.status, 200, "{}", prompt.text);
    assert_eq!(
        prompt.result()["messages"][0]["content"]["text"],
        "This is a simple prompt for testing.",
        "{}",
        prompt.text
    );
    let read = client.call("resources/read", json!({"uri": "test://static-text"})).await;
    assert_eq!(read.status, 200, "{}", read.text);
    assert!(read.result()["contents"][0]["text"].is_string(), "{}", read.text);
    let complete = client
        .call(
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"}, "argument": {"name": "arg1", "value": "a"}}),
        )
        .await;
    assert_eq!(complete.status, 200, "{}", complete.text);
    // Nothing waits on the default pool's queues.
    let store = stack.store();
    let backlog = store.backlog(16, taskgate_shared::store::DEFAULT_POOL).await.unwrap();
    assert_eq!(backlog.depth, 0, "no hidden task went to the default pool");
}
