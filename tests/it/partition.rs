//! Exclusivity under partitions, not only kills. Three workers reach Redis through fault
//! proxies while a steady load of `ledger` tasks runs: one worker at a time is partitioned for
//! longer than the lease (then healed, or its connections cut), slowed so its renewals come
//! late, or killed with `kill -9`. The `ledger` tool appends its fencing token to a file
//! outside Redis at every step, a side effect fencing cannot guard; afterwards a checker proves:
//!
//! - nothing was lost: every task the gateway acknowledged completed;
//! - no two runs of one task overlapped: each ledger's tokens never go down;
//! - the accepted result came from the newest run: its token is the ledger's largest and the
//!   record's;
//! - no task was ended twice: one terminal event each on the events channel, and at most one
//!   "outcome written" per task across the workers' logs.
//!
//! Short form by default (CI: at least 300 tasks and 6 faults); the long form behind
//! `docs/reliability.md`'s figures:
//! `TASKGATE_PARTITION_TASKS=10000 TASKGATE_PARTITION_FAULTS=40 cargo test --test partition -- --nocapture`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use rand::Rng as _;
use serde_json::{Value, json};
use taskgate_shared::task::TaskId;
use taskgate_tests::{FaultProxy, McpClient, Stack};

const LEASE_MS: u64 = 1_500;

/// A task record's status, result, fencing token and reclaim count.
type Record = (Option<String>, Option<u64>, Option<u64>);

#[derive(Debug, Default)]
struct Faults {
    partitions: usize,
    cuts: usize,
    delays: usize,
    kills: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn partitions_delays_and_kills_never_overlap_two_runs_of_a_task() {
    let total: usize = std::env::var("TASKGATE_PARTITION_TASKS").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
    // Faults go on until at least this many were injected and `total` tasks were created.
    let min_faults: usize = std::env::var("TASKGATE_PARTITION_FAULTS").ok().and_then(|s| s.parse().ok()).unwrap_or(6);
    let ledger_dir = tempfile::tempdir().unwrap();
    let dir = ledger_dir.path().display().to_string();
    // The fleet limits are off: the load is one tenant, on purpose far above a tenant's default.
    let mut stack = Stack::builder()
        .workers(0)
        .gateway_args(&["--tenant-rps", "0", "--tenant-create-rps", "0", "--tenant-max-active-tasks", "0"])
        .spawn()
        .await;
    let lease = LEASE_MS.to_string();
    let worker_args = ["--lease-ms", lease.as_str(), "--max-reclaims", "1000", "--ledger-dir", dir.as_str()];
    let mut proxies = Vec::new();
    for _ in 0..3 {
        let proxy = FaultProxy::start(([127, 0, 0, 1], stack.redis.port()).into()).await;
        stack.add_worker_via(&proxy.url(), &worker_args).await;
        proxies.push(proxy);
    }

    // Every terminal event, per task, straight from Redis (not through any proxy).
    let terminal_events: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let events = tokio::spawn(count_terminal_events(
        stack.redis.url(),
        stack.store().keys().events_channel(),
        terminal_events.clone(),
    ));

    let client = Arc::new(stack.client(0));
    // One call first, so the gateway's catalogue cache has the workers' tools before 32
    // clients ask at once.
    taskgate_tests::eventually(Duration::from_secs(10), "the gateway to know the ledger tool", || async {
        let r = client.call("tools/call", json!({"name": "ledger", "arguments": {"steps": 1}})).await;
        (r.result()["resultType"] == "task").then_some(())
    })
    .await;
    let created: Arc<Mutex<Vec<String>>> = Arc::default();
    let next = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let loads: Vec<_> = (0..32)
        .map(|_| tokio::spawn(run_client(client.clone(), stop.clone(), next.clone(), created.clone())))
        .collect();

    // One fault at a time, on a random worker, while the load runs.
    let started = Instant::now();
    let mut faults = Faults::default();
    let lease = Duration::from_millis(LEASE_MS);
    while faults.partitions + faults.delays + faults.kills < min_faults || created.lock().unwrap().len() < total {
        let victim = rand::rng().random_range(0..proxies.len());
        let proxy = &proxies[victim];
        match rand::rng().random_range(0..4) {
            0 | 1 => {
                proxy.partition();
                tokio::time::sleep(lease.mul_f64(rand::rng().random_range(1.5..2.5))).await;
                if rand::rng().random_bool(0.5) {
                    proxy.cut();
                    faults.cuts += 1;
                }
                proxy.heal();
                faults.partitions += 1;
            }
            2 => {
                proxy.delay(Duration::from_millis(rand::rng().random_range(100..400)));
                tokio::time::sleep(lease * 2).await;
                proxy.heal();
                faults.delays += 1;
            }
            _ => {
                stack.workers[victim].kill().await;
                stack.workers[victim].restart().await;
                faults.kills += 1;
            }
        }
        tokio::time::sleep(lease).await;
    }
    stop.store(true, Ordering::SeqCst);
    for load in loads {
        load.await.unwrap();
    }
    let elapsed = started.elapsed();

    // Check every task straight from Redis.
    let ids = created.lock().unwrap().clone();
    let total = ids.len();
    let store = stack.store();
    let mut reclaims = 0u64;
    let mut overlaps = Vec::new();
    let mut not_newest = Vec::new();
    for chunk in ids.chunks(500) {
        let mut pipe = redis::pipe();
        for id in chunk {
            let id = TaskId::parse(id).unwrap();
            pipe.cmd("HMGET").arg(store.keys().task(&id).record).arg(&["status", "fence", "reclaims"]);
        }
        let records: Vec<Record> = pipe.query_async(&mut store.conn()).await.unwrap();
        // The result as every reader gets it (a long one is kept beside the record).
        let snapshots = futures::future::join_all(chunk.iter().map(|id| {
            let store = store.clone();
            async move { store.get_task(&TaskId::parse(id).unwrap()).await.unwrap() }
        }))
        .await;
        for ((id, (status, fence, reclaimed)), snapshot) in chunk.iter().zip(records).zip(snapshots) {
            assert_eq!(status.as_deref(), Some("completed"), "lost or stuck: {id}");
            reclaims += reclaimed.unwrap_or(0);
            let tokens = taskgate_tests::ledger_tokens(ledger_dir.path(), id);
            if tokens.windows(2).any(|w| w[0] > w[1]) {
                overlaps.push((id.clone(), tokens.clone()));
            }
            let result: Value = serde_json::from_str(snapshot.and_then(|s| s.result).expect("a result").get()).unwrap();
            let winner = result["structuredContent"]["fencingToken"].as_u64();
            if winner != tokens.iter().max().copied() || winner != fence {
                not_newest.push((id.clone(), winner, fence, tokens));
            }
        }
    }
    assert!(
        overlaps.is_empty(),
        "{} tasks had overlapping runs: {:?}",
        overlaps.len(),
        &overlaps[..overlaps.len().min(3)]
    );
    assert!(not_newest.is_empty(), "results not from the newest run: {:?}", &not_newest[..not_newest.len().min(3)]);

    // Exactly one terminal event per task; the subscriber may trail the last writes a little.
    let counted = taskgate_tests::eventually(Duration::from_secs(10), "a terminal event for every task", || {
        let events = terminal_events.clone();
        let ids = &ids;
        async move {
            let events = events.lock().unwrap();
            ids.iter().all(|id| events.contains_key(id)).then(|| events.clone())
        }
    })
    .await;
    events.abort();
    let doubles: Vec<_> = counted.iter().filter(|(_, n)| **n > 1).collect();
    assert!(doubles.is_empty(), "tasks ended twice: {doubles:?}");
    let mut written: HashMap<String, usize> = HashMap::new();
    for worker in &stack.workers {
        for line in worker.log().lines().filter(|l| l.contains("\"outcome written\"")) {
            if let Some(id) =
                serde_json::from_str::<Value>(line).ok().and_then(|l| l["task_id"].as_str().map(str::to_owned))
            {
                *written.entry(id).or_default() += 1;
            }
        }
    }
    assert!(written.values().all(|n| *n <= 1), "an outcome accepted twice");
    let stopped: usize =
        stack.workers.iter().map(|w| w.log().matches("lease no longer known to be valid").count()).sum();
    assert!(faults.partitions + faults.delays + faults.kills > 0, "faults were injected");
    println!(
        "partition: {total} tasks in {elapsed:.1?}; {} partitions ({} ended by cutting the connections), {} slowdowns, \
         {} kills; {reclaims} reclaims, {stopped} runs stopped for an unconfirmed lease; lost 0, overlapping runs 0, \
         results not from the newest run 0, tasks ended twice 0",
        faults.partitions, faults.cuts, faults.delays, faults.kills,
    );
}

/// Creates `ledger` tasks until told to stop, each followed to its end before the next.
async fn run_client(
    client: Arc<McpClient>,
    stop: Arc<AtomicBool>,
    next: Arc<AtomicUsize>,
    created: Arc<Mutex<Vec<String>>>,
) {
    while !stop.load(Ordering::SeqCst) {
        let n = next.fetch_add(1, Ordering::SeqCst);
        // Mostly short runs; one in ten lasts about two leases, so partitions catch tools running.
        let arguments = if n.is_multiple_of(10) {
            json!({"steps": 30, "stepMs": 100})
        } else {
            json!({"steps": 1 + n % 4, "stepMs": 10 + (n * 7) % 40})
        };
        let id = client.create_task("ledger", arguments).await;
        created.lock().unwrap().push(id.clone());
        loop {
            let r = client.get_task(&id).await;
            let status = r.result()["status"].as_str().unwrap_or_default().to_owned();
            if ["completed", "failed", "cancelled"].contains(&status.as_str()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Counts terminal events (`<id> <version> <status>`) per task id.
async fn count_terminal_events(url: String, channel: String, counts: Arc<Mutex<HashMap<String, usize>>>) {
    let client = redis::Client::open(url).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.subscribe(&channel).await.unwrap();
    let mut messages = pubsub.on_message();
    while let Some(message) = messages.next().await {
        let Ok(payload) = message.get_payload::<String>() else { continue };
        let mut parts = payload.split(' ');
        let (Some(id), Some(_), Some(status)) = (parts.next(), parts.next(), parts.next()) else { continue };
        if ["completed", "failed", "cancelled"].contains(&status) {
            *counts.lock().unwrap().entry(id.to_owned()).or_default() += 1;
        }
    }
}
