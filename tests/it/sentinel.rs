//! Redis behind Sentinel: the binaries find the primary from the sentinels alone, follow it
//! through a `kill -9` failover (a task running across it completes under the lease it had, a
//! listen stream open across it hears the task's later changes, creates during it fail fast and
//! retryable), a claim lost in a failover never hands its fencing token out again, and bad
//! sentinel settings are refused or reported at start. At the defaults (the outside check's
//! setup), every acknowledged task ends soon after a `kill -9` failover, none waiting for its
//! lease; and a primary the sentinels have replaced, which the processes still reach, is left
//! for the new one.
//!
//! The chaos harness's failover mode is here too ([`failovers_under_load`]): repeated `kill -9`
//! of the primary under a 32-client create/get/lifecycle load of `ledger` tasks, with and
//! without `--durability-replicas` (every replica), checked for lost creates, unfinished tasks, overlapping
//! runs and terminal states that change, and timed from each kill to the first create that
//! succeeds again. Run with `--nocapture` to see the figures `docs/durability.md` quotes.

use std::time::{Duration, Instant};

use serde_json::json;
use taskgate_shared::store::{DEFAULT_POOL, Delivery, Endpoint, Store};
use taskgate_shared::task::{Owner, TaskId};
use taskgate_tests::sentinel::{LoneSentinel, MASTER, SentinelSet};
use taskgate_tests::{FaultProxy, RedisServer, Scrape, Stack, eventually};

const PATIENCE: Duration = Duration::from_secs(60);

/// A stack whose gateway and worker know only the sentinels' addresses. The lease outlasts a
/// failover here (about 3 s), so the worker keeps it across one.
async fn sentinel_stack(set: &SentinelSet) -> Stack {
    sentinel_stack_with(set, &[]).await
}

/// [`sentinel_stack`] with more gateway options.
async fn sentinel_stack_with(set: &SentinelSet, gateway_args: &[&str]) -> Stack {
    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let url = set.url();
    let mut args = vec!["--redis-timeout-ms", "1000", "--console"];
    args.extend_from_slice(gateway_args);
    let gateway = stack.add_gateway_unready(&url, &args).await;
    let base = stack.gateways[gateway].url.clone().unwrap();
    eventually(PATIENCE, "the gateway to be ready through the sentinels", || async {
        let status = reqwest::get(format!("{base}/readyz")).await.ok()?.status();
        (status == 200).then_some(())
    })
    .await;
    stack.add_worker_via(&url, &["--lease-ms", "10000", "--redis-timeout-ms", "1000"]).await;
    stack
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stack_finds_the_primary_through_the_sentinels_and_follows_a_failover() {
    let mut set = SentinelSet::start().await;
    let stack = sentinel_stack(&set).await;
    let client = stack.client(0);
    let before = client.create_task("sleep", json!({"ms": 0})).await;
    client.wait_for_status(&before, "completed", PATIENCE).await;

    // A task runs across the failover, watched by a listen stream opened before it.
    let running = client.create_task("sleep", json!({"ms": 6_000})).await;
    let store = Store::connect_lazy(&Endpoint::new(set.url()), &stack.namespace, Duration::from_secs(2)).unwrap();
    let claimed =
        eventually(PATIENCE, "the task to be claimed", || async { fence(&store, &running).await.filter(|f| *f > 0) })
            .await;
    // The claim reaches the replica before the primary dies.
    let acked = taskgate_tests::replicated(&set.nodes[set.primary_index().await], 1, Duration::from_secs(5)).await;
    assert_eq!(acked, 1);
    let (_, mut stream) =
        client.open_stream("subscriptions/listen", json!({"notifications": {"taskIds": [&running]}})).await;
    assert_eq!(stream.status, 200);

    let failed_over = Instant::now();
    let promoted = set.fail_over().await;
    // While the gateway finds the new primary, a create either succeeds or is refused fast and
    // retryable; once the sentinels have promoted the replica it succeeds.
    let after = eventually(PATIENCE, "a create to succeed after the failover", || async {
        let sent = Instant::now();
        let r = client.call("tools/call", json!({"name": "sleep", "arguments": {"ms": 0}})).await;
        let took = sent.elapsed();
        if r.status == 200 && r.result()["resultType"] == "task" {
            return r.result()["taskId"].as_str().map(str::to_owned);
        }
        assert_eq!((r.status, r.error_code()), (503, Some(-32603)), "retryable while no primary: {}", r.text);
        assert_eq!(r.header("retry-after"), Some("1"));
        assert!(took < Duration::from_secs(4), "refused within the Redis timeout, not hung: {took:?}");
        None
    })
    .await;
    eprintln!("creates succeeded again {:?} after the kill", failed_over.elapsed());
    client.wait_for_status(&after, "completed", PATIENCE).await;

    // The task that was running completes under its own claim, and the stream hears it.
    let done = client.wait_for_status(&running, "completed", PATIENCE).await;
    let token = taskgate_tests::result_token(&done);
    let fence = eventually(PATIENCE, "the record to be read", || fence(&store, &running)).await;
    // The failover was shorter than the lease: the worker kept it, and the claim made before
    // the kill is the one that finished the task.
    assert_eq!((token, fence), (claimed, claimed), "finished by the claim it had: {done}");
    // The stream re-subscribed and re-read the task: its completion arrives (the stream keeps
    // alive with comments meanwhile, within next_message's patience).
    let heard = loop {
        let message = stream.next_message(PATIENCE).await.expect("the stream stays open across the failover");
        if message["params"]["status"] == "completed" {
            break message;
        }
    };
    assert_eq!(heard["params"]["taskId"], running.as_str());

    // The new primary holds everything, and the gateway counted the failover.
    let mut conn = set.nodes[promoted].connection().await;
    let role: Vec<redis::Value> = redis::cmd("ROLE").query_async(&mut conn).await.unwrap();
    assert_eq!(role.first(), Some(&redis::Value::BulkString(b"master".to_vec())));
    let metrics = Scrape::of(&format!("{}/metrics", client.base())).await;
    assert!(metrics.sum("taskgate_redis_failovers_total", &[]) >= 1.0, "the failover is counted");
    assert!(stack.gateways[0].log().contains("the redis primary moved"), "and logged with the new address");
    // The console says which primary the gateway follows now, and that it followed a failover.
    let new_primary = format!("127.0.0.1:{}", set.nodes[promoted].port());
    let overview = reqwest::get(format!("{}/console/", client.base())).await.unwrap().text().await.unwrap();
    let redis = overview.split("id=\"redis\"").nth(1).expect("the Redis line").split("</p>").next().unwrap();
    assert!(redis.contains(&new_primary) && redis.contains(MASTER), "{redis}");
    assert!(!redis.contains("followed: 0"), "{redis}");
}

/// The task's fencing token, or `None` when this read failed: the first command after a
/// failover fails (the store does not resend what may have been applied), the next succeeds.
async fn fence(store: &Store, task_id: &str) -> Option<u64> {
    let record = store.keys().task(&TaskId::parse(task_id)?).record;
    let fence: Option<String> =
        redis::cmd("HGET").arg(record).arg("fence").query_async(&mut store.conn()).await.ok()?;
    Some(fence.map_or(0, |f| f.parse().unwrap()))
}

/// A claim acknowledged by a primary that died before replicating it: the promoted replica
/// never saw it, and the next claim there must get another token, or two runs would pass every
/// fenced write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_lost_in_a_failover_never_repeats_its_token() {
    let mut primary = RedisServer::start().await;
    let replica = RedisServer::start_replica_of(&primary).await;
    let namespace = taskgate_tests::unique_namespace();
    let store = Store::connect_lazy(&Endpoint::new(primary.url()), &namespace, Duration::from_secs(2)).unwrap();
    store.ensure_groups(16, DEFAULT_POOL).await.unwrap();
    let owner = Owner { tenant: "acme".into(), principal: "alice".into() };
    let id = taskgate_tests::write_task(&store, &owner).await;
    let acked = taskgate_tests::replicated(&primary, 1, Duration::from_secs(5)).await;
    assert_eq!(acked, 1, "the task reached the replica");

    // The replica stops following (as one cut off from the primary is, the moment before a
    // failover promotes it); the primary acknowledges a claim the replica never gets, and dies.
    let mut promoted = replica.connection().await;
    let _: () = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query_async(&mut promoted).await.unwrap();
    let lost = claim(&store, &id, "w-old").await.expect("claimed on the old primary");
    primary.kill().await;

    let store = Store::connect_lazy(&Endpoint::new(replica.url()), &namespace, Duration::from_secs(2)).unwrap();
    assert_eq!(taskgate_tests::record_fence(&store, id.as_str()).await, 0, "the claim was lost");
    let again = claim(&store, &id, "w-new").await.expect("claimed on the promoted replica");
    assert!(again.fence > lost.fence, "a new token, never the lost one: {} then {}", lost.fence, again.fence);
}

/// Reads the task's wake-up on its shard, as a worker does, and claims.
async fn claim(store: &Store, id: &TaskId, worker: &str) -> Option<taskgate_shared::store::Claim> {
    let mut reader = store.blocking_connection().await.unwrap();
    let deliveries = store
        .read_deliveries(&mut reader, &[id.shard()], DEFAULT_POOL, worker, 1, Duration::from_millis(500))
        .await
        .unwrap();
    let mut delivery: Delivery = deliveries.into_iter().next().expect("a wake-up");
    store.claim(&mut delivery, DEFAULT_POOL, worker, Duration::from_secs(30)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sentinel_settings_are_refused_or_reported_at_start() {
    let set = SentinelSet::start().await;
    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let sentinel = set.url().split("//").nth(1).unwrap().split('/').next().unwrap().to_owned();

    // No master name: a configuration error, and the process stops.
    let i = stack.add_gateway_unready(&format!("redis+sentinel://{sentinel}"), &[]).await;
    assert_ne!(stack.gateways[i].wait_exit(PATIENCE).await, Some(0));
    assert!(stack.gateways[i].log().contains("ends with the master's name"), "{}", stack.gateways[i].log());

    // A master the sentinels do not know, and sentinels nobody answers at: not ready, and said.
    let unknown = stack.add_gateway_unready(&format!("redis+sentinel://{sentinel}/no-such-master"), &[]).await;
    let nobody = stack.add_gateway_unready("redis+sentinel://127.0.0.1:1,127.0.0.1:2/taskgate", &[]).await;
    for (i, why) in [(unknown, "no-such-master"), (nobody, "127.0.0.1:1,127.0.0.1:2")] {
        let base = stack.gateways[i].url.clone().unwrap();
        let deadline = Instant::now() + PATIENCE;
        let said = |l: &str| {
            l.contains("redis is not usable yet") && l.contains("no sentinel named a primary") && l.contains(why)
        };
        while !stack.gateways[i].log().lines().any(said) {
            assert!(Instant::now() < deadline, "no line says {why:?}:\n{}", stack.gateways[i].log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let status = reqwest::get(format!("{base}/readyz")).await.unwrap().status();
        assert_eq!(status, 503, "not ready without a primary");
    }
    // The real master name works on the same sentinels.
    let good = stack.add_gateway_unready(&format!("redis+sentinel://{sentinel}/{MASTER}"), &[]).await;
    let base = stack.gateways[good].url.clone().unwrap();
    eventually(PATIENCE, "the gateway with the right master to be ready", || async {
        (reqwest::get(format!("{base}/readyz")).await.ok()?.status() == 200).then_some(())
    })
    .await;
}

/// How many primaries [`failovers_under_load`] kills.
const FAILOVERS: usize = 3;

/// How many replicas the primary of [`failovers_under_load`] has: the shape of the usual
/// Sentinel charts (a primary and two replicas).
const REPLICAS: usize = 2;

/// What one client of [`failovers_under_load`] does.
#[derive(Clone, Copy, PartialEq)]
enum Role {
    /// Creates without pause (one read of each task), so the first create that succeeds after a
    /// kill says when the stack took creates again.
    Creator,
    /// Creates a task and follows it with `tasks/get` to its end, then the next.
    Lifecycle,
}

/// An acknowledged create.
struct Acked {
    id: String,
    sent: Instant,
    at: Instant,
}

/// What [`failovers_under_load`] saw.
#[derive(Default)]
struct FailoverRun {
    acknowledged: usize,
    /// For each `kill -9`: from the kill to the first create sent after it that succeeded.
    windows: Vec<Duration>,
    /// Acknowledged creates the last primary does not know.
    lost: Vec<String>,
    /// Known, but not terminal after the wait.
    unfinished: Vec<String>,
    /// Ended other than completed.
    not_completed: Vec<String>,
    /// A ledger whose tokens go down: two runs of the task overlapped.
    overlapping: Vec<String>,
    /// The accepted result is not the newest run's: the largest token in the ledger, and the
    /// record's (each with the tokens seen).
    not_newest: Vec<String>,
    /// Tasks a client saw terminal and later saw otherwise (or with another result).
    changed: Vec<String>,
    /// Tasks with more than one accepted outcome across the workers' logs: a completion
    /// acknowledged by a primary that died before its replicas had it, run again.
    redone: Vec<String>,
    /// When each lost create was acknowledged, before the kill that came next.
    lost_before_kill: Vec<Duration>,
    /// Reclaims of expired leases, over every task (the records' counts).
    reclaims: u64,
}

/// The chaos harness's failover mode: 32 clients (8 creating without pause, 24 following each
/// task to its end) run `ledger` tasks through one gateway and two workers that know only the
/// sentinels, while the primary is killed with `kill -9` [`FAILOVERS`] times. After each
/// failover the dead node comes back as a replica of the new primary, so every kill finds
/// [`REPLICAS`] replicas. Leases are shorter than a failover, so runs are reclaimed across it
/// and fencing is exercised. Then every acknowledged task is followed to its end, and the
/// ledgers and logs are checked.
async fn failovers_under_load(gateway_args: &[&str]) -> FailoverRun {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let mut set = SentinelSet::start_with(REPLICAS).await;
    let mut args = vec!["--tenant-rps", "0", "--tenant-create-rps", "0", "--tenant-max-active-tasks", "0"];
    args.extend_from_slice(gateway_args);
    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let url = set.url();
    let ledger_dir = tempfile::tempdir().unwrap();
    let dir = ledger_dir.path().display().to_string();
    let mut gateway_args = vec!["--redis-timeout-ms", "1000"];
    gateway_args.extend_from_slice(&args);
    let gateway = stack.add_gateway_unready(&url, &gateway_args).await;
    let base = stack.gateways[gateway].url.clone().unwrap();
    eventually(PATIENCE, "the gateway to be ready through the sentinels", || async {
        (reqwest::get(format!("{base}/readyz")).await.ok()?.status() == 200).then_some(())
    })
    .await;
    let worker = ["--lease-ms", "1500", "--max-reclaims", "1000", "--redis-timeout-ms", "250", "--ledger-dir", &dir];
    for _ in 0..2 {
        stack.add_worker_via(&url, &worker).await;
    }
    let client = stack.client(0);
    eventually(PATIENCE, "the gateway to know the ledger tool", || async {
        let r = client.call("tools/call", json!({"name": "ledger", "arguments": {"steps": 1}})).await;
        (r.result()["resultType"] == "task").then_some(())
    })
    .await;

    let acked = Arc::new(Mutex::new(Vec::<Acked>::new()));
    let changed = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..32)
        .map(|n| {
            let role = if n % 4 == 0 { Role::Creator } else { Role::Lifecycle };
            let (client, acked, changed, stop) = (stack.client(0), acked.clone(), changed.clone(), stop.clone());
            tokio::spawn(async move {
                let mut i = n;
                while !stop.load(Ordering::Relaxed) {
                    i += 32;
                    let sent = Instant::now();
                    let arguments = json!({"steps": 1 + i % 3, "stepMs": 20});
                    let r = client.call("tools/call", json!({"name": "ledger", "arguments": arguments})).await;
                    let Some(id) = r.result()["taskId"].as_str().filter(|_| r.status == 200).map(str::to_owned) else {
                        // Refused while the primary moves: retryable, and said so.
                        assert!(matches!(r.status, 500 | 503), "{}", r.text);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    };
                    acked.lock().unwrap().push(Acked { id: id.clone(), sent, at: Instant::now() });
                    let follow = if role == Role::Creator { 1 } else { usize::MAX };
                    if follow_task(&client, &id, follow, &stop).await {
                        changed.lock().unwrap().push(id);
                    }
                }
            })
        })
        .collect();

    let mut kills = Vec::new();
    for _ in 0..FAILOVERS {
        // Load first: a few hundred creates acknowledged by the primary about to die.
        let before = acked.lock().unwrap().len();
        eventually(PATIENCE, "creates to be acknowledged before the kill", || async {
            (acked.lock().unwrap().len() >= before + 300).then_some(())
        })
        .await;
        let failover = set.fail_over_timed().await;
        let killed = failover.killed_at;
        kills.push(killed);
        // The dead node comes back as a replica, as its pod would, before the next kill.
        set.rejoin(failover.killed).await;
        eventually(PATIENCE, "a create sent after the kill to be acknowledged", || async {
            acked.lock().unwrap().iter().any(|a| a.sent >= killed).then_some(())
        })
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await.unwrap();
    }
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    let mut run = FailoverRun { acknowledged: acked.len(), ..FailoverRun::default() };
    run.changed = changed.lock().unwrap().clone();
    run.windows = kills
        .iter()
        .map(|killed| acked.iter().filter(|a| a.sent >= *killed).map(|a| a.at - *killed).min().unwrap())
        .collect();

    // Every acknowledged task, to its end.
    let acked_at: std::collections::HashMap<String, Instant> = acked.iter().map(|a| (a.id.clone(), a.at)).collect();
    let tasks: Vec<String> = acked.into_iter().map(|a| a.id).collect();
    let settled = futures::future::join_all(tasks.chunks(tasks.len().div_ceil(16)).map(|chunk| {
        let client = stack.client(0);
        async move {
            let mut out = Vec::new();
            for id in chunk {
                out.push((id.clone(), settle(&client, id).await));
            }
            out
        }
    }))
    .await;
    let store = Store::connect_lazy(&Endpoint::new(set.url()), &stack.namespace, Duration::from_secs(2)).unwrap();
    for (id, end) in settled.into_iter().flatten() {
        match end {
            End::Lost => {
                let at = acked_at[&id];
                if let Some(kill) = kills.iter().find(|k| **k >= at) {
                    run.lost_before_kill.push(*kill - at);
                }
                run.lost.push(id);
            }
            End::Unfinished => run.unfinished.push(id),
            End::Ended(snapshot) if snapshot["status"] != "completed" => run.not_completed.push(id),
            End::Ended(snapshot) => {
                let tokens = taskgate_tests::ledger_tokens(ledger_dir.path(), &id);
                if tokens.windows(2).any(|w| w[0] > w[1]) {
                    run.overlapping.push(id.clone());
                }
                let record = store.keys().task(&TaskId::parse(&id).unwrap()).record;
                let mut read = redis::cmd("HMGET");
                read.arg(record).arg("fence").arg("reclaims");
                let (fence, reclaims): (u64, Option<u64>) = read.query_async(&mut store.conn()).await.unwrap();
                run.reclaims += reclaims.unwrap_or(0);
                let token = taskgate_tests::result_token(&snapshot);
                if Some(token) != tokens.iter().max().copied() || token != fence {
                    // With what the test needs to tell why.
                    run.not_newest.push(format!("{id}: result {token}, fence {fence}, ledger {tokens:?}"));
                }
            }
        }
    }
    let mut written = std::collections::HashMap::<String, usize>::new();
    for worker in &stack.workers {
        for line in worker.log().lines().filter(|l| l.contains("\"outcome written\"")) {
            if let Some(id) = serde_json::from_str::<serde_json::Value>(line)
                .ok()
                .and_then(|l| l["task_id"].as_str().map(str::to_owned))
            {
                *written.entry(id).or_default() += 1;
            }
        }
    }
    run.redone = written.into_iter().filter(|(_, n)| *n > 1).map(|(id, _)| id).collect();
    for w in &mut stack.workers {
        w.kill().await;
    }
    run
}

/// How a task ended, as [`settle`] found it.
enum End {
    /// The gateway does not know it.
    Lost,
    /// Known, but not terminal within the wait.
    Unfinished,
    /// Its terminal snapshot.
    Ended(serde_json::Value),
}

/// Reads `id` until it is terminal (retrying refusals while Redis is unavailable).
async fn settle(client: &taskgate_tests::McpClient, id: &str) -> End {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        let r = client.get_task(id).await;
        if r.error_code() == Some(-32602) {
            return End::Lost;
        }
        if r.status == 200 && is_terminal(r.result()) {
            return End::Ended(r.result().clone());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    End::Unfinished
}

fn is_terminal(snapshot: &serde_json::Value) -> bool {
    ["completed", "failed", "cancelled"].iter().any(|s| snapshot["status"] == *s)
}

/// Reads `id` `reads` times, or until it is terminal (and once more), or told to stop. True
/// when the read after a terminal one differed from it: a terminal state that changed.
async fn follow_task(
    client: &taskgate_tests::McpClient,
    id: &str,
    reads: usize,
    stop: &std::sync::atomic::AtomicBool,
) -> bool {
    let mut terminal: Option<serde_json::Value> = None;
    for _ in 0..reads {
        let r = client.get_task(id).await;
        if r.status != 200 {
            // Refused while the primary moves (or the task was lost in it, which the final
            // check counts); keep reading.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let snapshot = r.result().clone();
        let outcome = |s: &serde_json::Value| (s["status"].clone(), s.get("result").cloned());
        if let Some(before) = &terminal {
            return outcome(before) != outcome(&snapshot);
        }
        if is_terminal(&snapshot) {
            // Read once more, to see that it holds.
            terminal = Some(snapshot);
            continue;
        }
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// p50 and max of the windows.
fn spread(windows: &[Duration]) -> (Duration, Duration) {
    let mut sorted = windows.to_vec();
    sorted.sort();
    (sorted[sorted.len() / 2], *sorted.last().unwrap())
}

fn report(label: &str, run: &FailoverRun) {
    let (p50, max) = spread(&run.windows);
    eprintln!(
        "{label}: {FAILOVERS} failovers, {} creates acknowledged, {} lost, {} not finished, {} overlapping runs, \
         {} results not from the newest run, {} terminal states seen to change, {} completions redone, \
         {} reclaims; kill to the first create that succeeded again: {:?} \
         (p50 {p50:?}, max {max:?})",
        run.acknowledged,
        run.lost.len(),
        run.unfinished.len(),
        run.overlapping.len(),
        run.not_newest.len(),
        run.changed.len(),
        run.redone.len(),
        run.reclaims,
        run.windows,
    );
}

/// Rules that hold with or without durability: every task that survived completes, from its
/// newest run, with no two runs overlapping; a terminal state a client saw changes only when a
/// failover lost the completion and the task ran again.
fn assert_runs_keep_the_rules(run: &FailoverRun) {
    assert!(run.acknowledged > 300 * FAILOVERS, "the load ran: {}", run.acknowledged);
    assert!(run.unfinished.is_empty(), "not terminal: {:?}", run.unfinished);
    assert!(run.not_completed.is_empty(), "not completed: {:?}", run.not_completed);
    assert!(run.overlapping.is_empty(), "overlapping runs: {:?}", run.overlapping);
    assert!(run.not_newest.is_empty(), "results not from the newest run: {:?}", run.not_newest);
    let unexplained: Vec<_> = run.changed.iter().filter(|id| !run.redone.contains(id)).collect();
    assert!(unexplained.is_empty(), "terminal states that changed with one outcome written: {unexplained:?}");
}

/// With every replica acknowledging each create (`--durability-replicas` = [`REPLICAS`]), no
/// acknowledged create is lost across repeated failovers under load, whichever replica the
/// sentinels promote.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_durability_no_acknowledged_create_is_lost_across_failovers() {
    let replicas = REPLICAS.to_string();
    let run = failovers_under_load(&["--durability-replicas", &replicas, "--durability-timeout-ms", "500"]).await;
    report(&format!("with --durability-replicas {REPLICAS}"), &run);
    assert!(run.lost.is_empty(), "acknowledged creates lost: {:?}", run.lost);
    assert_runs_keep_the_rules(&run);
}

/// Without durability a failover may lose what the primary acknowledged but had not yet sent
/// to the replica promoted: measured, and only ever the last moments' creates before a kill.
/// Tasks that survived keep every other rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_durability_what_a_failover_loses_is_measured() {
    let run = failovers_under_load(&[]).await;
    report("without --durability-replicas", &run);
    let old: Vec<_> = run.lost_before_kill.iter().filter(|d| **d > Duration::from_secs(10)).collect();
    assert!(old.is_empty(), "lost creates acknowledged long before a kill: {old:?}");
    assert_eq!(run.lost_before_kill.len(), run.lost.len(), "every lost create was acknowledged before a kill");
    assert_runs_keep_the_rules(&run);
}

/// What [`lagging_failover`] saw.
struct LagRun {
    acknowledged: usize,
    /// Creates acknowledged while the replication stream was held back.
    acknowledged_while_lagging: usize,
    /// Creates refused while it was held back.
    refused_while_lagging: usize,
    /// Acknowledged creates the promoted replica does not know.
    lost: usize,
    /// Of those, the ones the lag cannot explain: acknowledged before it began, or sent after
    /// the kill.
    lost_outside_the_lag: usize,
}

/// One create's answer in [`lagging_failover`].
#[derive(Clone)]
struct Answer {
    sent: Instant,
    at: Instant,
    /// The task's id if the create was acknowledged.
    id: Option<String>,
}

/// One failover to a replica that lags: eight clients create without pause; once 200 creates
/// were answered they pause, the replicas catch up, and the proxies between the primary and its
/// two replicas start holding the replication stream back, so every create acknowledged before
/// that moment is on both replicas and every one acknowledged after it on neither. Once 40 more
/// creates were answered (either way) the primary is killed, the held bytes are dropped with
/// the proxies' connections, and the sentinels promote a replica, which never had them (the
/// other then follows it, so durable creates can be acknowledged again). Every acknowledged
/// create is then looked up.
async fn lagging_failover(gateway_args: &[&str]) -> LagRun {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    let (mut set, proxies) = SentinelSet::start_behind_proxies(2).await;
    let mut args = vec!["--tenant-rps", "0", "--tenant-create-rps", "0", "--tenant-max-active-tasks", "0"];
    args.extend_from_slice(gateway_args);
    let stack = sentinel_stack_with(&set, &args).await;
    let answers = Arc::new(Mutex::new(Vec::<Answer>::new()));
    let (stop, in_flight) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let (pause, paused) = tokio::sync::watch::channel(false);
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (client, answers, stop, mut paused, in_flight) =
                (stack.client(0), answers.clone(), stop.clone(), paused.clone(), in_flight.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    in_flight.fetch_add(1, Ordering::SeqCst);
                    if *paused.borrow() {
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                        let _ = paused.wait_for(|paused| !paused).await;
                        continue;
                    }
                    let sent = Instant::now();
                    let r = client.call("tools/call", json!({"name": "sleep", "arguments": {"ms": 0}})).await;
                    let id = r.result()["taskId"].as_str().filter(|_| r.status == 200).map(str::to_owned);
                    let refused = id.is_none();
                    answers.lock().unwrap().push(Answer { sent, at: Instant::now(), id });
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    if refused {
                        assert!(matches!(r.status, 500 | 503), "{}", r.text);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            })
        })
        .collect();
    let answered_since = |since: Instant| answers.lock().unwrap().iter().filter(|a| a.at > since).count();
    let start = Instant::now();
    eventually(PATIENCE, "creates before the lag", || async { (answered_since(start) >= 200).then_some(()) }).await;
    // Quiet, caught up, then held back: the lag begins at a known point of the stream.
    pause.send_replace(true);
    eventually(PATIENCE, "the creates under way to be answered", || async {
        (in_flight.load(Ordering::SeqCst) == 0).then_some(())
    })
    .await;
    let primary = set.primary_index().await;
    let written = repl_offset(&set.nodes[primary], "master_repl_offset").await.expect("the primary's offset");
    for replica in (0..set.nodes.len()).filter(|&i| i != primary) {
        eventually(PATIENCE, "the replicas to catch up before the lag", || async {
            (repl_offset(&set.nodes[replica], "slave_repl_offset").await? >= written).then_some(())
        })
        .await;
    }
    proxies.iter().for_each(FaultProxy::partition);
    let lagging = Instant::now();
    pause.send_replace(false);
    eventually(PATIENCE, "creates answered while the replica lags", || async {
        (answered_since(lagging) >= 40).then_some(())
    })
    .await;
    set.allow_failover().await;
    let killed = set.fail_over_timed().await.killed_at;
    proxies.iter().for_each(FaultProxy::cut);
    eventually(PATIENCE, "a create sent after the failover to be acknowledged", || async {
        answers.lock().unwrap().iter().any(|a| a.sent > killed && a.id.is_some()).then_some(())
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    for client in clients {
        client.await.unwrap();
    }
    let answers = answers.lock().unwrap().clone();
    // Answered by the old primary while its replicas lagged.
    let while_lagging =
        |acked: bool| answers.iter().filter(|a| a.at > lagging && a.at < killed && a.id.is_some() == acked).count();
    let client = stack.client(0);
    let mut run = LagRun {
        acknowledged: 0,
        acknowledged_while_lagging: while_lagging(true),
        refused_while_lagging: while_lagging(false),
        lost: 0,
        lost_outside_the_lag: 0,
    };
    for answer in &answers {
        let Some(id) = answer.id.as_deref() else { continue };
        run.acknowledged += 1;
        let r = eventually(PATIENCE, "the task to be read", || async {
            let r = client.get_task(id).await;
            (r.status == 200).then_some(r)
        })
        .await;
        if r.error_code() == Some(-32602) {
            run.lost += 1;
            // An answer timed after the kill may still be the old primary's (read late by a
            // busy client), so what bounds the lag at that end is when the create was sent.
            if answer.at < lagging || answer.sent > killed {
                run.lost_outside_the_lag += 1;
            }
        }
    }
    eprintln!(
        "a lagging replica promoted, {}: {} creates acknowledged, {} of them while the replica lagged, {} refused \
         then; {} lost",
        if gateway_args.is_empty() { "no --durability-replicas" } else { "--durability-replicas 1" },
        run.acknowledged,
        run.acknowledged_while_lagging,
        run.refused_while_lagging,
        run.lost
    );
    run
}

/// A field of `node`'s `INFO replication` read as an offset.
async fn repl_offset(node: &RedisServer, field: &str) -> Option<u64> {
    let mut conn = node.try_connection().await.ok()?;
    let info: String = redis::cmd("INFO").arg("replication").query_async(&mut conn).await.ok()?;
    info.lines().find_map(|line| line.strip_prefix(field)?.strip_prefix(':')?.trim().parse().ok())
}

/// The cost of asynchronous replication, shown where it bites: promoted after lagging, the
/// replica lacks what the primary acknowledged meanwhile. With `--durability-replicas 1` those
/// creates are refused instead, and none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_replica_loses_acknowledged_creates_only_without_durability() {
    let without = lagging_failover(&[]).await;
    assert!(without.acknowledged_while_lagging > 0, "creates were acknowledged while the replica lagged");
    assert!(without.lost > 0, "a promoted replica that lagged lacks what the primary acknowledged meanwhile");
    assert_eq!(without.lost_outside_the_lag, 0, "only creates acknowledged while it lagged are lost");

    let with = lagging_failover(&["--durability-replicas", "1", "--durability-timeout-ms", "500"]).await;
    // A create is acknowledged only once a replica has it: while the replicas lag, none is.
    assert_eq!(with.acknowledged_while_lagging, 0, "acknowledged while no replica had them");
    assert!(with.refused_while_lagging > 0, "creates were refused while the replica lagged");
    assert_eq!(with.lost, 0, "no acknowledged create is lost");
}

/// How many creates [`at_the_defaults_every_acknowledged_task_ends_across_a_kill_9_failover`]
/// has acknowledged before the kill.
const ACKNOWLEDGED: usize = 200;

/// The outside check, as it was run: a primary, two replicas and three sentinels; a gateway and
/// a worker given only the sentinels' URL and `--durability-replicas 1`, every other setting at
/// its default (30 s leases above all); [`ACKNOWLEDGED`] acknowledged creates, `kill -9` of
/// the primary, and every acknowledged task must end soon after. The tasks running at the kill
/// end within the failover (their results are written on the new primary), so none waits for
/// its lease to run out and none runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_defaults_every_acknowledged_task_ends_across_a_kill_9_failover() {
    let mut set = SentinelSet::start_with(2).await;
    let stack = stack_at_the_defaults(&set, &["--durability-replicas", "1"]).await;
    let client = stack.client(0);
    let mut ids = Vec::new();
    while ids.len() < ACKNOWLEDGED {
        let r = client.call("tools/call", json!({"name": "sleep", "arguments": {"ms": 500}})).await;
        match r.result()["taskId"].as_str().filter(|_| r.status == 200) {
            Some(id) => ids.push(id.to_owned()),
            // Not acknowledged (the tenant's create rate, say): sent again.
            None => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    // The worker is busy at the kill: tasks run, and more wait.
    let last = client.get_task(ids.last().unwrap()).await;
    assert!(!is_terminal(last.result()), "tasks were still queued at the kill: {}", last.text);

    let killed = Instant::now();
    set.fail_over().await;
    let failed_over = Instant::now();
    // Well within the default lease (30 s): a task that had to wait for its lease to run out
    // cannot end by then.
    let wait = Duration::from_secs(20);
    let mut unfinished = ids.clone();
    while !unfinished.is_empty() && failed_over.elapsed() < wait {
        let mut still = Vec::new();
        for id in unfinished {
            let r = client.get_task(&id).await;
            if !(r.status == 200 && is_terminal(r.result())) {
                still.push(id);
            }
        }
        unfinished = still;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "failed over {:?} after the kill; {} of {ACKNOWLEDGED} tasks not ended {:?} after it",
        failed_over - killed,
        unfinished.len(),
        failed_over.elapsed()
    );
    if !unfinished.is_empty() {
        // What each process saw of the failover: the last lines of its log.
        let tail = |log: String| {
            log.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
        };
        let last = client.get_task(&unfinished[0]).await;
        panic!(
            "not ended within {wait:?} of the failover: {unfinished:?}\nlast read of the first: {} {}\n\
             gateway:\n{}\nworker:\n{}",
            last.status,
            last.text,
            tail(stack.gateways[0].log()),
            tail(stack.workers[0].log())
        );
    }

    let store = Store::connect_lazy(&Endpoint::new(set.url()), &stack.namespace, Duration::from_secs(2)).unwrap();
    let mut reclaimed = Vec::new();
    for id in &ids {
        let r = client.get_task(id).await;
        assert_eq!(r.result()["status"], "completed", "{}", r.text);
        let record = store.keys().task(&TaskId::parse(id).unwrap()).record;
        let reclaims = eventually(PATIENCE, "the record to be read", || async {
            let reclaims: Option<u64> =
                redis::cmd("HGET").arg(&record).arg("reclaims").query_async(&mut store.conn()).await.ok()?;
            Some(reclaims.unwrap_or(0))
        })
        .await;
        if reclaims > 0 {
            reclaimed.push(id.clone());
        }
    }
    // A failover that itself outlasted the lease (sentinels starved of CPU on a loaded machine)
    // leaves the runs at the kill with expired leases before any primary could be reached:
    // reclaiming them is then right. Otherwise none may have waited for its lease.
    if failed_over - killed < Duration::from_secs(20) {
        assert!(reclaimed.is_empty(), "tasks that waited for their lease to run out: {reclaimed:?}");
    }
}

/// A gateway (with `gateway_args`) and a worker that know only the sentinels' URL, every other
/// setting at its default.
async fn stack_at_the_defaults(set: &SentinelSet, gateway_args: &[&str]) -> Stack {
    stack_at_the_defaults_via(&set.url(), gateway_args).await
}

/// [`stack_at_the_defaults`] over the sentinels of `url`.
async fn stack_at_the_defaults_via(url: &str, gateway_args: &[&str]) -> Stack {
    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let url = url.to_owned();
    let gateway = stack.add_gateway_unready(&url, gateway_args).await;
    let base = stack.gateways[gateway].url.clone().unwrap();
    eventually(PATIENCE, "the gateway to be ready through the sentinels", || async {
        (reqwest::get(format!("{base}/readyz")).await.ok()?.status() == 200).then_some(())
    })
    .await;
    stack.add_worker_via(&url, &[]).await;
    stack
}

/// A stale primary: the sentinels follow the replica in its place ([`SentinelSet::split_to`])
/// while the old primary keeps running as a primary, and the gateway and the worker, which were
/// connected to it, still reach it: nothing fails there, nothing is refused, nobody demotes it.
/// Their periodic re-check finds that the sentinels name another primary: they close every
/// connection to the old one (none is left there but the test's own), write nothing more on
/// it, and the tasks created through the gateway are made and run on the new primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_primary_is_left_for_the_one_the_sentinels_name() {
    let mut set = SentinelSet::start().await;
    let stack = stack_at_the_defaults(&set, &[]).await;
    let client = stack.client(0);
    let before = client.create_task("sleep", json!({"ms": 0})).await;
    client.wait_for_status(&before, "completed", PATIENCE).await;

    let old = set.primary_index().await;
    let new = 1 - old;
    let mut stale = set.nodes[old].connection().await;
    let own: u64 = redis::cmd("CLIENT").arg("ID").query_async(&mut stale).await.unwrap();
    let others = || {
        let mut stale = stale.clone();
        async move {
            let list: String = redis::cmd("CLIENT").arg("LIST").query_async(&mut stale).await.unwrap();
            list.lines().filter(|l| !l.starts_with(&format!("id={own} "))).map(str::to_owned).collect::<Vec<_>>()
        }
    };
    assert!(!others().await.is_empty(), "the gateway and the worker are connected to the primary");
    set.split_to(new).await;
    let split = Instant::now();
    // The old primary still answers as one: nothing but the re-check can tell the processes.
    assert_eq!(taskgate_tests::sentinel::role(&set.nodes[old]).await, "master");

    eventually(Duration::from_secs(15), "the gateway and the worker to leave the stale primary", || async {
        others().await.is_empty().then_some(())
    })
    .await;
    eprintln!("the stale primary was left {:?} after the sentinels named another", split.elapsed());
    let changes = || {
        let mut stale = stale.clone();
        async move {
            let info: String = redis::cmd("INFO").arg("persistence").query_async(&mut stale).await.unwrap();
            info.lines().find_map(|l| l.strip_prefix("rdb_changes_since_last_save:")).unwrap().trim().to_owned()
        }
    };
    let written = changes().await;

    // Tasks created now are made and run on the new primary (the first request after the
    // move may find no primary yet: it is refused, retryable).
    let after = eventually(PATIENCE, "a create on the new primary", || async {
        let r = client.call("tools/call", json!({"name": "sleep", "arguments": {"ms": 0}})).await;
        r.result()["taskId"].as_str().filter(|_| r.status == 200).map(str::to_owned)
    })
    .await;
    client.wait_for_status(&after, "completed", PATIENCE).await;
    let record = Store::connect_lazy(&Endpoint::new(set.nodes[new].url()), &stack.namespace, Duration::from_secs(2))
        .unwrap()
        .keys()
        .task(&TaskId::parse(&after).unwrap())
        .record;
    let exists = |mut conn: redis::aio::MultiplexedConnection| {
        let record = record.clone();
        async move { redis::cmd("EXISTS").arg(&record).query_async::<bool>(&mut conn).await.unwrap() }
    };
    // The stale primary is asked over the test's own connection: a new one would still be in
    // its client list for a moment after it is dropped, and read as a process that came back.
    let on_new = exists(set.nodes[new].connection().await).await;
    assert!(on_new && !exists(stale.clone()).await, "made on the new primary only");
    assert_eq!(changes().await, written, "nothing more was written on the stale primary");
    let back = others().await;
    assert!(back.is_empty(), "and nobody connected to it again: {back:?}");
}

/// Silence is not proof: with every sentinel gone, the processes keep the primary they follow
/// (still checking it with `ROLE`), tasks go on being made and run, and the silence is logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_sentinel_silent_the_primary_is_kept() {
    let mut set = SentinelSet::start().await;
    let stack = stack_at_the_defaults(&set, &[]).await;
    let client = stack.client(0);
    let before = client.create_task("sleep", json!({"ms": 0})).await;
    client.wait_for_status(&before, "completed", PATIENCE).await;

    set.kill_sentinels().await;
    let said = |log: String| log.contains("no sentinel confirms the redis primary; still using it");
    eventually(PATIENCE, "the gateway and the worker to say the sentinels are silent", || async {
        (said(stack.gateways[0].log()) && said(stack.workers[0].log())).then_some(())
    })
    .await;
    let after = client.create_task("sleep", json!({"ms": 0})).await;
    client.wait_for_status(&after, "completed", PATIENCE).await;
    assert!(!stack.gateways[0].log().contains("leaving"), "the primary was kept");
}

/// A sentinel that missed a failover names the old primary under the older configuration epoch,
/// and the old primary may be back empty, answering `ROLE` as a primary until it is made a
/// replica (a restarted pod). Built by hand: after a failover, a sentinel of its own names an
/// empty node under epoch 0, and the set's sentinels, which said epoch 1, go silent, so its
/// answer is the only one. The gateway and the worker keep the primary they follow instead of
/// moving to the empty node, where every tool would be unknown ("unknown tool" to a
/// `tools/call`) and every create would be acknowledged into a node about to be wiped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_that_missed_a_failover_is_not_followed_to_an_empty_node() {
    let mut set = SentinelSet::start().await;
    set.fail_over().await;
    let empty = RedisServer::start().await;
    let stale = LoneSentinel::watching(&empty).await;
    let stack = stack_at_the_defaults_via(&set.url_with(&stale), &[]).await;
    let client = stack.client(0);
    let before = client.create_task("sleep", json!({"ms": 0})).await;
    client.wait_for_status(&before, "completed", PATIENCE).await;

    set.kill_sentinels().await;
    // Each process re-checks every second: wait until both have heard the lone answer, and
    // either followed it or refused it.
    let moved = |log: &str| log.contains("the redis primary moved");
    let refused = |log: &str| log.contains("(it missed a failover); not followed");
    let decided = |log: String| moved(&log) || refused(&log);
    eventually(PATIENCE, "the gateway and the worker to hear the stale sentinel alone", || async {
        (decided(stack.gateways[0].log()) && decided(stack.workers[0].log())).then_some(())
    })
    .await;
    for (who, log) in [("the gateway", stack.gateways[0].log()), ("the worker", stack.workers[0].log())] {
        assert!(!moved(&log) && refused(&log), "{who} followed a sentinel that missed a failover:\n{log}");
    }
    let r = client.call("tools/call", json!({"name": "sleep", "arguments": {"ms": 0}})).await;
    assert_eq!((r.status, r.result()["resultType"].as_str()), (200, Some("task")), "{}", r.text);
    let after = r.result()["taskId"].as_str().unwrap().to_owned();
    client.wait_for_status(&after, "completed", PATIENCE).await;
    let metrics = Scrape::of(&format!("{}/metrics", client.base())).await;
    assert!(metrics.sum("taskgate_redis_stale_primaries_refused_total", &[]) >= 1.0, "the refusal is counted");
    let keys: u64 = redis::cmd("DBSIZE").query_async(&mut empty.connection().await).await.unwrap();
    assert_eq!(keys, 0, "nothing was written on the empty node");
}
