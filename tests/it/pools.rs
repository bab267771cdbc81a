//! The pools of dedicated Redis connections: a worker takes one blocking connection per delivery
//! reader and one for its signals, a gateway one for its subscription, each pool bounded and
//! exported as metrics; a reader whose connection is killed gets a fresh one after the broken
//! one fails its health check, and work goes on; a pool lends no more than its bound.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;
use taskgate_shared::store::StoreError;
use taskgate_tests::{RedisServer, Scrape, Stack, eventually, free_port};

const PATIENCE: Duration = Duration::from_secs(20);

/// The ids of the connections whose last command was a blocking delivery read.
async fn reader_ids(redis: &RedisServer) -> BTreeSet<String> {
    let mut conn = redis.connection().await;
    let list: String = redis::cmd("CLIENT").arg("LIST").query_async(&mut conn).await.unwrap();
    list.lines()
        .filter(|line| line.contains(" cmd=xreadgroup"))
        .filter_map(|line| line.split(' ').find_map(|field| field.strip_prefix("id=")).map(str::to_owned))
        .collect()
}

fn pool(scrape: &Scrape, pool: &str) -> (f64, f64, f64) {
    let connections = |state| scrape.present("taskgate_redis_pool_connections", &[("pool", pool), ("state", state)]);
    (
        scrape.present("taskgate_redis_pool_max_connections", &[("pool", pool)]),
        connections("in_use"),
        connections("idle"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_hold_pooled_connections_and_a_killed_one_is_replaced() {
    let mut stack = Stack::builder().workers(0).env("TASKGATE_QUEUE_SHARDS", "4").spawn().await;
    let port = free_port();
    // One reader per shard: four blocking connections.
    stack.add_worker(&["--redis-single-slot", "--metrics-listen", &format!("127.0.0.1:{port}")]).await;
    let worker_metrics = format!("http://127.0.0.1:{port}/metrics");
    let gateway_metrics = format!("{}/metrics", stack.gateways[0].url.as_deref().unwrap());

    eventually(PATIENCE, "four readers and a signal subscription, each on a pooled connection", || async {
        let worker = Scrape::of(&worker_metrics).await;
        (pool(&worker, "blocking") == (4.0, 4.0, 0.0) && pool(&worker, "pubsub").1 == 1.0).then_some(())
    })
    .await;
    let gateway = Scrape::of(&gateway_metrics).await;
    assert_eq!(pool(&gateway, "pubsub").1, 1.0, "the gateway's event subscription");
    assert_eq!(pool(&gateway, "blocking").1, 0.0, "a gateway never blocks on a read");
    let killed = eventually(PATIENCE, "four blocking reads", || async {
        let ids = reader_ids(&stack.redis).await;
        (ids.len() == 4).then_some(ids)
    })
    .await;

    let mut conn = stack.redis.connection().await;
    for id in &killed {
        let n: i64 = redis::cmd("CLIENT").arg("KILL").arg("ID").arg(id).query_async(&mut conn).await.unwrap();
        assert_eq!(n, 1);
    }
    // Each reader hands its broken connection back; the pool's PING finds it dead, closes it
    // and opens another. The bound holds throughout.
    eventually(PATIENCE, "every broken connection replaced", || async {
        let worker = Scrape::of(&worker_metrics).await;
        let (max, in_use, idle) = pool(&worker, "blocking");
        assert!(in_use + idle <= max, "{in_use} + {idle} > {max}");
        let recycled = worker.present("taskgate_redis_pool_errors_total", &[("pool", "blocking"), ("kind", "recycle")]);
        let fresh = reader_ids(&stack.redis).await;
        (recycled == 4.0 && in_use == 4.0 && fresh.len() == 4 && fresh.is_disjoint(&killed)).then_some(())
    })
    .await;

    let client = stack.client(0);
    let task = client.create_task("sleep", json!({"ms": 0})).await;
    client.wait_for_status(&task, "completed", PATIENCE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_lends_no_more_than_its_bound_and_lends_a_returned_connection_again() {
    let stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let store = stack.store();
    let first = store.blocking_connection().await.expect("the one connection");
    let started = std::time::Instant::now();
    match store.blocking_connection().await {
        Err(StoreError::PoolExhausted { pool: "blocking", max: 1 }) => {}
        Err(other) => panic!("expected an exhausted pool, got {other}"),
        Ok(_) => panic!("a second connection beyond the bound of one"),
    }
    assert!(started.elapsed() >= Duration::from_secs(1), "it waited for one to be handed back");
    drop(first);
    let mut again = store.blocking_connection().await.expect("the connection handed back");
    let pong: String = redis::cmd("PING").query_async(&mut *again).await.unwrap();
    assert_eq!(pong, "PONG");

    store.reserve_blocking(2);
    let _second = store.blocking_connection().await.expect("room for two");
}
