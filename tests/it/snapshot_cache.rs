//! The per-replica snapshot cache of `tasks/get`: a poll of an unchanged task reads nothing
//! from Redis; a cached answer goes to its owner only; the cache stays within its bytes; and
//! across two replicas, with the subscription killed and Redis restarted mid-run, no get ever
//! answers an older state than one already seen, and a write acknowledged by one replica is
//! seen by the next get on the other.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use sha2::Digest as _;
use taskgate_tests::{McpClient, Scrape, Stack};

const PATIENCE: Duration = Duration::from_secs(15);

/// Steps of the randomized run (gets, cancels, answers, creations). The issue of record asks
/// for 100,000 interleavings; that is a long run (`TASKGATE_SNAPSHOT_CACHE_STEPS=100000`): this
/// count keeps the suite near a minute on two busy cores.
const STEPS: usize = 5_000;

async fn scrape(client: &McpClient) -> Scrape {
    Scrape::of(&format!("{}/metrics", client.base())).await
}

/// Redis reads made for `tasks/get`: the poll script and the plain read.
fn task_reads(s: &Scrape) -> f64 {
    let count = "taskgate_redis_command_duration_seconds_count";
    s.get(count, &[("command", "script:poll_task")]) + s.get(count, &[("command", "script:read_task")])
}

fn hits(s: &Scrape) -> f64 {
    s.get("taskgate_snapshot_cache_hits_total", &[])
}

/// Every Redis command the gateway sent between two scrapes, by name (those that moved).
fn commands_between(before: &Scrape, after: &Scrape) -> Vec<(String, f64)> {
    let name = "taskgate_redis_command_duration_seconds_count";
    after
        .series
        .iter()
        .filter(|((n, _), _)| n == name)
        .map(|((n, labels), v)| {
            let command = labels.get("command").cloned().unwrap_or_default();
            (command, v - before.series.get(&(n.clone(), labels.clone())).copied().unwrap_or(0.0))
        })
        .filter(|(_, delta)| *delta > 0.0)
        .collect()
}

/// A `generate_report` task parked for input (`pollIntervalMs` 1000): it stays unchanged. Its
/// owner's polls are answered from the cache once this returns (the changes that parked it may
/// be heard after a read that already saw them, dropping what that read kept).
async fn parked_report(client: &McpClient) -> String {
    let task_id = client.create_task("generate_report", json!({"size": "small"})).await;
    client.wait_for_status(&task_id, "input_required", PATIENCE).await;
    taskgate_tests::eventually(PATIENCE, "a poll answered from the cache", || async {
        let before = hits(&scrape(client).await);
        assert_eq!(client.get_task(&task_id).await.result()["status"], "input_required");
        (hits(&scrape(client).await) > before).then_some(())
    })
    .await;
    task_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_of_an_unchanged_task_reads_nothing_from_redis_at_the_defaults() {
    // The gateway's defaults: polls held (tolerance 0.5), every tenant limit on.
    let stack = Stack::builder().gateway_option("--poll-tolerance", "0.5").spawn().await;
    let client = stack.client(0);
    let task_id = parked_report(&client).await;
    let before = scrape(&client).await;
    let polls = 4;
    for _ in 0..polls {
        // A client polling at the task's pace (not early: more than half its 1000 ms interval).
        tokio::time::sleep(Duration::from_millis(600)).await;
        let r = client.get_task(&task_id).await;
        assert_eq!(r.result()["status"], "input_required", "{}", r.text);
    }
    let after = scrape(&client).await;
    let sent = commands_between(&before, &after);
    println!("{polls} polls of an unchanged task sent Redis: {sent:?}");
    assert_eq!(task_reads(&after) - task_reads(&before), 0.0, "{sent:?}");
    assert_eq!(hits(&after) - hits(&before), f64::from(polls));
    // What remains per poll is the tenant's request-rate admission, and the beacon that
    // proves the replica has heard every change written before the poll (a `PING` on the
    // subscription's connection, shared by every request waiting on the replica: one per poll
    // only when polls are this sparse; not sent through the counted connections). Nothing reads
    // a task; the replica's background work (readiness probes, the catalogue's and the shared
    // secret's refresh) goes on beside.
    for (command, delta) in &sent {
        let allowed = match command.as_str() {
            "script:admit" => f64::from(polls),
            "PUBLISH" => 0.0,
            "HGETALL" | "HMGET" | "HGET" | "EXISTS" | "script:poll_task" | "script:read_task" => 0.0,
            _ => f64::INFINITY,
        };
        assert!(*delta <= allowed, "{command} sent {delta} times for {polls} cached polls: {sent:?}");
    }

    // Unlimited polls (the harness's default, `--poll-tolerance 0`) read nothing either.
    let stack = Stack::builder().spawn().await;
    let client = stack.client(0);
    let task_id = parked_report(&client).await;
    let before = scrape(&client).await;
    for _ in 0..50 {
        assert_eq!(client.get_task(&task_id).await.result()["status"], "input_required");
    }
    let after = scrape(&client).await;
    assert_eq!(task_reads(&after) - task_reads(&before), 0.0, "{:?}", commands_between(&before, &after));
    assert_eq!(hits(&after) - hits(&before), 50.0);

    // Turned off, every poll reads.
    let stack = Stack::builder().gateway_option("--snapshot-cache-bytes", "0").spawn().await;
    let client = stack.client(0);
    let task_id = client.create_task("generate_report", json!({"size": "small"})).await;
    client.wait_for_status(&task_id, "input_required", PATIENCE).await;
    let before = scrape(&client).await;
    for _ in 0..5 {
        assert_eq!(client.get_task(&task_id).await.result()["status"], "input_required");
    }
    let after = scrape(&client).await;
    assert_eq!(task_reads(&after) - task_reads(&before), 5.0);
    assert_eq!(hits(&after), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_task_is_answered_to_its_owner_only() {
    let mut stack = Stack::builder().gateways(0).spawn().await;
    let file = stack.scratch_dir().join("api-keys");
    let hash = |key: &str| sha2::Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect::<String>();
    std::fs::write(
        &file,
        format!(
            "{} acme alice\n{} acme bob\n{} globex alice\n",
            hash("key-alice"),
            hash("key-bob"),
            hash("key-globex")
        ),
    )
    .unwrap();
    stack.add_gateway_with_auth(&["--auth", "api-keys", "--api-keys-file", file.to_str().unwrap()]).await;
    let alice = stack.client_as(0, "key-alice");
    let task_id = parked_report(&alice).await;
    let unknown = taskgate_shared::task::TaskId::generate(16);
    for intruder in ["key-bob", "key-globex"] {
        let intruder = stack.client_as(0, intruder);
        let before = scrape(&alice).await;
        let foreign = intruder.get_task(&task_id).await;
        let missing = intruder.get_task(unknown.as_str()).await;
        let after = scrape(&alice).await;
        // Byte for byte, but for the JSON-RPC id each request chose.
        let strip = |mut body: Value| {
            body["id"] = Value::Null;
            body.to_string()
        };
        assert_eq!((foreign.status, strip(foreign.body.clone())), (missing.status, strip(missing.body.clone())));
        assert_eq!(foreign.body["error"]["message"], "task not found", "{}", foreign.text);
        // Both took the uncached path: one Redis read each, no hit.
        assert_eq!(task_reads(&after) - task_reads(&before), 2.0);
        assert_eq!(hits(&after), hits(&before));
    }
    let before = scrape(&alice).await;
    assert_eq!(alice.get_task(&task_id).await.result()["status"], "input_required");
    assert_eq!(hits(&scrape(&alice).await) - hits(&before), 1.0, "still cached for its owner");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_stays_within_its_bytes() {
    const BOUND: f64 = 8_192.0;
    let stack = Stack::builder().gateway_option("--snapshot-cache-bytes", "8192").spawn().await;
    let client = stack.client(0);
    let mut tasks = Vec::new();
    for ms in 0..40 {
        tasks.push(client.create_task("sleep", json!({"ms": ms})).await);
    }
    for task_id in &tasks {
        client.wait_for_status(task_id, "completed", PATIENCE).await;
    }
    for round in 0..3 {
        for task_id in &tasks {
            assert_eq!(client.get_task(task_id).await.result()["status"], "completed");
            let bytes = scrape(&client).await.present("taskgate_snapshot_cache_bytes", &[]);
            assert!(bytes <= BOUND, "round {round}: {bytes} bytes held");
        }
    }
    let s = scrape(&client).await;
    assert!(s.get("taskgate_snapshot_cache_evictions_total", &[]) > 0.0, "40 answers do not fit in 8 KiB");
    // Polled in a cycle longer than the cache, every answer was evicted before its turn came
    // again; the one used last is still there.
    client.get_task(tasks.last().unwrap()).await;
    assert_eq!(hits(&scrape(&client).await) - hits(&s), 1.0, "the most recently used answer is served");
}

/// Distinct tasks the memory test polls. The suite polls 20,000 (five times what the cache
/// holds); `TASKGATE_CACHE_MEMORY_TASKS=1000000` is the long run that docs/performance.md
/// quotes, where a leak of a few dozen bytes per task polled would show.
const MEMORY_TASKS: usize = 20_000;

/// The gateway's resident memory, from `/proc`.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the gateway's /proc status");
    let kib = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).expect("VmRSS");
    kib.trim().trim_end_matches("kB").trim().parse::<u64>().expect("VmRSS in kB") * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_ever_more_tasks_keeps_the_replica_within_its_memory() {
    use futures::StreamExt as _;
    const BOUND: usize = 4 << 20;
    let tasks: usize =
        std::env::var("TASKGATE_CACHE_MEMORY_TASKS").ok().and_then(|s| s.parse().ok()).unwrap_or(MEMORY_TASKS);
    let stack = Stack::builder()
        .gateway_option("--snapshot-cache-bytes", &BOUND.to_string())
        .gateway_option("--tenant-rps", "0")
        .spawn()
        .await;
    let client = stack.client(0);
    let model = client.create_task("noop", json!({})).await;
    client.wait_for_status(&model, "completed", PATIENCE).await;
    // Copies of the finished task under new ids of its shard, written straight into Redis: the
    // same owner's tasks, made far faster than through `tools/call`. The record does not name
    // its own id, so each copy is a task in its own right.
    let shard = &model[4..6];
    let prefix = format!("{}:{{s{shard}}}:task:tsk_{shard}", stack.namespace);
    let source = format!("{prefix}{}", &model[6..]);
    // Each copy lives an hour (the long run outlasts the tool's five minutes).
    let copy = redis::Script::new(
        "for i = tonumber(ARGV[2]), tonumber(ARGV[3]) do \
           local key = ARGV[1] .. string.format('%032x', i) \
           redis.call('COPY', KEYS[1], key) \
           redis.call('HSET', key, 'ttl', 3600000) \
           redis.call('PEXPIRE', key, 3600000) end",
    );
    let mut conn = stack.redis.connection().await;
    for from in (0..tasks).step_by(1_000) {
        let to = (from + 1_000).min(tasks) - 1;
        let () = copy.key(&source).arg(&prefix).arg(from).arg(to).invoke_async(&mut conn).await.unwrap();
    }
    let ids: Vec<String> = (0..tasks).map(|i| format!("tsk_{shard}{i:032x}")).collect();
    let pid = stack.gateways[0].pid();
    let poll = |ids: &[String]| {
        futures::stream::iter(ids.to_vec()).for_each_concurrent(16, |id| {
            let client = &client;
            async move {
                let r = client.get_task(&id).await;
                assert_eq!(r.result()["status"], "completed", "{id}: {}", r.text);
            }
        })
    };
    // Warm: past the first two fifths the cache is full (it holds about 6,000 answers of this
    // size), and so is what the allocator keeps.
    let warm = (tasks * 2 / 5).max(1);
    poll(&ids[..warm]).await;
    let (at_warm, scraped) = (rss_bytes(pid), scrape(&client).await);
    assert!(scraped.present("taskgate_snapshot_cache_bytes", &[]) <= BOUND as f64);
    for chunk in ids[warm..].chunks(10_000) {
        poll(chunk).await;
        let held = scrape(&client).await.present("taskgate_snapshot_cache_bytes", &[]);
        assert!(held <= BOUND as f64, "{held} bytes held, over the bound of {BOUND}");
    }
    let (at_end, s) = (rss_bytes(pid), scrape(&client).await);
    let grown = at_end.saturating_sub(at_warm);
    println!(
        "{tasks} tasks polled: cache {} bytes, {} evictions, {} misses; RSS {} MiB after {warm} tasks, {} MiB after all \
         ({:.1} bytes per task polled since)",
        s.present("taskgate_snapshot_cache_bytes", &[]),
        s.get("taskgate_snapshot_cache_evictions_total", &[]),
        s.get("taskgate_snapshot_cache_misses_total", &[]),
        at_warm >> 20,
        at_end >> 20,
        grown as f64 / (tasks - warm) as f64
    );
    assert!(s.get("taskgate_snapshot_cache_misses_total", &[]) >= tasks as f64, "every task was read once");
    assert!(s.get("taskgate_snapshot_cache_evictions_total", &[]) > 0.0, "the bound was reached");
    // Beyond the cache, the replica keeps per task polled only the poll pacer's memory of the
    // last answers, itself bounded (100,000 entries, a few MiB); the allocator keeps some of
    // what it freed. Anything growing with every task polled would pass this only for small
    // runs: the long run is the one that proves it.
    assert!(grown <= 64 << 20, "the gateway grew by {} MiB while polling {} more tasks", grown >> 20, tasks - warm);
}

/// What a client saw of a task.
#[derive(Debug, Clone)]
struct Seen {
    status: String,
    updated: String,
    body: Value,
}

impl Seen {
    fn of(result: &Value) -> Self {
        Self {
            status: result["status"].as_str().unwrap_or_default().to_owned(),
            updated: result["lastUpdatedAt"].as_str().unwrap_or_default().to_owned(),
            body: result.clone(),
        }
    }

    fn terminal(&self) -> bool {
        matches!(self.status.as_str(), "completed" | "failed" | "cancelled")
    }

    /// Whether `self` is an older state than `seen` (timestamps are ISO 8601 of one format, so
    /// they order as text).
    fn older_than(&self, seen: &Seen) -> bool {
        self.updated < seen.updated || (seen.terminal() && self.body != seen.body)
    }
}

struct Tracked {
    id: String,
    tool: &'static str,
    seen: Option<Seen>,
}

/// A `tasks/get` that answered (`None` while Redis is away).
async fn observe(client: &McpClient, task: &mut Tracked, step: usize, via: usize) -> Option<Seen> {
    let r = client.get_task(&task.id).await;
    if r.status != 200 || r.body.get("result").is_none() {
        assert!(
            r.body["error"]["message"] != "task not found",
            "step {step}: {} vanished on gateway {via}: {}",
            task.id,
            r.text
        );
        return None;
    }
    let now = Seen::of(r.result());
    if let Some(seen) = &task.seen {
        assert!(
            !now.older_than(seen),
            "step {step}: gateway {via} went back on {} ({}): {:?} after {:?}",
            task.id,
            task.tool,
            now.body,
            seen.body
        );
    }
    task.seen = Some(now.clone());
    Some(now)
}

async fn create(client: &McpClient, rng: &mut impl Rng) -> Option<Tracked> {
    let (tool, arguments) = match rng.random_range(0..3) {
        0 => ("generate_report", json!({"size": "small"})),
        1 => ("dual_approval", json!({"change": "x"})),
        _ => ("sleep", json!({"ms": rng.random_range(0..40)})),
    };
    let r = client.call("tools/call", json!({"name": tool, "arguments": arguments})).await;
    let id = r.body.get("result")?.get("taskId")?.as_str()?.to_owned();
    Some(Tracked { id, tool, seen: None })
}

/// Answers that resume a parked task (or end it, when declined).
fn answers(tool: &str, approve: bool) -> Value {
    let answer = json!({"action": "accept", "content": {"approved": approve}});
    match tool {
        "dual_approval" => json!({"legal_approval": answer, "finance_approval": answer}),
        _ => json!({"approve_outline": answer}),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_never_go_back_and_see_each_others_writes() {
    let steps = std::env::var("TASKGATE_SNAPSHOT_CACHE_STEPS").ok().and_then(|s| s.parse().ok()).unwrap_or(STEPS);
    let seed: u64 =
        std::env::var("TASKGATE_SNAPSHOT_CACHE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    println!("seed {seed} (TASKGATE_SNAPSHOT_CACHE_SEED replays it), {steps} steps");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    // Acknowledged writes survive the restart: each is on disk before it is answered.
    let mut stack = Stack::builder()
        .gateways(2)
        .workers(2)
        .redis_args(&["--appendonly", "yes", "--appendfsync", "always"])
        .spawn()
        .await;
    let clients = [stack.client(0), stack.client(1)];
    let mut tasks = Vec::new();
    while tasks.len() < 6 {
        if let Some(task) = create(&clients[tasks.len() % 2], &mut rng).await {
            tasks.push(task);
        }
    }
    let (mut writes_checked, mut unanswered) = (0, 0);
    for step in 0..steps {
        if step == steps / 3 {
            let mut conn = stack.redis.connection().await;
            let killed: i64 =
                redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub").query_async(&mut conn).await.unwrap();
            println!("step {step}: killed {killed} pub/sub connections");
        }
        if step == 2 * steps / 3 {
            stack.redis.restart().await;
            println!("step {step}: restarted Redis");
        }
        let i = rng.random_range(0..tasks.len());
        let via = rng.random_range(0..2);
        let other = 1 - via;
        let parked = tasks[i].seen.as_ref().is_some_and(|s| s.status == "input_required");
        let done = tasks[i].seen.as_ref().is_some_and(Seen::terminal);
        match rng.random_range(0..100) {
            // A write acknowledged on one replica; the other answers next.
            0..20 if parked => {
                let before = tasks[i].seen.clone().expect("seen");
                let cancel = rng.random_bool(0.3);
                let r = if cancel {
                    clients[via].cancel_task(&tasks[i].id).await
                } else {
                    clients[via].update_task(&tasks[i].id, answers(tasks[i].tool, rng.random_bool(0.8))).await
                };
                if r.status != 200 || r.body.get("result").is_none() {
                    unanswered += 1;
                    continue;
                }
                let Some(now) = observe(&clients[other], &mut tasks[i], step, other).await else { continue };
                writes_checked += 1;
                assert!(
                    if cancel {
                        now.terminal()
                    } else {
                        now.status != "input_required" || now.updated > before.updated
                    },
                    "step {step}: {} on gateway {via} acknowledged, gateway {other} answered {:?}",
                    if cancel { "a cancel" } else { "an answer" },
                    now.body
                );
            }
            0..10 if done => {
                if let Some(task) = create(&clients[via], &mut rng).await {
                    tasks[i] = task;
                }
            }
            _ => {
                if observe(&clients[via], &mut tasks[i], step, via).await.is_none() {
                    unanswered += 1;
                }
            }
        }
    }
    let [a, b] = [scrape(&clients[0]).await, scrape(&clients[1]).await];
    println!(
        "{writes_checked} writes read back across replicas; {unanswered} requests unanswered while Redis was away; \
         hits {} + {}, misses {} + {}",
        hits(&a),
        hits(&b),
        a.get("taskgate_snapshot_cache_misses_total", &[]),
        b.get("taskgate_snapshot_cache_misses_total", &[])
    );
    assert!(writes_checked > 0 && hits(&a) > 0.0 && hits(&b) > 0.0, "the run exercised the cache");
}
