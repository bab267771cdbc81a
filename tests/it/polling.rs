//! Early `tasks/get` polls at the gateway's defaults: held, not refused (`--poll-limit hold`),
//! so clients that poll faster than `pollIntervalMs` and never retry a 429 still work, while a
//! tight loop costs Redis about one read per interval. `refuse` and `off` are tested too.

use std::time::{Duration, Instant};

use serde_json::json;
use taskgate_tests::{McpClient, Stack, StackBuilder};

const PATIENCE: Duration = Duration::from_secs(15);

/// The gateway's defaults for polling (the harness turns the poll limit off for other suites).
fn at_defaults() -> StackBuilder {
    Stack::builder().gateway_option("--poll-tolerance", "0.5")
}

/// A `generate_report` task parked for input; it stays there, with `pollIntervalMs` 1000.
async fn parked_report(client: &McpClient) -> String {
    let task_id = client.create_task("generate_report", json!({"size": "small"})).await;
    client.wait_for_status(&task_id, "input_required", PATIENCE).await;
    task_id
}

/// One series of the gateway's `/metrics`, 0 when absent.
async fn metric(client: &McpClient, series: &str) -> f64 {
    let text = client.http().get(format!("{}/metrics", client.base())).send().await.unwrap().text().await.unwrap();
    text.lines().find_map(|line| line.strip_prefix(series).and_then(|rest| rest.trim().parse().ok())).unwrap_or(0.0)
}

/// Redis reads of a task made for clients' polls: the poll script, and the plain read a woken
/// or unlimited poll makes.
async fn task_reads(client: &McpClient) -> f64 {
    let count = "taskgate_redis_command_duration_seconds_count{command=";
    metric(client, &format!("{count}\"script:poll_task\"}}")).await
        + metric(client, &format!("{count}\"script:read_task\"}}")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tight_poll_loop_is_paced_to_the_interval_with_no_errors() {
    let stack = at_defaults().spawn().await;
    let client = stack.client(0);
    let task_id = parked_report(&client).await;
    let before = task_reads(&client).await;
    let started = Instant::now();
    let mut answers = 0;
    while started.elapsed() < Duration::from_secs(3) {
        let r = client.get_task(&task_id).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.result()["status"], "input_required", "{}", r.text);
        answers += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let reads = task_reads(&client).await - before;
    println!("a 10 ms poll loop for 3 s: {answers} answers, {reads} Redis reads");
    // A loop at 10 ms would be ~300 reads; held, it is about one per second.
    assert!(answers >= 3, "every held poll was answered: {answers}");
    assert!(reads <= 5.0, "{reads} Redis reads for {answers} polls in 3 s");
    assert_eq!(metric(&client, "taskgate_gateway_rate_limited_total{limit=\"poll\"}").await, 0.0);
    assert!(metric(&client, "taskgate_gateway_held_polls_total{outcome=\"held\"}").await >= 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_poll_is_answered_as_soon_as_the_task_changes() {
    let stack = at_defaults().spawn().await;
    let client = stack.client(0);
    let task_id = parked_report(&client).await;
    // That poll was answered just now: the next one is early and is held.
    let held = {
        let client = stack.client(0);
        let task_id = task_id.clone();
        tokio::spawn(async move {
            let r = client.get_task(&task_id).await;
            (Instant::now(), r)
        })
    };
    taskgate_tests::eventually(PATIENCE, "the poll to be held", || async {
        (metric(&client, "taskgate_gateway_held_polls_total{outcome=\"held\"}").await >= 1.0).then_some(())
    })
    .await;
    let answer = json!({"approve_outline": {"action": "accept", "content": {"approved": true}}});
    assert_eq!(client.update_task(&task_id, answer).await.status, 200);
    let changed = Instant::now();
    let (answered, r) = held.await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    assert_ne!(r.result()["status"], "input_required", "the held poll shows the change: {}", r.text);
    // The interval would have ended about 800 ms after the change.
    let after_change = answered.saturating_duration_since(changed);
    println!("a held poll was answered {after_change:?} after the task changed");
    assert!(after_change < Duration::from_millis(300), "answered {after_change:?} after the change");
    assert!(metric(&client, "taskgate_gateway_held_polls_total{outcome=\"woken\"}").await >= 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_polls_are_bounded_per_principal() {
    let stack = at_defaults().gateway_args(&["--max-held-polls-per-principal", "1"]).spawn().await;
    let client = stack.client(0);
    let task_id = parked_report(&client).await;
    let poll = || {
        let client = stack.client(0);
        let task_id = task_id.clone();
        tokio::spawn(async move { client.get_task(&task_id).await })
    };
    // A poll is held only when it comes within the tolerance of the one answered before it; on
    // a loaded machine the first may come later and be answered at once, and then the next one,
    // sent right after it, is early.
    let first = std::sync::Mutex::new(poll());
    taskgate_tests::eventually(PATIENCE, "a poll to be held", || async {
        if metric(&client, "taskgate_gateway_held_polls_total{outcome=\"held\"}").await >= 1.0 {
            return Some(());
        }
        let mut first = first.lock().unwrap();
        if first.is_finished() {
            *first = poll();
        }
        None
    })
    .await;
    let first = first.into_inner().unwrap();
    // Once one is held, the next finds the principal's one place taken.
    let r = client.get_task(&task_id).await;
    assert_eq!(r.status, 429, "{}", r.text);
    assert_eq!(r.body["error"]["code"], -31429);
    assert_eq!(r.body["error"]["data"]["limit"], "poll");
    assert!(r.header("retry-after").is_some());
    assert_eq!(first.await.unwrap().status, 200, "the held one is answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_limit_refuse_answers_an_early_poll_429() {
    let stack = at_defaults().gateway_args(&["--poll-limit", "refuse"]).spawn().await;
    let client = stack.client(0);
    let task_id = parked_report(&client).await;
    let r = client.get_task(&task_id).await;
    assert_eq!(r.status, 429, "{}", r.text);
    assert_eq!(r.body["error"]["data"]["limit"], "poll");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_limit_off_reads_every_poll() {
    let stack = at_defaults().gateway_args(&["--poll-limit", "off"]).spawn().await;
    let client = stack.client(0);
    let task_id = parked_report(&client).await;
    let before = task_reads(&client).await;
    let hits_before = metric(&client, "taskgate_snapshot_cache_hits_total").await;
    for _ in 0..20 {
        let started = Instant::now();
        let r = client.get_task(&task_id).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert!(started.elapsed() < Duration::from_millis(500), "not held");
    }
    // Every poll is answered at once: read from Redis, or (the task unchanged) from the
    // replica's snapshot cache.
    let hits = "taskgate_snapshot_cache_hits_total";
    let answered = task_reads(&client).await - before + metric(&client, hits).await - hits_before;
    assert!(answered >= 20.0, "every poll was read: {answered}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_after_a_change_is_not_held() {
    let stack = at_defaults().spawn().await;
    let client = stack.client(0);
    let task_id = parked_report(&client).await;
    // Answered just now, then changed by the answer: the next poll, early as it is, reads.
    let answer = json!({"approve_outline": {"action": "accept", "content": {"approved": true}}});
    assert_eq!(client.update_task(&task_id, answer).await.status, 200);
    let reads_before = task_reads(&client).await;
    // Held, it would take most of a second; read, it shows the answered task resumed.
    let started = Instant::now();
    let r = client.get_task(&task_id).await;
    assert!(started.elapsed() < Duration::from_millis(400), "held although the task changed");
    assert_ne!(r.result()["status"], "input_required", "{}", r.text);
    assert!(task_reads(&client).await > reads_before);
}
