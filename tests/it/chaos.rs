//! Chaos: a steady lifecycle load against 2 gateways and 3 workers on a real
//! redis-server (AOF, `appendfsync always`) while workers are killed with `kill -9` every two
//! seconds, a gateway is killed and restarted, redis-server is restarted, and every Redis client
//! connection is killed. Then the invariants are checked and the figures printed.
//!
//! Length: `TASKGATE_CHAOS_SECS` (default 20).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use taskgate_tests::{McpClient, Reply, Stack};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `sleep`: runs, may be reclaimed, completes.
    Work,
    /// `generate_report`: parks; the client answers; completes.
    Input,
    /// `sleep` long, cancelled by the client.
    Cancel,
}

#[derive(Debug, Clone)]
struct Handle {
    id: String,
    kind: Kind,
    /// The client got the acknowledgement of its answer.
    answered: bool,
    /// First terminal snapshot seen (status, result or error), to check it never changes.
    terminal: Option<(String, Value)>,
    terminal_after: Option<Duration>,
}

/// Calls through whichever gateway answers, retrying transport failures and 5xx (a gateway or
/// Redis is down) for a while, and 429s after the wait they name. A retried create may leave an orphan task behind: no handle was
/// returned for it, so it only expires.
async fn call(clients: &[McpClient], start: usize, method: &str, params: Value) -> Option<Reply> {
    for attempt in 0..60 {
        let client = &clients[(start + attempt) % clients.len()];
        let body = client.envelope(method, params.clone());
        let headers = taskgate_tests::standard_headers(&body);
        let mut request = client.http().post(client.url()).body(body.to_string()).timeout(Duration::from_secs(5));
        for (name, value) in &headers {
            request = request.header(name, value);
        }
        if let Ok(response) = request.send().await {
            let status = response.status().as_u16();
            let text = response.text().await.unwrap_or_default();
            // The tenant's request rate (the final check reads thousands of tasks at once).
            if status == 429 {
                let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                let wait = body["error"]["data"]["retryAfterMs"].as_u64().unwrap_or(100);
                tokio::time::sleep(Duration::from_millis(wait)).await;
                continue;
            }
            if status < 500 {
                let body = serde_json::from_str(&text).unwrap_or(Value::Null);
                return Some(Reply { status, headers: Default::default(), text, body });
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

async fn run_client(clients: Arc<Vec<McpClient>>, n: usize, stop: Arc<AtomicBool>, handles: Arc<Mutex<Vec<Handle>>>) {
    let mut i = n;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let kind = match i % 10 {
            0 | 1 => Kind::Input,
            2 => Kind::Cancel,
            _ => Kind::Work,
        };
        let params = match kind {
            Kind::Work => json!({"name": "sleep", "arguments": {"ms": 50 + (i * 37) % 700}}),
            Kind::Input => json!({"name": "generate_report", "arguments": {"size": "small"}}),
            Kind::Cancel => json!({"name": "sleep", "arguments": {"ms": 5_000}}),
        };
        let Some(reply) = call(&clients, i, "tools/call", params).await else { continue };
        let Some(id) = reply.result()["taskId"].as_str().map(str::to_owned) else { continue };
        let index = {
            let mut all = handles.lock().unwrap();
            all.push(Handle { id: id.clone(), kind, answered: false, terminal: None, terminal_after: None });
            all.len() - 1
        };
        match kind {
            Kind::Cancel => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                call(&clients, i, "tasks/cancel", json!({"taskId": id})).await;
            }
            Kind::Input => {
                for _ in 0..200 {
                    let Some(r) = call(&clients, i, "tasks/get", json!({"taskId": id})).await else { break };
                    if r.result()["status"] == "input_required" {
                        let answer = json!({"approve_outline": {"action": "accept", "content": {"approved": true}}});
                        let acked =
                            call(&clients, i, "tasks/update", json!({"taskId": id, "inputResponses": answer})).await;
                        if acked.is_some_and(|r| r.result()["resultType"] == "complete") {
                            handles.lock().unwrap()[index].answered = true;
                        }
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            Kind::Work => {}
        }
    }
}

/// Polls every handle until it is terminal (or parked without an acknowledged answer),
/// recording the first terminal snapshot.
async fn settle(clients: &[McpClient], handles: &Mutex<Vec<Handle>>, patience: Duration) {
    let deadline = Instant::now() + patience;
    loop {
        let pending: Vec<(usize, String)> = handles
            .lock()
            .unwrap()
            .iter()
            .enumerate()
            .filter(|(_, h)| h.terminal.is_none())
            .map(|(i, h)| (i, h.id.clone()))
            .collect();
        if pending.is_empty() || Instant::now() > deadline {
            return;
        }
        for (i, id) in pending {
            let Some(r) = call(clients, i, "tasks/get", json!({"taskId": id})).await else { continue };
            let status = r.result()["status"].as_str().unwrap_or_default().to_owned();
            if ["completed", "failed", "cancelled"].contains(&status.as_str()) {
                let outcome =
                    r.result().get("result").or_else(|| r.result().get("error")).cloned().unwrap_or(Value::Null);
                // Creation to terminal by the server's own clock (Redis TIME), whenever it is seen.
                let at = |field: &str| r.result()[field].as_str().and_then(taskgate_shared::task::parse_iso8601_ms);
                let took =
                    at("lastUpdatedAt").zip(at("createdAt")).map(|(end, start)| Duration::from_millis(end - start));
                let mut all = handles.lock().unwrap();
                all[i].terminal_after = took;
                all[i].terminal = Some((status, outcome));
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_loses_no_task_and_completes_none_twice() {
    let seconds: u64 = std::env::var("TASKGATE_CHAOS_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    let mut stack = Stack::builder()
        .gateways(2)
        .workers(3)
        .redis_args(&["--appendonly", "yes", "--appendfsync", "always"])
        .gateway_args(&["--redis-timeout-ms", "1000"])
        .worker_args(&["--lease-ms", "1500", "--max-reclaims", "50", "--redis-timeout-ms", "250"])
        .spawn()
        .await;
    let clients = Arc::new(vec![stack.client(0), stack.client(1)]);
    let stop = Arc::new(AtomicBool::new(false));
    let handles = Arc::new(Mutex::new(Vec::new()));
    let loads: Vec<_> =
        (0..6).map(|n| tokio::spawn(run_client(clients.clone(), n, stop.clone(), handles.clone()))).collect();

    let started = Instant::now();
    let kills = AtomicUsize::new(0);
    let mut next_event = 0;
    while started.elapsed() < Duration::from_secs(seconds) {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let victim = (started.elapsed().as_millis() as usize / 7) % stack.workers.len();
        stack.workers[victim].kill().await;
        stack.workers[victim].restart().await;
        kills.fetch_add(1, Ordering::Relaxed);
        let elapsed = started.elapsed().as_secs();
        if next_event == 0 && elapsed >= seconds / 4 {
            stack.gateways[0].kill().await;
            stack.gateways[0].restart().await;
            next_event = 1;
        } else if next_event == 1 && elapsed >= seconds / 2 {
            stack.redis.restart().await;
            next_event = 2;
        } else if next_event == 2 && elapsed >= seconds * 3 / 4 {
            let mut conn = stack.redis.connection().await;
            let _: Result<i64, _> =
                redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("normal").query_async(&mut conn).await;
            next_event = 3;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for load in loads {
        let _ = load.await;
    }
    assert_eq!(next_event, 3, "every fault was injected");

    // Every handle returned to a client resolves, and reaches a terminal state (or is still
    // legitimately waiting for an answer that was never acknowledged).
    settle(&clients, &handles, Duration::from_secs(60)).await;
    let all = handles.lock().unwrap().clone();
    assert!(all.len() > 20, "the load ran: {} tasks", all.len());
    for h in &all {
        let r = call(&clients, 0, "tasks/get", json!({"taskId": h.id})).await.expect("a gateway answers");
        assert_ne!(r.body["error"]["message"], "task not found", "lost: {h:?}");
        match &h.terminal {
            Some(_) => {}
            None => assert!(
                h.kind == Kind::Input && !h.answered && r.result()["status"] == "input_required",
                "stuck: {h:?} {}",
                r.text
            ),
        }
        // No acknowledged answer was lost: an answered report completed.
        if h.kind == Kind::Input && h.answered {
            assert_eq!(h.terminal.as_ref().map(|t| t.0.as_str()), Some("completed"), "{h:?}");
        }
        if h.kind == Kind::Work {
            assert_eq!(h.terminal.as_ref().map(|t| t.0.as_str()), Some("completed"), "{h:?}");
        }
        // Terminal states never change.
        if let Some((status, outcome)) = &h.terminal {
            assert_eq!(&r.result()["status"], status, "{h:?}");
            let now = r.result().get("result").or_else(|| r.result().get("error")).cloned().unwrap_or(Value::Null);
            assert_eq!(&now, outcome, "{h:?}");
        }
    }

    // No result was written twice: across every worker's log (restarts append), each task has
    // at most one accepted terminal write.
    let mut writes: HashMap<String, usize> = HashMap::new();
    for worker in &stack.workers {
        for line in worker.log().lines().filter(|l| l.contains("\"outcome written\"")) {
            let Ok(entry) = serde_json::from_str::<Value>(line) else { continue };
            if let Some(id) = entry["task_id"].as_str() {
                *writes.entry(id.to_owned()).or_default() += 1;
            }
        }
    }
    let doubles = writes.values().filter(|n| **n > 1).count();
    assert_eq!(doubles, 0, "{writes:?}");

    let mut conn = stack.redis.connection().await;
    let mut reclaims = 0;
    for h in &all {
        let id = taskgate_shared::task::TaskId::parse(&h.id).unwrap();
        let n: Option<u64> = redis::cmd("HGET")
            .arg(stack.store().keys().task(&id).record)
            .arg("reclaims")
            .query_async(&mut conn)
            .await
            .unwrap_or(None);
        reclaims += n.unwrap_or(0);
    }
    let max_terminal = all.iter().filter(|h| h.kind == Kind::Work).filter_map(|h| h.terminal_after).max();
    let completed = all.iter().filter(|h| h.terminal.as_ref().is_some_and(|t| t.0 == "completed")).count();
    println!(
        "chaos: {seconds} s, {} tasks ({completed} completed), {} worker kills, 1 gateway kill, 1 redis restart, \
         1 client kill, {reclaims} reclaims, max time to terminal of a work task {:?} (server clock), lost 0, double completions {doubles}",
        all.len(),
        kills.load(Ordering::Relaxed),
        max_terminal.unwrap_or_default(),
    );
}
