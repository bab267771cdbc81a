//! `--runtime per-core` on the worker: one single-threaded runtime per lane, each lane reading
//! only its own share of the queue shards (shard `s` on lane `s mod lanes`). A lane that did not
//! read, claim or finish would leave its shards' tasks queued: no other reader takes them.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;
use taskgate_shared::task::TaskId;
use taskgate_tests::{McpClient, Stack, StackBuilder, eventually};

const PATIENCE: Duration = Duration::from_secs(30);

/// Creates tasks of `tool` until every lane of `lanes` has at least one on its shards.
async fn tasks_on_every_lane(client: &McpClient, tool: &str, arguments: serde_json::Value, lanes: u8) -> Vec<String> {
    let mut ids = Vec::new();
    let mut covered = BTreeSet::new();
    while covered.len() < lanes as usize {
        assert!(ids.len() < 500, "500 tasks did not cover {lanes} lanes");
        let id = client.create_task(tool, arguments.clone()).await;
        covered.insert(TaskId::parse(&id).expect("a task id").shard() % lanes);
        ids.push(id);
    }
    ids
}

/// The names of the process's threads (`/proc/<pid>/task/*/comm`).
fn thread_names(pid: u32) -> Vec<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the worker's threads");
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_core_worker_runs_every_shard_on_its_lanes() {
    runs_every_shard_on_its_lanes(Stack::builder()).await;
}

/// On a Cluster each lane runs a reader per shard of its own (a read keeps to one slot).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_core_worker_runs_every_shard_on_its_lanes_on_a_cluster() {
    runs_every_shard_on_its_lanes(Stack::builder().cluster(3)).await;
}

async fn runs_every_shard_on_its_lanes(builder: StackBuilder) {
    let stack =
        builder.worker_args(&["--runtime", "per-core", "--runtime-threads", "3", "--concurrency", "6"]).spawn().await;
    let names = thread_names(stack.workers[0].pid());
    for lane in ["taskgate-lane-1", "taskgate-lane-2"] {
        assert!(names.iter().any(|n| n == lane), "no thread {lane} among {names:?}");
    }
    let client = stack.client(0);
    let mut ids = tasks_on_every_lane(&client, "sleep", json!({"ms": 0}), 3).await;
    // And a burst beside them, more than the worker's slots.
    ids.extend(futures::future::join_all((0..40).map(|_| client.create_task("sleep", json!({"ms": 0})))).await);
    for id in &ids {
        client.wait_for_status(id, "completed", PATIENCE).await;
    }
}

/// A lane's runs live on its own runtime: on SIGTERM the worker waits for every lane's runs to
/// finish, not only the first lane's, and ends each with the claim it had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_per_core_worker_lets_every_lane_finish() {
    let mut stack = Stack::builder()
        .worker_args(&["--runtime", "per-core", "--runtime-threads", "2", "--concurrency", "8"])
        .spawn()
        .await;
    let client = stack.client(0);
    let ids = tasks_on_every_lane(&client, "sleep", json!({"ms": 4_000}), 2).await;
    let store = stack.store();
    let mut fences = Vec::new();
    for id in &ids {
        let fence = eventually(PATIENCE, "the worker to claim the task", || {
            let store = store.clone();
            async move {
                let fence = taskgate_tests::record_fence(&store, id).await;
                (fence > 0).then_some(fence)
            }
        })
        .await;
        fences.push(fence);
    }
    stack.workers[0].signal("TERM");
    assert_eq!(stack.workers[0].wait_exit(PATIENCE).await, Some(0));
    for (id, fence) in ids.iter().zip(fences) {
        let r = client.get_task(id).await;
        assert_eq!(r.result()["status"], "completed", "task {id}: {}", r.text);
        assert_eq!(taskgate_tests::result_token(r.result()), fence, "task {id} finished by the claim it had");
    }
}

/// Each lane has its own pool of blocking connections; `/metrics` shows the worker's, the
/// lanes' pools summed: with one reader per shard (`--redis-single-slot`), four shards over two
/// lanes make four blocking connections, as on one lane.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_gauges_sum_every_lane_s_pool() {
    let mut stack = Stack::builder().workers(0).env("TASKGATE_QUEUE_SHARDS", "4").spawn().await;
    let listen = format!("127.0.0.1:{}", taskgate_tests::free_port());
    let per_core = ["--runtime", "per-core", "--runtime-threads", "2", "--redis-single-slot"];
    stack.add_worker(&[&per_core[..], &["--metrics-listen", &listen]].concat()).await;
    let metrics = format!("http://{listen}/metrics");
    eventually(PATIENCE, "four blocking readers over the two lanes' pools", || async {
        let scrape = taskgate_tests::Scrape::of(&metrics).await;
        let gauge = |name: &str, labels: &[(&str, &str)]| scrape.present(name, labels);
        let max = gauge("taskgate_redis_pool_max_connections", &[("pool", "blocking")]);
        let in_use = gauge("taskgate_redis_pool_connections", &[("pool", "blocking"), ("state", "in_use")]);
        (max == 4.0 && in_use == 4.0).then_some(())
    })
    .await;
    let client = stack.client(0);
    let ids = tasks_on_every_lane(&client, "sleep", json!({"ms": 0}), 2).await;
    for id in &ids {
        client.wait_for_status(id, "completed", PATIENCE).await;
    }
}
