//! Redis behind Sentinel: the binaries find the primary from the sentinels alone, follow it
//! through a `kill -9` failover (a task running across it completes, a listen stream open across
//! it hears the task's later changes, creates during it fail fast and retryable), a claim lost in
//! a failover never hands its fencing token out again, and bad sentinel settings are refused or
//! reported at start.

use std::time::{Duration, Instant};

use serde_json::json;
use taskgate_shared::store::{DEFAULT_POOL, Delivery, Endpoint, Store};
use taskgate_shared::task::{Owner, TaskId};
use taskgate_tests::sentinel::{MASTER, SentinelSet};
use taskgate_tests::{RedisServer, Scrape, Stack, eventually};

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
    eventually(PATIENCE, "the task to be claimed", || async { (fence(&store, &running).await? > 0).then_some(()) })
        .await;
    // The claim reaches the replica before the primary dies.
    let mut primary = set.nodes[set.primary_index().await].connection().await;
    let acked: u32 = redis::cmd("WAIT").arg(1).arg(5_000).query_async(&mut primary).await.unwrap();
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
    assert_eq!(token, fence, "finished by the claim it had: {done}");
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
    let mut conn = primary.connection().await;
    let acked: u32 = redis::cmd("WAIT").arg(1).arg(5_000).query_async(&mut conn).await.unwrap();
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

/// What [`failovers_under_load`] saw.
struct FailoverRun {
    /// For each `kill -9`, the longest time without an acknowledged create around it.
    windows: Vec<Duration>,
    acknowledged: usize,
    /// Acknowledged creates whose task the last primary does not know.
    lost: usize,
}

/// Eight clients create tasks without pause (limits off) while the primary is killed three
/// times (a primary with three replicas, so each failover has a replica to promote); then every
/// acknowledged task is looked up.
async fn failovers_under_load() -> FailoverRun {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let mut set = SentinelSet::start_with(3).await;
    let args = ["--tenant-rps", "0", "--tenant-create-rps", "0", "--tenant-max-active-tasks", "0"];
    let stack = sentinel_stack_with(&set, &args).await;
    let acked = Arc::new(Mutex::new(Vec::<(Instant, String)>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (client, acked, stop) = (stack.client(0), acked.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let r = client.call("tools/call", json!({"name": "sleep", "arguments": {"ms": 0}})).await;
                    match r.result()["taskId"].as_str() {
                        Some(id) if r.status == 200 => acked.lock().unwrap().push((Instant::now(), id.to_owned())),
                        _ => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                }
            })
        })
        .collect();
    let mut kills = Vec::new();
    for _ in 0..3 {
        // Load before each kill: a few hundred creates acknowledged by the primary about to die.
        let before = acked.lock().unwrap().len();
        eventually(PATIENCE, "creates to be acknowledged before the kill", || async {
            (acked.lock().unwrap().len() >= before + 300).then_some(())
        })
        .await;
        kills.push(Instant::now());
        set.fail_over().await;
        let killed = *kills.last().unwrap();
        eventually(PATIENCE, "a create to be acknowledged after the failover", || async {
            acked
                .lock()
                .unwrap()
                .iter()
                .any(|(at, _)| at.duration_since(killed) > Duration::from_millis(500))
                .then_some(())
        })
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    let windows = kills
        .iter()
        .map(|killed| {
            let times: Vec<Instant> = acked.iter().map(|(at, _)| *at).collect();
            times
                .windows(2)
                .filter(|w| w[1] >= *killed && w[0] <= *killed + Duration::from_secs(10))
                .map(|w| w[1] - w[0])
                .max()
                .unwrap_or_default()
        })
        .collect();
    let client = stack.client(0);
    let mut lost = 0;
    for (_, id) in &acked {
        let r = eventually(PATIENCE, "the task to be read", || async {
            let r = client.get_task(id).await;
            (r.status == 200).then_some(r)
        })
        .await;
        if r.error_code() == Some(-32602) {
            lost += 1;
        }
    }
    FailoverRun { windows, acknowledged: acked.len(), lost }
}

/// Without durability a failover may lose what the primary acknowledged but had not yet sent
/// to its replicas: measured, and bounded by what one failover's replication lag can hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_durability_what_a_failover_loses_is_measured() {
    let run = failovers_under_load().await;
    eprintln!(
        "without durability: {} acknowledged, {} lost; longest gap without an acknowledged create at each kill: {:?}",
        run.acknowledged, run.lost, run.windows
    );
    assert!(run.acknowledged > 100, "the load ran: {}", run.acknowledged);
    assert!(run.lost * 10 < run.acknowledged, "a failover loses at most the last moments' creates: {}", run.lost);
}
