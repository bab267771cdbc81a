//! Durable steps (`ToolContext::step`): a step's result is recorded, fenced, with the task, and
//! no later run of the task runs the step again. Counted outside Redis with the demo `ledger`
//! tool's file (`<fence> <step>` per step actually run).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use taskgate_shared::store::{DEFAULT_POOL, Delivery, Lease, Released, Store, WORKER_GROUP};
use taskgate_shared::task::{Owner, TaskId};
use taskgate_tests::{Stack, Topology, eventually};

const PATIENCE: Duration = Duration::from_secs(30);

/// The ledger file of a task: `(fence, step)` per line, in the order written.
/// The ledger's (run, step) lines, each run numbered from 1 in the order of its fencing token
/// (tokens are claim times: their order, not their value, says which run wrote).
fn ledger(dir: &std::path::Path, task_id: &str) -> Vec<(u64, u64)> {
    let lines: Vec<(u64, u64)> = std::fs::read_to_string(dir.join(task_id))
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let (fence, step) = line.split_once(' ').expect("a ledger line");
            (fence.parse().expect("a fence"), step.parse().expect("a step"))
        })
        .collect();
    let mut tokens: Vec<u64> = lines.iter().map(|(token, _)| *token).collect();
    tokens.sort_unstable();
    tokens.dedup();
    lines.into_iter().map(|(token, step)| (tokens.binary_search(&token).expect("listed") as u64 + 1, step)).collect()
}

/// How many times the task's lease was reclaimed.
async fn field_reclaims(stack: &Stack, task_id: &str) -> u64 {
    let store = stack.store();
    let record = store.keys().task(&TaskId::parse(task_id).unwrap()).record;
    let reclaims: Option<String> =
        redis::cmd("HGET").arg(record).arg("reclaims").query_async(&mut store.conn()).await.unwrap();
    reclaims.map_or(0, |r| r.parse().unwrap())
}

/// How many times each step was run.
fn runs_per_step(lines: &[(u64, u64)]) -> BTreeMap<u64, usize> {
    let mut runs = BTreeMap::new();
    for (_, step) in lines {
        *runs.entry(*step).or_default() += 1;
    }
    runs
}

/// Runs a 20-step ledger, kills its worker with `kill -9` a few steps in (between steps: in the
/// pause after a step's record), lets a second worker reclaim it; the ledger's lines.
async fn killed_mid_way(checkpoint: bool) -> Vec<(u64, u64)> {
    let ledger_dir = tempfile::tempdir().unwrap();
    let dir = ledger_dir.path().display().to_string();
    let mut stack = Stack::builder().worker_args(&["--lease-ms", "1000", "--ledger-dir", &dir]).spawn().await;
    let client = stack.client(0);
    let task_id = client.create_task("ledger", json!({"steps": 20, "stepMs": 200, "checkpoint": checkpoint})).await;
    eventually(PATIENCE, "the first run to write a few steps", || async {
        (ledger(ledger_dir.path(), &task_id).len() >= 4).then_some(())
    })
    .await;
    // A step's line and its record are one round trip apart, then the step pauses 200 ms: with
    // checkpoints, kill once the record has caught up with the ledger (in the pause), so the
    // test is about the record, not about the crash window inside a step.
    if checkpoint {
        let store = stack.store();
        let steps = store.keys().task(&TaskId::parse(&task_id).unwrap()).steps;
        eventually(PATIENCE, "the records to catch up with the ledger", || async {
            let recorded: usize = redis::cmd("HLEN").arg(&steps).query_async(&mut store.conn()).await.unwrap();
            (recorded > 0 && recorded == ledger(ledger_dir.path(), &task_id).len()).then_some(())
        })
        .await;
    }
    stack.workers[0].kill().await;
    let before = ledger(ledger_dir.path(), &task_id);
    assert!(before.len() < 20, "killed before the end: {before:?}");
    stack.add_worker(&[]).await;
    let done = client.wait_for_status(&task_id, "completed", PATIENCE).await;
    assert_eq!(taskgate_tests::result_token(&done), taskgate_tests::record_fence(&stack.store(), &task_id).await);
    assert!(field_reclaims(&stack, &task_id).await >= 1, "reclaimed: {done}");
    ledger(ledger_dir.path(), &task_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaimed_run_skips_the_recorded_steps() {
    let lines = killed_mid_way(true).await;
    let runs = runs_per_step(&lines);
    assert_eq!(runs.keys().copied().collect::<Vec<_>>(), (0..20).collect::<Vec<_>>(), "every step ran: {lines:?}");
    assert!(runs.values().all(|n| *n == 1), "each step ran exactly once: {lines:?}");
    let first = lines[0].0;
    let later = lines.iter().position(|(fence, _)| *fence != first).expect("a later run wrote");
    assert!(later >= 4, "the first run's steps were kept: {lines:?}");
    assert!(
        lines[later..].iter().all(|(fence, _)| *fence > first),
        "the later steps ran under a higher fence: {lines:?}"
    );
    assert!(lines.windows(2).all(|w| w[0].1 < w[1].1), "steps in order, none repeated: {lines:?}");
}

/// The control: without checkpoints, the run after the reclaim starts over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_checkpoints_a_reclaimed_run_repeats_steps() {
    let lines = killed_mid_way(false).await;
    let runs = runs_per_step(&lines);
    assert_eq!(runs.len(), 20, "every step ran: {lines:?}");
    assert!(runs.values().any(|n| *n >= 2), "the early steps ran again: {lines:?}");
}

/// Steps compose with input: the replay after the answer skips the steps before the question.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replay_after_an_answer_skips_the_recorded_steps() {
    let ledger_dir = tempfile::tempdir().unwrap();
    let dir = ledger_dir.path().display().to_string();
    let stack = Stack::builder().worker_args(&["--ledger-dir", &dir]).spawn().await;
    let client = stack.client(0);
    let task_id =
        client.create_task("ledger", json!({"steps": 4, "stepMs": 0, "checkpoint": true, "askAfter": 2})).await;
    let parked = client.wait_for_status(&task_id, "input_required", PATIENCE).await;
    assert_eq!(ledger(ledger_dir.path(), &task_id), vec![(1, 0), (1, 1)], "two steps before the question: {parked}");
    let r = client.update_task(&task_id, json!({"continue": {"action": "accept", "content": {"go": true}}})).await;
    assert!(r.result().is_object(), "answered: {}", r.text);
    client.wait_for_status(&task_id, "completed", PATIENCE).await;
    assert_eq!(
        ledger(ledger_dir.path(), &task_id),
        vec![(1, 0), (1, 1), (2, 2), (2, 3)],
        "steps 0 and 1 replayed from their records, 2 and 3 run after the answer"
    );
}

/// Steps across an inline call's rounds: the tool runs inline (no Tasks extension), asks a
/// question, and the answer comes back as an MRTR retry, which is a new hidden task. The steps
/// the first round recorded travel in the signed requestState, so the retry's run replays them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_retry_replays_the_steps_recorded_before_its_question() {
    let ledger_dir = tempfile::tempdir().unwrap();
    let dir = ledger_dir.path().display().to_string();
    let stack = Stack::builder().worker_args(&["--ledger-dir", &dir]).spawn().await;
    let client = stack.client(0);
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": { "elicitation": {} },
    });
    let arguments = json!({"steps": 4, "stepMs": 0, "checkpoint": true, "askAfter": 2});
    let first = client.call("tools/call", json!({"name": "ledger", "arguments": arguments, "_meta": meta})).await;
    assert_eq!(first.result()["resultType"], "input_required", "{}", first.text);
    let state = first.result()["requestState"].clone();
    let answer = json!({"continue": {"action": "accept", "content": {"go": true}}});
    let retry = json!({"name": "ledger", "arguments": arguments, "inputResponses": answer, "requestState": state, "_meta": meta});
    let done = client.call("tools/call", retry).await;
    assert_eq!(done.result()["resultType"], "complete", "{}", done.text);

    // Each round is a task of its own, so a file of its own: the steps, in order of the runs.
    let mut files: Vec<_> = std::fs::read_dir(ledger_dir.path()).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort_by_key(|path| std::fs::metadata(path).unwrap().modified().unwrap());
    let steps: Vec<Vec<u64>> = files
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).unwrap();
            text.lines().map(|line| line.split_once(' ').unwrap().1.parse().unwrap()).collect()
        })
        .collect();
    assert_eq!(steps, [vec![0, 1], vec![2, 3]], "steps 0 and 1 replayed from the first round's records");
}

mod a_stale_fence_cannot_record_a_step {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn standalone() {
        super::a_stale_fence_cannot_record_a_step(super::Topology::Standalone).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cluster() {
        super::a_stale_fence_cannot_record_a_step(super::Topology::Cluster).await
    }
}

/// A step written under a stale fencing token is refused and writes nothing; the holder's is
/// recorded, expires with the task, and comes back with the next claim. On a Cluster too: the
/// steps hash is in the task's slot, so one script checks the lease and writes the step.
async fn a_stale_fence_cannot_record_a_step(topology: Topology) {
    let stack = topology.builder().workers(0).spawn().await;
    let store = stack.store();
    let owner = Owner { tenant: "acme".into(), principal: "alice".into() };
    let id = TaskId::generate(16);
    store.create_task(taskgate_tests::sleep_task(&id, &owner)).await.expect("created");
    let keys = store.keys().task(&id);
    let _: Result<(), _> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&keys.stream)
        .arg(WORKER_GROUP)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut store.conn())
        .await;

    let first = claim(&store, &id, "w-one").await;
    assert!(first.steps.is_empty(), "no steps yet");
    let held = Lease { task_id: &id, worker: "w-one", fence: first.fence, outbox: None };
    assert!(store.record_step(held, "a", "1").await.unwrap(), "the holder records");
    assert!(store.record_step(held, "a", "2").await.unwrap(), "a re-sent record answers written");
    assert_eq!(store.release(held, DEFAULT_POOL, "cancelled").await.unwrap(), Released::Requeued);

    let second = claim(&store, &id, "w-two").await;
    assert!(second.fence > first.fence);
    assert_eq!(second.steps, vec![("a".to_owned(), "1".to_owned())], "the claim returns the first record");

    // The first run's token, and the right token from another worker: both refused.
    assert!(!store.record_step(held, "b", "\"stale\"").await.unwrap(), "a stale fence is refused");
    let impostor = Lease { task_id: &id, worker: "w-one", fence: second.fence, outbox: None };
    assert!(!store.record_step(impostor, "b", "\"impostor\"").await.unwrap(), "another worker is refused");
    let steps: Vec<(String, String)> =
        redis::cmd("HGETALL").arg(&keys.steps).query_async(&mut store.conn()).await.unwrap();
    assert_eq!(steps, vec![("a".to_owned(), "1".to_owned())], "nothing written by the refused records");

    let holder = Lease { task_id: &id, worker: "w-two", fence: second.fence, outbox: None };
    assert!(store.record_step(holder, "b", "\"ok\"").await.unwrap());
    let record_ttl: i64 = redis::cmd("PTTL").arg(&keys.record).query_async(&mut store.conn()).await.unwrap();
    let steps_ttl: i64 = redis::cmd("PTTL").arg(&keys.steps).query_async(&mut store.conn()).await.unwrap();
    assert!(
        steps_ttl > 0 && (record_ttl - steps_ttl).abs() < 1_000,
        "expires with the record: {steps_ttl} {record_ttl}"
    );
}

async fn claim(store: &Store, id: &TaskId, worker: &str) -> taskgate_shared::store::Claim {
    let mut reader = store.blocking_connection().await.unwrap();
    let deliveries = store
        .read_deliveries(&mut reader, &[id.shard()], DEFAULT_POOL, worker, 10, Duration::from_millis(500))
        .await
        .unwrap();
    let delivery: Delivery = deliveries.into_iter().find(|d| d.task_id == *id).expect("delivered");
    store.claim(&mut delivery.clone(), DEFAULT_POOL, worker, Duration::from_secs(30)).await.unwrap().expect("claimed")
}
