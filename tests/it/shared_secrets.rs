//! The keys every gateway must share (the one idempotency keys become task ids under, the
//! console's CSRF key), through the real binaries: kept in Redis, they survive Redis losing
//! them, because the replicas that held them write them back and every replica adopts what is
//! stored; with `--shared-secret-file` they are derived from the file, the same on any Redis
//! and in any namespace; and a write of one waits for the durability replicas.

use std::time::Duration;

use serde_json::json;
use taskgate_tests::{RedisServer, Stack, eventually};

use crate::console::{As, Console};
use crate::idempotency::{keyed_call, task_id};

const PATIENCE: Duration = Duration::from_secs(20);

/// The task id `key` names through gateway `i` of `stack` (a long `sleep`, so that its page
/// keeps its action forms, and their CSRF token, while the test runs).
async fn keyed_task(stack: &Stack, i: usize, key: &str) -> String {
    task_id(&keyed_call(&stack.client(i), "sleep", json!({"ms": 60_000}), Some(key), None).await)
}

/// The CSRF token gateway `i` puts in the forms of `task`'s page.
async fn csrf(stack: &Stack, i: usize, task: &str) -> String {
    let page = Console::new(&stack.client(i)).get(&format!("/console/tasks/{task}"), As::Nobody).await;
    assert_eq!(page.status, 200, "{}", page.body);
    page.csrf()
}

/// The secret keys of `stack`'s namespace that exist in its Redis.
async fn stored_secrets(stack: &Stack) -> i64 {
    let store = stack.store();
    let keys = [store.keys().idempotency_secret(), store.keys().console_secret()];
    redis::cmd("EXISTS").arg(&keys[..]).query_async(&mut store.conn()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_redis_loses_are_restored_by_the_replicas_that_held_them_and_adopted_by_every_replica() {
    let mut stack =
        Stack::builder().gateways(2).gateway_args(&["--console", "--shared-secret-refresh-ms", "200"]).spawn().await;
    let task = keyed_task(&stack, 0, "order-1").await;
    assert_eq!(keyed_task(&stack, 1, "order-1").await, task);
    let token = csrf(&stack, 0, &task).await;
    assert_eq!(csrf(&stack, 1, &task).await, token);

    // Redis loses both keys (a fail-over before they were replicated, a flush, a restart
    // without persistence).
    let store = stack.store();
    let (idempotency, console) = (store.keys().idempotency_secret(), store.keys().console_secret());
    let _: i64 = redis::cmd("DEL").arg(&idempotency).arg(&console).query_async(&mut store.conn()).await.unwrap();
    // The replicas that held them write their copies back...
    eventually(PATIENCE, "the replicas to restore both secrets", || async {
        (stored_secrets(&stack).await == 2).then_some(())
    })
    .await;
    // ...so a gateway started afterwards takes the same ones: one key, one task, through every
    // replica, and one CSRF token.
    stack.add_gateway(&[]).await;
    for i in 0..3 {
        assert_eq!(keyed_task(&stack, i, "order-1").await, task, "gateway {i}");
        assert_eq!(csrf(&stack, i, &task).await, token, "gateway {i}");
    }

    // Had another write won first (a replica that never knew the old key made one), every
    // replica adopts what is stored, rather than each keeping its own.
    let _: () = redis::cmd("SET").arg(&idempotency).arg("cd".repeat(32)).query_async(&mut store.conn()).await.unwrap();
    let fresh = stack.add_gateway(&[]).await;
    let stored = keyed_task(&stack, fresh, "order-2").await;
    eventually(PATIENCE, "every replica to adopt the stored secret", || async {
        for i in 0..fresh {
            if keyed_task(&stack, i, "order-2").await != stored {
                return None;
            }
        }
        Some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_shared_secret_file_every_server_and_namespace_derives_the_same_keys() {
    // Two deployments: each its own redis-server and namespace.
    let mut one = Stack::builder().gateways(0).gateway_args(&["--console"]).spawn().await;
    let mut two = Stack::builder().gateways(0).gateway_args(&["--console"]).spawn().await;
    assert_ne!(one.namespace, two.namespace);
    let file = one.scratch_dir().join("shared-secret");
    std::fs::write(&file, "a shared master secret of at least 32 bytes\n").unwrap();
    let file = file.to_str().unwrap();
    one.add_gateway(&["--shared-secret-file", file]).await;
    two.add_gateway(&["--shared-secret-file", file]).await;

    let task = keyed_task(&one, 0, "order-1").await;
    assert_eq!(keyed_task(&two, 0, "order-1").await, task, "one key, one id, on any Redis");
    assert_eq!(csrf(&two, 0, &task).await, csrf(&one, 0, &task).await);
    // Derived, not stored: nothing in Redis to lose.
    assert_eq!((stored_secrets(&one).await, stored_secrets(&two).await), (0, 0));

    // A replica without the file keeps its keys in Redis instead: mixing the two splits them.
    one.add_gateway(&[]).await;
    assert_ne!(keyed_task(&one, 1, "order-1").await, task);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_written_to_redis_waits_for_the_durability_replicas() {
    let mut stack = Stack::builder().workers(0).gateways(0).gateway_args(&["--console"]).spawn().await;
    let replica = RedisServer::start_replica_of(&stack.redis).await;
    stack
        .add_gateway(&["--durability-replicas", "1", "--durability-timeout-ms", "10000", "--redis-timeout-ms", "15000"])
        .await;
    // The replica stops acknowledging; the first console page writes the console's secret.
    replica.signal("STOP");
    let client = stack.client(0);
    let page = tokio::spawn(async move { Console::new(&client).get("/console/", As::Nobody).await.status });
    let conn = stack.redis.connection().await;
    eventually(PATIENCE, "the secret's WAIT to block", || async {
        let list: String = redis::cmd("CLIENT").arg("LIST").query_async(&mut conn.clone()).await.unwrap();
        list.lines().any(|l| l.contains(" cmd=wait") && l.contains(" flags=b")).then_some(())
    })
    .await;
    assert!(!page.is_finished(), "the page waits for the replica");
    replica.signal("CONT");
    assert_eq!(page.await.unwrap(), 200);
    let stored: i64 = redis::cmd("EXISTS")
        .arg(stack.store().keys().console_secret())
        .query_async(&mut replica.connection().await)
        .await
        .unwrap();
    assert_eq!(stored, 1, "the replica has the secret the page was made with");
}
