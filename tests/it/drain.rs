//! Draining a backlog: tasks queued while no worker runs, then one worker. What it costs Redis
//! per task must not grow with the worker's concurrency: a worker's claims take the front of the
//! fair ready set together (one batch script per read, per shard), so more slots never mean
//! claims racing for the same front and sent again. Counted with `INFO commandstats`, which
//! counts the commands a script runs too.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;
use taskgate_shared::store::{DEFAULT_POOL, Store};
use taskgate_tests::{Stack, eventually};

const PATIENCE: Duration = Duration::from_secs(120);

/// Tasks per drain: enough that a worker's start and the fleet's background (heartbeats, reaper
/// ticks) are a small share of the calls counted.
const TASKS: usize = 400;

/// Every command's calls so far (`cmdstat_<name>:calls=N,…`), `INFO` itself left out.
async fn command_calls(store: &Store) -> HashMap<String, u64> {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut store.conn()).await.unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats.split(',').find_map(|kv| kv.strip_prefix("calls="))?.parse().ok()?;
            (name != "info").then(|| (name.to_owned(), calls))
        })
        .collect()
}

/// A drain worker's arguments: its tools stay listed for long after it is gone, so the next
/// backlog can be created while no worker runs.
fn worker_args(concurrency: &str) -> [&str; 6] {
    ["--queue-shards", "1", "--catalogue-ttl-ms", "600000", "--concurrency", concurrency]
}

/// Redis calls per task to drain [`TASKS`] no-op tasks, queued while no worker ran, with one
/// worker at `concurrency`; also the calls of each command, per task.
async fn drain(stack: &mut Stack, concurrency: usize) -> (f64, Vec<(String, f64)>) {
    let client = stack.client(0);
    let store = stack.store();
    let mut ids = Vec::with_capacity(TASKS);
    for _ in 0..TASKS / 50 {
        let batch = (0..50).map(|_| client.create_task("noop", json!({})));
        ids.extend(futures::future::join_all(batch).await);
    }
    let queue = store.keys().queue(0, DEFAULT_POOL);
    let leases = store.keys().shard(0).leases;
    let before = command_calls(&store).await;
    let worker = stack.add_worker(&worker_args(&concurrency.to_string())).await;
    // Drained: nothing queued, nothing held, no wake-up left. Each look is three calls, taken
    // off the count below.
    let mut looks = 0u64;
    eventually(PATIENCE, "the backlog to drain", || {
        looks += 1;
        let (store, queue, leases) = (store.clone(), queue.clone(), leases.clone());
        async move {
            let (ready, held, entries): (u64, u64, u64) = redis::pipe()
                .cmd("ZCARD")
                .arg(&queue.ready)
                .cmd("ZCARD")
                .arg(&leases)
                .cmd("XLEN")
                .arg(&queue.stream)
                .query_async(&mut store.conn())
                .await
                .unwrap();
            (ready + held + entries == 0).then_some(())
        }
    })
    .await;
    let after = command_calls(&store).await;
    stack.workers[worker].kill().await;
    for id in &ids {
        let status = client.get_task(id).await.result()["status"].clone();
        assert_eq!(status, "completed", "task {id} after the drain");
    }
    let mut per_command: Vec<(String, f64)> = after
        .iter()
        .map(|(name, calls)| (name.clone(), (calls - before.get(name).copied().unwrap_or(0)) as f64 / TASKS as f64))
        .filter(|(_, per_task)| *per_task > 0.0)
        .collect();
    per_command.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total: u64 = after.iter().map(|(name, calls)| calls - before.get(name).copied().unwrap_or(0)).sum();
    let ours = looks * 3;
    (total.saturating_sub(ours) as f64 / TASKS as f64, per_command)
}

/// The most Redis calls a drained task may cost at 256 slots. Measured 9.5: the claim batch's
/// share (one `XACK` for all its entries, `ZRANGE`, `ZREM`, `ZADD`, `XDEL`, the receipt) and the
/// finish batch's (its script call and `TIME`), plus per task the claim's `HMGET`, `HSET` and
/// timeline `RPUSHX`, and the finish's `HMGET`, `HDEL`, lease `ZREM`, one `HSET`, `RPUSHX` and
/// `PUBLISH`. It was 19.4 while every claim read the answers, steps and related ids a task
/// seldom has, each entry was acked on its own, each end was a script call of its own and wrote
/// its fields in four commands. How many ends gather in one finish call depends on timing (on a
/// loaded machine fewer: at worst each end alone, two calls more per task), so the bound leaves
/// that room and fails when the reads or the finish's writes come back.
const MOST_CALLS_AT_256: f64 = 12.0;

/// Without batch claims, 256 slots sent each claim again about 14 times (every claimer raced
/// for the same front): about five times the calls per task of one slot.
#[tokio::test]
async fn calls_per_task_do_not_grow_with_concurrency() {
    let mut stack = Stack::builder()
        .workers(0)
        .gateway_args(&[
            "--queue-shards",
            "1",
            "--tenant-rps",
            "0",
            "--tenant-create-rps",
            "0",
            "--tenant-max-active-tasks",
            "0",
        ])
        .spawn()
        .await;
    // A worker lists the tool once and goes: the backlogs are created while none runs.
    let first = stack.add_worker(&worker_args("1")).await;
    let client = stack.client(0);
    let warm = client.create_task("noop", json!({})).await;
    client.wait_for_status(&warm, "completed", PATIENCE).await;
    stack.workers[first].kill().await;
    let mut per_task = Vec::new();
    for concurrency in [1, 16, 256] {
        let (calls, by_command) = drain(&mut stack, concurrency).await;
        eprintln!("concurrency {concurrency}: {calls:.1} Redis calls per task; by command: {by_command:.2?}");
        per_task.push((concurrency, calls));
    }
    let at_256 = per_task[2].1;
    assert!(
        at_256 <= MOST_CALLS_AT_256,
        "{at_256:.1} calls per task at 256 slots, over {MOST_CALLS_AT_256}: {per_task:?}"
    );
    let one = per_task[0].1;
    for (concurrency, calls) in &per_task[1..] {
        assert!(
            *calls <= one * 1.25,
            "{calls:.1} calls per task at concurrency {concurrency} against {one:.1} at 1: {per_task:?}"
        );
    }
}
