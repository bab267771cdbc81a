//! Durability and Redis outages: what survives `kill -9` of redis-server, a lost
//! primary, and how the fleet behaves while Redis is unreachable.

use std::time::{Duration, Instant};

use serde_json::json;
use taskgate_tests::{RedisServer, Stack, eventually};

const PATIENCE: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_aof_always_every_acknowledged_create_survives_kill_9() {
    let mut stack =
        Stack::builder().workers(0).redis_args(&["--appendonly", "yes", "--appendfsync", "always"]).spawn().await;
    // Publish the catalogue, then create with no worker running, so every task stays as created.
    let w = stack.add_worker(&[]).await;
    stack.workers[w].kill().await;
    let client = stack.client(0);
    let mut ids = Vec::new();
    for _ in 0..50 {
        ids.push(client.create_task("sleep", json!({"ms": 0})).await);
    }
    stack.redis.restart().await; // kill -9, then start again on the same directory
    let client = stack.client(0);
    for id in &ids {
        let r = eventually(PATIENCE, "the gateway to reconnect", || async {
            let r = client.get_task(id).await;
            (r.error_code() != Some(-32603)).then_some(r)
        })
        .await;
        assert_eq!(r.result()["taskId"], id.as_str(), "{}", r.text);
    }
    // And the work is still there to do.
    stack.workers[w].restart().await;
    for id in &ids {
        let done = eventually(PATIENCE, "the task to complete", || async {
            let r = client.get_task(id).await;
            (r.result()["status"] == "completed").then_some(())
        });
        if tokio::time::timeout(PATIENCE, done).await.is_err() {
            panic!("not completed: {id}\n{}", stack.workers[w].log());
        }
    }
}

/// A primary with one replica, and one gateway whose creates wait for it. The catalogue is
/// published and no worker runs, so every task stays as created.
async fn with_a_replica(durability_timeout_ms: &str, redis_timeout_ms: &str) -> (Stack, RedisServer) {
    let mut stack = Stack::builder().workers(0).gateways(0).spawn().await;
    let replica = RedisServer::start_replica_of(&stack.redis).await;
    stack
        .add_gateway(&[
            "--durability-replicas",
            "1",
            "--durability-timeout-ms",
            durability_timeout_ms,
            "--redis-timeout-ms",
            redis_timeout_ms,
        ])
        .await;
    let w = stack.add_worker(&[]).await;
    stack.workers[w].kill().await;
    (stack, replica)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_replica_an_acknowledged_create_survives_losing_the_primary() {
    let (mut stack, replica) = with_a_replica("2000", "3000").await;
    let mut conn = replica.connection().await;
    let client = stack.client(0);
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(client.create_task("sleep", json!({"ms": 0})).await);
    }
    // The primary dies at once; the replica is promoted.
    stack.redis.kill().await;
    let _: () = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query_async(&mut conn).await.unwrap();
    let store = taskgate_shared::store::Store::connect_lazy(
        &taskgate_shared::store::Endpoint::new(replica.url()),
        &stack.namespace,
        Duration::from_secs(2),
    )
    .unwrap();
    for id in &ids {
        let task = store.get_task(&taskgate_shared::task::TaskId::parse(id).unwrap()).await.unwrap();
        assert!(task.is_some(), "{id} was acknowledged, so the promoted replica has it");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_waiting_for_replicas_holds_up_no_other_request() {
    let (stack, replica) = with_a_replica("10000", "15000").await;
    let client = stack.client(0);
    let existing = client.create_task("sleep", json!({"ms": 0})).await;

    // The replica stops acknowledging: the next create's WAIT blocks in Redis.
    replica.signal("STOP");
    let creator = stack.client(0);
    let waiting =
        tokio::spawn(async move { creator.call("tools/call", json!({"name": "sleep", "arguments": {"ms": 0}})).await });
    let conn = stack.redis.connection().await;
    eventually(PATIENCE, "the create's WAIT to block", || async {
        let list: String = redis::cmd("CLIENT").arg("LIST").query_async(&mut conn.clone()).await.unwrap();
        list.lines().any(|l| l.contains(" cmd=wait") && l.contains(" flags=b")).then_some(())
    })
    .await;
    // Meanwhile the gateway reads on its shared connection, which the WAIT does not hold.
    let read = client.get_task(&existing).await;
    assert_eq!(read.result()["taskId"], existing.as_str(), "{}", read.text);
    assert!(!waiting.is_finished(), "the read was answered while the create still waited");

    replica.signal("CONT");
    let created = waiting.await.unwrap();
    assert_eq!(created.result()["resultType"], "task", "acknowledged once the replica caught up: {}", created.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_redis_is_down_answers_are_bounded_and_recovery_is_automatic() {
    let mut stack = Stack::builder().gateway_args(&["--redis-timeout-ms", "500"]).spawn().await;
    let client = stack.client(0);
    let before = client.create_task("sleep", json!({"ms": 0})).await;
    client.wait_for_status(&before, "completed", PATIENCE).await;

    stack.redis.kill().await;
    for (method, params) in [
        ("tasks/get", json!({"taskId": before})),
        ("tools/call", json!({"name": "sleep", "arguments": {"ms": 0}})),
        ("tasks/cancel", json!({"taskId": before})),
    ] {
        let started = Instant::now();
        let r = client.call(method, params).await;
        let took = started.elapsed();
        // Retryable: 503 with Retry-After, and nothing about the storage beyond that.
        assert_eq!((r.status, r.error_code()), (503, Some(-32603)), "{method}: {}", r.text);
        assert_eq!(r.header("retry-after"), Some("1"), "{method}");
        assert_eq!(r.body["error"]["message"], "storage is unavailable; retry shortly");
        assert!(took < Duration::from_secs(5), "{method} answered in {took:?}");
    }
    // tools/list still answers from the catalogue cache.
    assert_eq!(client.call("tools/list", json!({})).await.status, 200);

    stack.redis.restart().await;
    // Without AOF the data is gone, but the fleet heals by itself: the worker re-creates its
    // consumer groups and republishes its tools, the gateway reconnects.
    let id = eventually(PATIENCE, "a task to be accepted again", || async {
        let r = client.call("tools/call", json!({"name": "sleep", "arguments": {"ms": 0}})).await;
        r.result()["taskId"].as_str().map(str::to_owned)
    })
    .await;
    client.wait_for_status(&id, "completed", PATIENCE).await;
    assert!(stack.workers[0].log().contains("reading deliveries failed"), "the worker saw the outage and backed off");
}

/// An old primary cut off from its replicas must not take writes that a failover would throw
/// away. `min-replicas-to-write 1` with `min-replicas-max-lag 1` makes Redis itself refuse them
/// (`NOREPLICAS`) once no replica has acknowledged for a second, as it would on the far side of
/// a split. A create is then refused, retryable (503, -32603, `Retry-After`), and leaves no task
/// behind; the gateway's log names the cause. A worker whose result is refused keeps sending it
/// while its lease is known valid, so once the replica acknowledges again the task completes
/// from the run it had: nothing acknowledged is lost, nothing runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_without_its_replicas_refuses_writes_and_nothing_acknowledged_is_lost() {
    let guard = ["--min-replicas-to-write", "1", "--min-replicas-max-lag", "1"];
    let mut stack = Stack::builder().workers(0).gateways(0).redis_args(&guard).spawn().await;
    // Writes are refused until the replica is in sync.
    let replica = RedisServer::start_replica_of(&stack.redis).await;
    stack.add_gateway(&[]).await;
    stack.add_worker(&[]).await;
    let client = stack.client(0);
    let running = client.create_task("sleep", json!({"ms": 3000})).await;
    stack.wait_until_held(&running, PATIENCE).await;
    let claimed = taskgate_tests::record_fence(&stack.store(), &running).await;

    // Cut off: the only replica stops acknowledging, and the primary refuses writes.
    replica.signal("STOP");
    let conn = stack.redis.connection().await;
    eventually(PATIENCE, "the primary to refuse writes", || async {
        let wrote: redis::RedisResult<()> = redis::cmd("SET").arg("probe").arg(1).query_async(&mut conn.clone()).await;
        matches!(wrote, Err(err) if err.code() == Some("NOREPLICAS")).then_some(())
    })
    .await;
    let records = || {
        let (mut conn, pattern) = (conn.clone(), format!("{}:*:task:*", stack.namespace));
        async move {
            let keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query_async(&mut conn).await.unwrap();
            keys.iter().filter(|k| k.rsplit(':').next().is_some_and(|last| last.starts_with("tsk_"))).count()
        }
    };
    let before = records().await;
    let r = client.call("tools/call", json!({"name": "sleep", "arguments": {"ms": 0}})).await;
    assert_eq!((r.status, r.error_code()), (503, Some(-32603)), "refused, retryable: {}", r.text);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert!(r.result().get("taskId").is_none(), "no handle leaves: {}", r.text);
    assert_eq!(records().await, before, "and no task was made");
    let log = stack.gateways[0].log();
    assert!(log.contains("NOREPLICAS") && log.contains("too few replicas in sync"), "the cause is logged:\n{log}");

    // The running task's result is refused as well, and kept.
    eventually(PATIENCE, "the worker's result to be refused", || async {
        stack.workers[0].log().contains("NOREPLICAS").then_some(())
    })
    .await;
    replica.signal("CONT");
    let done = client.wait_for_status(&running, "completed", PATIENCE).await;
    assert_eq!(taskgate_tests::result_token(&done), claimed, "completed by the run it had: {done}");
    let again = client.create_task("sleep", json!({"ms": 0})).await;
    client.wait_for_status(&again, "completed", PATIENCE).await;
}
