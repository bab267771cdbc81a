//! Draining a backlog: tasks queued while no worker runs, then one worker. What it costs Redis
//! per task must not grow with the worker's concurrency: a worker's claims take the front of the
//! fair ready set together (one batch script per read, per shard), so more slots never mean
//! claims racing for the same front and sent again. Counted with `INFO commandstats`, which
//! counts the commands a script runs too.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;
use taskgate_shared::store::{DEFAULT_POOL, Store};
use taskgate_tests::{McpClient, Scrape, Stack, eventually, free_port};

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
fn worker_args<'a>(shards: &'a str, concurrency: &'a str) -> [&'a str; 6] {
    ["--queue-shards", shards, "--catalogue-ttl-ms", "600000", "--concurrency", concurrency]
}

/// A stack over `shards` queue shards whose gateway takes a backlog at any rate, and whose
/// catalogue lists the no-op tool from a worker already gone: backlogs are created while no
/// worker runs.
async fn backlog_stack(shards: &str) -> Stack {
    let mut stack = Stack::builder()
        .workers(0)
        .gateway_args(&[
            "--queue-shards",
            shards,
            "--tenant-rps",
            "0",
            "--tenant-create-rps",
            "0",
            "--tenant-max-active-tasks",
            "0",
        ])
        .spawn()
        .await;
    let listed = stack.add_worker(&worker_args(shards, "1")).await;
    let client = stack.client(0);
    let warm = client.create_task("noop", json!({})).await;
    client.wait_for_status(&warm, "completed", PATIENCE).await;
    stack.workers[listed].kill().await;
    stack
}

/// [`TASKS`] no-op tasks, created 50 at a time.
async fn create_backlog(client: &McpClient) -> Vec<String> {
    let mut ids = Vec::with_capacity(TASKS);
    for _ in 0..TASKS / 50 {
        ids.extend(futures::future::join_all((0..50).map(|_| client.create_task("noop", json!({})))).await);
    }
    ids
}

/// Redis calls per task to drain [`TASKS`] no-op tasks, queued while no worker ran, with one
/// worker at `concurrency`; also the calls of each command, per task.
async fn drain(stack: &mut Stack, concurrency: usize) -> (f64, Vec<(String, f64)>) {
    let client = stack.client(0);
    let store = stack.store();
    let ids = create_backlog(&client).await;
    let queue = store.keys().queue(0, DEFAULT_POOL);
    let leases = store.keys().shard(0).leases;
    let before = command_calls(&store).await;
    let worker = stack.add_worker(&worker_args("1", &concurrency.to_string())).await;
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

/// The commands a drained task costs a set number of times however its claims and ends gather
/// into batches (how many gather depends on timing: on a loaded machine fewer): the claim's
/// record read (`HMGET`), its one `HSET` and its timeline entry (`RPUSHX`); the finish's read,
/// the fields it drops (`HDEL`), the lease index's entry (`ZREM`), its one `HSET`, its timeline
/// entry and its event (`PUBLISH`). Measured at that, to the hundredth, at every concurrency.
/// (The finish once wrote its fields in four commands, not one.)
const PER_TASK: [(&str, f64); 6] =
    [("hmget", 2.0), ("hset", 2.0), ("rpushx", 2.0), ("hdel", 1.0), ("zrem", 1.0), ("publish", 1.0)];

/// What a claim batch adds once, whatever the number of its tasks: the fair floor's `HSET`, the
/// ready set's `ZREM`, the spent tag's `HDEL` (one tenant here) and the receipt's `GET`. Counted
/// by the batches' one `XACK` each, and taken off, so what is left is the tasks' own.
const PER_CLAIM_BATCH: [&str; 4] = ["hset", "zrem", "hdel", "get"];

/// What a claim reads beside the record only when the task has something there: answers and
/// steps (`HGETALL`), related ids (`GET`). A no-op task has none, so none a task: every claim
/// read them once, one `HGETALL` or `GET` a task each.
const SKIPPED_READS: [&str; 2] = ["hgetall", "get"];

/// Room a command for calls that are not the tasks' (the worker's start: its scripts, its
/// tools): a quarter of a call a task. A read or write that came back for every task is a
/// whole call a task more.
const ROOM: f64 = 0.25;

/// Where a drain's calls per task (by command) go over [`PER_TASK`] and [`SKIPPED_READS`], the
/// claim batches' share taken off; empty when they do not. Timing plays no part: a drain of one
/// task a batch and one of all at once have the same tasks' own calls.
fn over_the_tasks_own(by_command: &[(String, f64)]) -> Vec<String> {
    let calls = |name: &str| by_command.iter().find(|(n, _)| n == name).map_or(0.0, |(_, per_task)| *per_task);
    let batches = calls("xack");
    let own = |name: &str| calls(name) - if PER_CLAIM_BATCH.contains(&name) { batches } else { 0.0 };
    let most = PER_TASK.into_iter().chain(SKIPPED_READS.map(|name| (name, 0.0)));
    most.filter(|(name, most)| own(name) > most + ROOM)
        .map(|(name, most)| format!("{name}: {:.2} a task, over {most}", own(name)))
        .collect()
}

/// Without batch claims, 256 slots sent each claim again about 14 times (every claimer raced
/// for the same front): about five times the calls per task of one slot.
#[tokio::test]
async fn calls_per_task_do_not_grow_with_concurrency() {
    let mut stack = backlog_stack("1").await;
    let mut per_task = Vec::new();
    for concurrency in [1, 16, 256] {
        let (calls, by_command) = drain(&mut stack, concurrency).await;
        eprintln!("concurrency {concurrency}: {calls:.1} Redis calls per task; by command: {by_command:.2?}");
        // Every claim and every finish reads its record: the count saw the drain.
        let hmget = by_command.iter().find(|(name, _)| name == "hmget").map_or(0.0, |(_, per_task)| *per_task);
        assert!(hmget >= 2.0, "{hmget:.2} record reads a task; by command: {by_command:.2?}");
        let over = over_the_tasks_own(&by_command);
        assert!(over.is_empty(), "at concurrency {concurrency}, {over:?}; by command: {by_command:.2?}");
        per_task.push((concurrency, calls));
    }
    let one = per_task[0].1;
    for (concurrency, calls) in &per_task[1..] {
        assert!(
            *calls <= one * 1.25,
            "{calls:.1} calls per task at concurrency {concurrency} against {one:.1} at 1: {per_task:?}"
        );
    }
}

/// The claim calls (`claim_batch`) per delivery read, and the finish scripts (`finish_batch`,
/// and `finish_task` for an end sent alone) per task, to drain [`TASKS`] no-op tasks queued
/// over `shards` queue shards while no worker ran, with one worker of 256 slots; read from the
/// worker's own count of its Redis calls and Redis's count of reads.
async fn script_calls_per_task(shards: usize) -> DrainCalls {
    let shards_arg = shards.to_string();
    let mut stack = backlog_stack(&shards_arg).await;
    let client = stack.client(0);
    let ids = create_backlog(&client).await;
    let listen = format!("127.0.0.1:{}", free_port());
    let worker =
        stack.add_worker(&[&worker_args(&shards_arg, "256")[..], &["--metrics-listen", &listen]].concat()).await;
    let store = stack.store();
    let reads_before = command_calls(&store).await.get("xreadgroup").copied().unwrap_or(0);
    eventually(PATIENCE, "the backlog to drain", || {
        let store = store.clone();
        async move {
            let mut pipe = redis::pipe();
            for shard in 0..shards as u8 {
                let queue = store.keys().queue(shard, DEFAULT_POOL);
                pipe.cmd("ZCARD").arg(&queue.ready).cmd("ZCARD").arg(store.keys().shard(shard).leases);
                pipe.cmd("XLEN").arg(&queue.stream);
            }
            let counts: Vec<u64> = pipe.query_async(&mut store.conn()).await.unwrap();
            (counts.iter().sum::<u64>() == 0).then_some(())
        }
    })
    .await;
    let metrics = Scrape::of(&format!("http://{listen}/metrics")).await;
    let reads = command_calls(&store).await.get("xreadgroup").copied().unwrap_or(0) - reads_before;
    stack.workers[worker].kill().await;
    for id in &ids {
        assert_eq!(client.get_task(id).await.result()["status"], "completed", "task {id} after the drain");
    }
    let calls = |script: &str| {
        metrics.get("taskgate_redis_command_duration_seconds_count", &[("command", &format!("script:{script}"))])
    };
    DrainCalls {
        claims_per_read: calls("claim_batch") / reads.max(1) as f64,
        finishes_per_task: (calls("finish_batch") + calls("finish_task")) / TASKS as f64,
    }
}

/// What [`script_calls_per_task`] counts.
#[derive(Debug)]
struct DrainCalls {
    /// `claim_batch` calls per delivery read (`XREADGROUP`).
    claims_per_read: f64,
    /// Finish script calls per task.
    finishes_per_task: f64,
}

/// On a Redis that is not a Cluster one `claim_batch` call claims for every shard one read
/// delivered from, and one `finish_batch` call takes the ends of every shard that gathered:
/// spread over 16 queue shards, a drain costs about as many claim calls per read and finish
/// calls per task as over one. A read's deliveries are claimed as its slots allow: a read that
/// brought more than there were free slots (up to one per shard more) is claimed in parts, as
/// slots free, so over 16 shards 2.8 to 3 calls a read were measured, against 1 over one
/// shard. Sent a call per shard, a read over 16 shards made 12.5 (a call for each shard it
/// delivered from), and the ends went about 16 a call, not the whole burst.
#[tokio::test]
async fn claim_and_finish_batches_span_shards_on_a_standalone_redis() {
    let one = script_calls_per_task(1).await;
    let sixteen = script_calls_per_task(16).await;
    eprintln!("over 1 shard: {one:.3?}; over 16: {sixteen:.3?}");
    assert!(one.claims_per_read > 0.0 && one.finishes_per_task > 0.0, "the worker counted its claim and finish calls");
    assert!(
        sixteen.claims_per_read <= one.claims_per_read * 6.0,
        "{:.2} claim calls a read over 16 shards against {:.2} over 1",
        sixteen.claims_per_read,
        one.claims_per_read
    );
    assert!(
        sixteen.finishes_per_task <= one.finishes_per_task * 2.0 + 0.02,
        "{:.3} finish calls a task over 16 shards against {:.3} over 1",
        sixteen.finishes_per_task,
        one.finishes_per_task
    );
}
