//! The black-box harness: a private `redis-server` and the real gateway and worker binaries,
//! started on free ports and killed when the test ends (also on panic), plus a small MCP client.
//!
//! The binaries are taken from the cargo target directory of the running test (override with
//! `TASKGATE_BIN_DIR`). `cargo test --workspace` builds them first, because the gateway and
//! worker packages have integration tests of their own.

pub mod cli;
mod client;
pub mod credentials;
mod fault_proxy;
pub mod interop;
mod process;
mod redis_server;
mod scrape;
pub mod sentinel;
mod stack;
pub mod tls;
pub mod upstream;
pub mod webhook_receiver;

pub use client::{McpClient, Reply, SseItem, SseStream, ack, meta, meta_without_tasks, standard_headers};
pub use fault_proxy::{Fault, FaultProxy};
pub use process::{Binary, Service};
pub use redis_server::{RedisCluster, RedisServer, replicated};
pub use scrape::Scrape;
pub use stack::{Stack, StackBuilder, Topology};

use std::future::Future;
use std::time::Duration;

/// Polls `check` until it returns `Some`, or panics with `what` after `patience`.
pub async fn eventually<T, F, Fut>(patience: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {patience:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A free TCP port on 127.0.0.1 (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

/// A namespace no other test shares.
pub fn unique_namespace() -> String {
    format!("t{:08x}", rand::random::<u32>())
}

/// Writes a task straight into the store, owned by whoever the test names: a task the caller
/// under test does not own, or one to drive through the scripts directly. Returns its id.
pub async fn write_task(
    store: &taskgate_shared::store::Store,
    owner: &taskgate_shared::task::Owner,
) -> taskgate_shared::task::TaskId {
    let id = taskgate_shared::task::TaskId::generate(4);
    store.create_task(sleep_task(&id, owner)).await.expect("the task is written");
    id
}

/// A `sleep` task record for `owner`, as a test writes it straight into the store.
pub fn sleep_task<'a>(
    id: &'a taskgate_shared::task::TaskId,
    owner: &'a taskgate_shared::task::Owner,
) -> taskgate_shared::store::NewTask<'a> {
    taskgate_shared::store::NewTask {
        id,
        owner,
        tool: "sleep",
        pool: taskgate_shared::store::DEFAULT_POOL,
        arguments: "{}",
        ttl_ms: 60_000,
        poll_interval_ms: 500,
        status_message: None,
        traceparent: None,
        client_capabilities: "{}",
        declares_tasks: false,
        answers: &[],
        steps: &[],
        related: false,
        tool_state: None,
        counted: false,
        history: true,
        fingerprint: None,
        weight: 1.0,
        events: None,
    }
}

/// A task's fencing token as its record holds it now: the last claim's (0 before any).
/// Tokens are claim times in milliseconds, never repeated (docs/durability.md), so tests
/// compare them with one another, never with a number.
pub async fn record_fence(store: &taskgate_shared::store::Store, task_id: &str) -> u64 {
    let id = taskgate_shared::task::TaskId::parse(task_id).expect("a task id");
    let fence: Option<String> = redis::cmd("HGET")
        .arg(store.keys().task(&id).record)
        .arg("fence")
        .query_async(&mut store.conn())
        .await
        .expect("HGET fence");
    fence.map_or(0, |f| f.parse().expect("a numeric fence"))
}

/// The fencing token a finished task's result carries (the `sleep`, `noop` and `ledger` demo
/// tools put it in their structured content).
pub fn result_token(snapshot: &serde_json::Value) -> u64 {
    snapshot["result"]["structuredContent"]["fencingToken"].as_u64().unwrap_or_else(|| panic!("no token: {snapshot}"))
}

/// The fencing tokens the `ledger` demo tool wrote for `task_id` under `dir` (the worker's
/// `--ledger-dir`), one per step in the order written. Two runs that never overlapped leave
/// them in non-decreasing order.
pub fn ledger_tokens(dir: &std::path::Path, task_id: &str) -> Vec<u64> {
    std::fs::read_to_string(dir.join(task_id))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split(' ').next()?.parse().ok())
        .collect()
}

/// One test per topology around each `async fn name(Topology)`: `mod name { standalone, … }`.
///
/// ```ignore
/// on_topologies!([standalone: Standalone, cluster: Cluster] a_suite, another_suite);
/// ```
#[macro_export]
macro_rules! on_topologies {
    (@one $name:ident [$($test:ident: $topology:ident),+ $(,)?]) => {
        mod $name {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$name($crate::Topology::$topology).await
                }
            )+
        }
    };
    ($topologies:tt $($name:ident),* $(,)?) => {
        $($crate::on_topologies!(@one $name $topologies);)*
    };
}
