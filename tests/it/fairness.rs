//! Fair dispatch within a pool: one tenant's backlog does not hold back another tenant's first
//! task, configured weights share the workers in proportion, each tenant's tasks still start
//! in the order they were created, answered questions take their tenant's turn rather than the
//! front, and the fairness tags of tenants with nothing queued do not pile up. Claim order is
//! read from the tasks' timelines (the console keeps them), so the assertions are about what the
//! workers did, not about client timing.

use std::time::Duration;

use serde_json::{Value, json};
use taskgate_shared::store::{DEFAULT_POOL, Store};
use taskgate_shared::task::TaskId;
use taskgate_tests::{McpClient, Stack, Topology, eventually};

const PATIENCE: Duration = Duration::from_secs(60);

taskgate_tests::on_topologies!(
    [standalone: Standalone, cluster: Cluster]
    a_tenants_backlog_does_not_hold_back_another_tenants_first_task,
    weights_share_the_workers_and_each_tenant_keeps_its_order,
    answered_questions_take_their_tenants_turn,
    tags_of_tenants_with_nothing_queued_are_dropped,
    tags_of_tasks_that_expired_while_queued_are_swept,
);

fn hash(key: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// A stack with no worker yet, whose gateway takes `key-<tenant>` for each tenant and keeps
/// timelines (`--console`), with `gateway` options beyond those.
async fn tenants_stack(topology: Topology, tenants: &[&str], gateway: &[&str]) -> Stack {
    let mut stack = topology.builder().gateways(0).workers(0).spawn().await;
    let file = stack.scratch_dir().join("api-keys");
    let keys: String = tenants.iter().map(|t| format!("{} {t} {t}-user\n", hash(&format!("key-{t}")))).collect();
    std::fs::write(&file, keys).unwrap();
    let mut auth = vec!["--auth", "api-keys", "--api-keys-file", file.to_str().unwrap(), "--console"];
    auth.extend_from_slice(gateway);
    stack.add_gateway_with_auth(&auth).await;
    stack
}

/// When a task was claimed, each time (ms, from its timeline's `claimed` entries, in order).
async fn claims_of(store: &Store, id: &str) -> Vec<i64> {
    let timeline = store.keys().task(&TaskId::parse(id).unwrap()).timeline;
    let entries: Vec<String> =
        redis::cmd("LRANGE").arg(timeline).arg(0).arg(-1).query_async(&mut store.conn()).await.unwrap();
    entries
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter(|e| e["ev"] == "claimed")
        .filter_map(|e| e["at"].as_i64())
        .collect()
}

/// When a task was first claimed (ms); `None` while it has not been.
async fn claimed_at(store: &Store, id: &str) -> Option<i64> {
    claims_of(store, id).await.first().copied()
}

/// Creates `n` tasks of `tool` with `arguments` as `client`, `batch` at a time; their ids in
/// creation order when `batch` is 1.
async fn create_many(client: &McpClient, tool: &str, n: usize, batch: usize, arguments: Value) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(batch) {
        let batch = chunk.iter().map(|_| client.create_task(tool, arguments.clone()));
        ids.extend(futures::future::join_all(batch).await);
    }
    ids
}

/// The number of fields in the fairness hash and of tasks in the ready set of the `default`
/// pool's only shard (`--queue-shards 1`), read in that order.
async fn fair_and_ready(store: &Store) -> (usize, usize) {
    let queue = store.keys().queue(0, DEFAULT_POOL);
    let fields: usize = redis::cmd("HLEN").arg(&queue.fair).query_async(&mut store.conn()).await.unwrap();
    let queued: usize = redis::cmd("ZCARD").arg(&queue.ready).query_async(&mut store.conn()).await.unwrap();
    (fields, queued)
}

/// Tenant A queues hours of work in miniature (120 tasks of 600 ms on a worker of 4 slots:
/// 18 s), at the default 16 shards and default limits; tenant B's one task then starts ahead
/// of most of A's backlog. On first-come-first-served dispatch it waited for all of it. (The
/// tasks are long enough that a loaded machine's slow look at the first claim, before the
/// worker is stopped again, leaves most of the backlog queued: at 150 ms a clean-clone CI run
/// saw 89 of 120 worked off by then.)
async fn a_tenants_backlog_does_not_hold_back_another_tenants_first_task(topology: Topology) {
    let mut stack = tenants_stack(topology, &["noisy", "quiet"], &[]).await;
    let (noisy, quiet, store) = (stack.client_as(0, "key-noisy"), stack.client_as(0, "key-quiet"), stack.store());

    // The whole backlog is queued while the worker is stopped: however slowly a loaded machine
    // creates it, none of it is worked off before B arrives. (A short lease, as below: a
    // delivery the stopped worker's read timed out on is taken over within seconds.)
    stack.add_worker(&["--concurrency", "4", "--lease-ms", "3000"]).await;
    stack.workers[0].signal("STOP");
    let backlog = create_many(&noisy, "sleep", 120, 20, json!({"ms": 600})).await;
    stack.workers[0].signal("CONT");
    // A's tasks are being worked through when B arrives; the worker is stopped again while B
    // creates, so what is measured is the order of the claims after B's create, however long
    // a loaded machine takes to make it.
    eventually(PATIENCE, "the backlog to start", || async { claimed_at(&store, &backlog[0]).await }).await;
    stack.workers[0].signal("STOP");
    let first = quiet.create_task("sleep", json!({"ms": 150})).await;
    let record = store.keys().task(&TaskId::parse(&first).unwrap()).record;
    let created: i64 = redis::cmd("HGET").arg(&record).arg("created").query_async(&mut store.conn()).await.unwrap();
    stack.workers[0].signal("CONT");
    quiet.wait_for_status(&first, "completed", PATIENCE).await;

    let started = claimed_at(&store, &first).await.expect("claimed");
    let (mut queued, mut ahead) = (0, 0);
    for id in &backlog {
        let at = claimed_at(&store, id).await;
        if at.is_none_or(|at| at > created) {
            queued += 1;
        }
        if at.is_some_and(|at| at > created && at < started) {
            ahead += 1;
        }
    }
    eprintln!("B started after {ahead} of the {queued} tasks A had queued");
    // First-come-first-served would run every task A had queued before B's; fair dispatch
    // takes B's at the next claim on its shard (here 19 to 30 of about 100 ran first: the
    // claims already under way on the other shards).
    assert!(queued >= 60, "B arrived when only {queued} of A's 120 tasks were still queued");
    assert!(ahead * 2 <= queued, "{ahead} of the {queued} tasks A had queued started before B's");
}

/// One shard (a strict order to check), one worker slot, every task queued while the worker is
/// stopped: `heavy` (weight 2) gets two claims to each of `light`'s while both have tasks
/// queued, though all of heavy's were created first; and within each tenant tasks start in
/// creation order.
async fn weights_share_the_workers_and_each_tenant_keeps_its_order(topology: Topology) {
    let one_shard = ["--queue-shards", "1"];
    let mut gateway = vec!["--tenant-weight", "heavy=2"];
    gateway.extend_from_slice(&one_shard);
    let mut stack = tenants_stack(topology, &["heavy", "light"], &gateway).await;
    let (heavy, light, store) = (stack.client_as(0, "key-heavy"), stack.client_as(0, "key-light"), stack.store());
    // A short lease: a delivery the stopped worker's read timed out on stays pending under it,
    // and is taken over within seconds of SIGCONT rather than after the default 30 s.
    stack.add_worker(&["--concurrency", "1", "--queue-shards", "1", "--lease-ms", "3000"]).await;
    stack.workers[0].signal("STOP");
    let heavy_ids = create_many(&heavy, "sleep", 40, 1, json!({"ms": 5})).await;
    let light_ids = create_many(&light, "sleep", 40, 1, json!({"ms": 5})).await;
    stack.workers[0].signal("CONT");

    let mut claims: Vec<(i64, &str, usize)> = Vec::new();
    for (tenant, ids) in [("heavy", &heavy_ids), ("light", &light_ids)] {
        for (i, id) in ids.iter().enumerate() {
            let at = eventually(PATIENCE, "every task to be claimed", || async { claimed_at(&store, id).await }).await;
            claims.push((at, tenant, i));
        }
    }
    claims.sort();
    // Ties within a millisecond cannot be ordered by time; the creation index breaks them,
    // which only ever favours the order being checked, never the share.
    for tenant in ["heavy", "light"] {
        let order: Vec<usize> = claims.iter().filter(|c| c.1 == tenant).map(|c| c.2).collect();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(order, sorted, "{tenant}'s tasks started out of creation order");
    }
    // While both have tasks queued (the first 60 claims: heavy's 40 and light's first 20 by
    // tag), heavy gets two thirds.
    let heavy_share = claims[..30].iter().filter(|c| c.1 == "heavy").count();
    assert!((17..=23).contains(&heavy_share), "heavy had {heavy_share} of the first 30 claims, not about 20");
    let light_first = claims.iter().position(|c| c.1 == "light").unwrap();
    assert!(light_first <= 3, "light's first task waited for {light_first} of heavy's");
}

/// An answer is a new run, which its tenant asked for: it is charged to the tenant like a new
/// task. `parker` (weight 2) parks 30 questions, answers them all at once while the worker is
/// stopped, and `other` queues 30 tasks after that: the two then share the worker two claims to
/// one, as two tenants creating tasks do. Requeued at the front (the floor) instead, every
/// answered task ran before any of `other`'s, so bulk answers jumped the fair queue.
async fn answered_questions_take_their_tenants_turn(topology: Topology) {
    let mut gateway = vec!["--tenant-weight", "parker=2"];
    gateway.extend_from_slice(&["--queue-shards", "1"]);
    let mut stack = tenants_stack(topology, &["parker", "other"], &gateway).await;
    let (parker, other, store) = (stack.client_as(0, "key-parker"), stack.client_as(0, "key-other"), stack.store());
    // A short lease, as above: a delivery the stopped worker's read timed out on is taken over
    // within seconds of SIGCONT.
    stack.add_worker(&["--concurrency", "1", "--queue-shards", "1", "--lease-ms", "3000"]).await;
    let parked = create_many(&parker, "generate_report", 30, 10, json!({"size": "small"})).await;
    for id in &parked {
        parker.wait_for_status(id, "input_required", PATIENCE).await;
    }

    stack.workers[0].signal("STOP");
    let approve = json!({"approve_outline": {"action": "accept", "content": {"approved": true}}});
    let answers = parked.iter().map(|id| parker.update_task(id, approve.clone()));
    for reply in futures::future::join_all(answers).await {
        assert_eq!(reply.result(), &taskgate_tests::ack(), "{}", reply.text);
    }
    let queued = create_many(&other, "sleep", 30, 10, json!({"ms": 5})).await;
    stack.workers[0].signal("CONT");

    // Each answered task's second claim (its run after the answer), each of other's first.
    let mut claims: Vec<(i64, &str, usize)> = Vec::new();
    for (i, id) in parked.iter().enumerate() {
        let at = eventually(PATIENCE, "every answered task to run again", || async {
            let claims = claims_of(&store, id).await;
            (claims.len() >= 2).then(|| claims[claims.len() - 1])
        })
        .await;
        claims.push((at, "parker", i));
    }
    for (i, id) in queued.iter().enumerate() {
        let at = eventually(PATIENCE, "every task to be claimed", || async { claimed_at(&store, id).await }).await;
        claims.push((at, "other", i));
    }
    claims.sort();
    // Both had tasks queued throughout the first 30 claims (parker's 20 and other's 10 by tag):
    // other has a third of them. At the front, parker's 30 answered tasks were the first 30.
    let others = claims[..30].iter().filter(|c| c.1 == "other").count();
    eprintln!("other had {others} of the first 30 claims after parker's answers");
    assert!((7..=13).contains(&others), "other had {others} of the first 30 claims, not about 10");
}

/// A stack on one shard for `tenants` tenants and `busy` (who keeps a backlog queued, so the
/// ready set never empties), with a worker of 2 slots and `worker` options: the stack and every
/// tenant's name but busy's.
async fn many_tenants(topology: Topology, tenants: usize, worker: &[&str]) -> (Stack, Vec<String>) {
    let names: Vec<String> = (0..tenants).map(|i| format!("t{i:03}")).collect();
    let mut all: Vec<&str> = names.iter().map(String::as_str).collect();
    all.push("busy");
    let mut stack = tenants_stack(topology, &all, &["--queue-shards", "1"]).await;
    let mut args = vec!["--concurrency", "2", "--queue-shards", "1", "--lease-ms", "3000"];
    args.extend_from_slice(worker);
    stack.add_worker(&args).await;
    (stack, names)
}

/// Waits until every task ahead of `busy`'s backlog has been claimed (at most `left` tasks are
/// queued), then reads the fairness hash's size while the backlog is still queued: with the
/// ready set never empty, nothing deleted the hash.
async fn fields_while_backlog_queued(store: &Store, left: usize) -> usize {
    eventually(PATIENCE, "the tasks ahead of the backlog to be claimed", || async {
        (fair_and_ready(store).await.1 <= left).then_some(())
    })
    .await;
    let (fields, queued) = fair_and_ready(store).await;
    assert!(queued > 0, "the backlog drained before the fairness tags were counted");
    fields
}

/// A tenant's tag at or below the floor says nothing (`max(floor, tag)` is the floor), so the
/// claim of its last queued task drops it, a cancelled task's included. 200 tenants queue one
/// task each (50 of them cancelled while queued) while `busy` keeps a backlog: once the 200 are
/// claimed, the hash holds the floor and busy's tag, not a field for every tenant that ever
/// queued (202 here) until the ready set next empties.
async fn tags_of_tenants_with_nothing_queued_are_dropped(topology: Topology) {
    let (stack, names) = many_tenants(topology, 200, &[]).await;
    let store = stack.store();
    stack.workers[0].signal("STOP");
    // Busy's tags are 1 to 150; every other tenant's one task is tagged 1, so all 200 are
    // claimed before busy's second task, and its 149 later ones (1 s each on 2 slots) stay
    // queued long after. So many keep the hash under twice the ready set throughout: the sweep
    // of the next test never runs, and only the claims' own drops are measured.
    create_many(&stack.client_as(0, "key-busy"), "sleep", 150, 10, json!({"ms": 1000})).await;
    for chunk in names.chunks(20) {
        let creates = chunk.iter().enumerate().map(|(i, name)| {
            let stack = &stack;
            async move {
                let client = stack.client_as(0, &format!("key-{name}"));
                let id = client.create_task("sleep", json!({"ms": 0})).await;
                if i % 4 == 0 {
                    assert_eq!(client.cancel_task(&id).await.result(), &taskgate_tests::ack());
                }
            }
        });
        futures::future::join_all(creates).await;
    }
    stack.workers[0].signal("CONT");

    let fields = fields_while_backlog_queued(&store, 149).await;
    assert!(fields <= 2, "{fields} fairness fields with only busy queued (the floor and busy's tag)");
}

/// A task whose record expired while queued leaves the ready set without its claim knowing its
/// tenant, so that tenant's tag cannot be dropped by name: claims sweep out every tag at or
/// below the floor once the hash outgrows twice the ready set. 100 tenants queue one task each
/// with a 1.5 s lifetime, all expired before the worker resumes, while `busy` keeps a backlog.
async fn tags_of_tasks_that_expired_while_queued_are_swept(topology: Topology) {
    let (stack, names) = many_tenants(topology, 100, &["--tool-ttl-ms", "noop=1500"]).await;
    let store = stack.store();
    stack.workers[0].signal("STOP");
    // As above, with 40 tasks of busy's: the hash (102 fields) outgrows twice the ready set
    // while the expired tasks are being claimed.
    create_many(&stack.client_as(0, "key-busy"), "sleep", 40, 10, json!({"ms": 1000})).await;
    let mut expiring = Vec::new();
    for chunk in names.chunks(20) {
        let creates = chunk.iter().map(|name| {
            let stack = &stack;
            async move { stack.client_as(0, &format!("key-{name}")).create_task("noop", json!({})).await }
        });
        expiring.extend(futures::future::join_all(creates).await);
    }
    for id in &expiring {
        let record = store.keys().task(&TaskId::parse(id).unwrap()).record;
        eventually(PATIENCE, "the queued tasks to expire", || async {
            let exists: bool = redis::cmd("EXISTS").arg(&record).query_async(&mut store.conn()).await.unwrap();
            (!exists).then_some(())
        })
        .await;
    }
    stack.workers[0].signal("CONT");

    let fields = fields_while_backlog_queued(&store, 39).await;
    assert!(fields <= 2, "{fields} fairness fields with only busy queued (the floor and busy's tag)");
}
