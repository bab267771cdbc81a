//! Batch claims, through the store on a real Redis (standalone and Cluster, where the script
//! derives the tasks' keys in the queue's slot): the entries of one read take the front of the
//! fair ready set, one task each; a task cancelled while queued leaves the ready set for
//! nothing; an entry written before fair dispatch claims its own task; a batch re-sent after a
//! lost reply answers what its first run took, and takes nothing more. And the batch finish
//! that ends such claims: each end fenced on its own in one call.

use std::time::Duration;

use std::collections::HashMap;

use taskgate_shared::store::{
    Claim, DEFAULT_POOL, Delivery, Ending, Finish, NewTask, OutboxLimits, Store, WORKER_GROUP,
};
use taskgate_shared::task::{Owner, TaskId};
use taskgate_tests::Topology;

taskgate_tests::on_topologies!(
    [standalone: Standalone, cluster: Cluster]
    a_batch_takes_the_front_one_task_per_entry_and_replays_its_claims,
    a_cancelled_task_leaves_the_ready_set_and_an_old_entry_claims_its_own_task,
    a_finish_batch_fences_each_end_on_its_own,
    a_finish_batch_spans_shards_where_one_call_may,
    a_claim_batch_spans_shards_where_one_call_may,
);

const SHARD: u8 = 5;
const LEASE: Duration = Duration::from_secs(30);

/// Creates a queued task of `tenant` on [`SHARD`].
async fn queue(store: &Store, tenant: &str) -> TaskId {
    queue_with(store, tenant, None).await
}

/// Creates a queued task of `tenant` on [`SHARD`], with an outbox when `events` is given.
async fn queue_with(store: &Store, tenant: &str, events: Option<OutboxLimits>) -> TaskId {
    queue_on(store, tenant, SHARD, events).await
}

/// Creates a queued task of `tenant` on `shard`, with an outbox when `events` is given.
async fn queue_on(store: &Store, tenant: &str, shard: u8, events: Option<OutboxLimits>) -> TaskId {
    let id = TaskId::derived(256, shard.into(), rand::random());
    let owner = Owner { tenant: tenant.into(), principal: "p".into() };
    store.create_task(NewTask { events, ..taskgate_tests::sleep_task(&id, &owner) }).await.expect("created");
    id
}

/// Every entry waiting on [`SHARD`]'s stream, read as worker `consumer`.
async fn deliveries(store: &Store, consumer: &str) -> Vec<Delivery> {
    deliveries_on(store, consumer, SHARD).await
}

/// Every entry waiting on `shard`'s stream, read as worker `consumer`.
async fn deliveries_on(store: &Store, consumer: &str, shard: u8) -> Vec<Delivery> {
    let stream = store.keys().queue(shard, DEFAULT_POOL).stream;
    let created: redis::RedisResult<()> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&stream)
        .arg(WORKER_GROUP)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut store.conn())
        .await;
    if let Err(err) = created {
        assert_eq!(err.code(), Some("BUSYGROUP"), "{err}");
    }
    let mut reader = store.blocking_connection().await.unwrap();
    store.read_deliveries(&mut reader, &[shard], DEFAULT_POOL, consumer, 100, Duration::from_millis(100)).await.unwrap()
}

async fn count(store: &Store, cmd: &str, key: &str) -> u64 {
    redis::cmd(cmd).arg(key).query_async(&mut store.conn()).await.unwrap()
}

fn ids(claims: &[Claim]) -> Vec<(TaskId, u64)> {
    claims.iter().map(|c| (c.task_id.clone(), c.fence)).collect()
}

/// Three tasks queued by one tenant, then one by another: the other tenant's first task ties
/// with the first tenant's first, ahead of its second (fair order). Two entries take those two
/// lowest tags; the same batch sent again answers those two claims; another worker's batch of
/// the same entries takes nothing (the entries are spent); the two entries left take the
/// first tenant's other two, in its order.
async fn a_batch_takes_the_front_one_task_per_entry_and_replays_its_claims(topology: Topology) {
    let stack = topology.builder().workers(0).gateways(0).spawn().await;
    let store = stack.store();
    let a1 = queue(&store, "a").await;
    let a2 = queue(&store, "a").await;
    let a3 = queue(&store, "a").await;
    let b1 = queue(&store, "b").await;
    let all = deliveries(&store, "w-1").await;
    assert_eq!(all.len(), 4, "one entry per task");
    let first = store.claim_batch(&all[..2], DEFAULT_POOL, "w-1", LEASE).await.unwrap();
    let mut taken: Vec<TaskId> = first.iter().map(|c| c.task_id.clone()).collect();
    taken.sort_by(|x, y| x.as_str().cmp(y.as_str()));
    let mut front = vec![a1.clone(), b1.clone()];
    front.sort_by(|x, y| x.as_str().cmp(y.as_str()));
    assert_eq!(taken, front, "the two lowest tags: each tenant's first task");
    assert!(first.iter().all(|c| c.fence > 0 && c.tool == "sleep"));

    let again = store.claim_batch(&all[..2], DEFAULT_POOL, "w-1", LEASE).await.unwrap();
    assert_eq!(ids(&again), ids(&first), "a replay answers the same claims");
    let other = store.claim_batch(&all[..2], DEFAULT_POOL, "w-2", LEASE).await.unwrap();
    assert!(other.is_empty(), "another worker's batch of spent entries took {:?}", ids(&other));

    let queue_keys = store.keys().queue(SHARD, DEFAULT_POOL);
    assert_eq!(count(&store, "ZCARD", &queue_keys.ready).await, 2);
    assert_eq!(count(&store, "XLEN", &queue_keys.stream).await, 2, "the two entries taken are deleted");
    let rest = store.claim_batch(&all[2..], DEFAULT_POOL, "w-1", LEASE).await.unwrap();
    let rest: Vec<TaskId> = rest.into_iter().map(|c| c.task_id).collect();
    assert_eq!(rest, vec![a2, a3], "then a's others, in a's order");
    assert_eq!(count(&store, "ZCARD", &queue_keys.ready).await, 0);
    assert_eq!(count(&store, "XLEN", &queue_keys.stream).await, 0);
    assert_eq!(count(&store, "EXISTS", &queue_keys.fair).await, 0, "the tags go with the last task");
    let leases = store.keys().shard(SHARD).leases;
    assert_eq!(count(&store, "ZCARD", &leases).await, 4, "every claim is in the lease index");
}

/// A task cancelled while queued leaves the ready set at the front for nothing, spending its
/// entry; a task that is `working` and unheld but in no ready set (queued before fair
/// dispatch) is claimed by its own entry, which takes nothing from the ready set.
async fn a_cancelled_task_leaves_the_ready_set_and_an_old_entry_claims_its_own_task(topology: Topology) {
    let stack = topology.builder().workers(0).gateways(0).spawn().await;
    let store = stack.store();
    let owner = Owner { tenant: "a".into(), principal: "p".into() };
    let cancelled = queue(&store, "a").await;
    let next = queue(&store, "a").await;
    let old = queue(&store, "a").await;
    store.cancel_task(&cancelled, &owner, "no").await.unwrap();
    let queue_keys = store.keys().queue(SHARD, DEFAULT_POOL);
    // As if queued before fair dispatch: an entry, and no place in the ready set.
    let _: u64 =
        redis::cmd("ZREM").arg(&queue_keys.ready).arg(old.as_str()).query_async(&mut store.conn()).await.unwrap();
    let all = deliveries(&store, "w-1").await;
    assert_eq!(all.len(), 3);
    let claims = store.claim_batch(&all, DEFAULT_POOL, "w-1", LEASE).await.unwrap();
    let mut taken: Vec<TaskId> = claims.iter().map(|c| c.task_id.clone()).collect();
    taken.sort_by(|x, y| x.as_str().cmp(y.as_str()));
    let mut expected = vec![next, old];
    expected.sort_by(|x, y| x.as_str().cmp(y.as_str()));
    assert_eq!(taken, expected, "the cancelled task is not claimed; the old one is, by its own entry");
    assert_eq!(count(&store, "ZCARD", &queue_keys.ready).await, 0, "the cancelled task left the ready set");
    assert_eq!(count(&store, "XLEN", &queue_keys.stream).await, 0);
}

/// A task's record, every field.
async fn record(store: &Store, id: &TaskId) -> HashMap<String, String> {
    redis::cmd("HGETALL").arg(&store.keys().task(id).record).query_async(&mut store.conn()).await.unwrap()
}

async fn in_lease_index(store: &Store, id: &TaskId) -> bool {
    let leases = store.keys().shard(id.shard()).leases;
    let score: Option<f64> =
        redis::cmd("ZSCORE").arg(&leases).arg(id.as_str()).query_async(&mut store.conn()).await.unwrap();
    score.is_some()
}

/// One finish batch of seven ends on one shard, each fenced on its own: a valid end; an end
/// of a task another worker holds (its fencing token, the wrong holder); an end under a wrong
/// token; an end written already, sent again the same (answered written, nothing rewritten)
/// and with another outcome (refused); a result too long for the record (set aside in `:out`);
/// the end of a task with an outbox (its entry appended). The refused ends leave their records
/// and leases as they were; the others are written.
async fn a_finish_batch_fences_each_end_on_its_own(topology: Topology) {
    let stack = topology.builder().workers(0).gateways(0).spawn().await;
    let store = stack.store();
    // Held by another worker: queued and claimed alone, first.
    let other = queue(&store, "a").await;
    let theirs = store.claim_batch(&deliveries(&store, "w-2").await, DEFAULT_POOL, "w-2", LEASE).await.unwrap();
    assert_eq!(ids(&theirs).iter().map(|(id, _)| id.clone()).collect::<Vec<_>>(), vec![other.clone()]);
    let their_fence = theirs[0].fence;
    let limits = OutboxLimits { retention_ms: 3_600_000, cap: 10_000 };
    let valid = queue(&store, "a").await;
    let long = queue(&store, "a").await;
    let replayed = queue(&store, "a").await;
    let wrong = queue(&store, "a").await;
    let announced = queue_with(&store, "a", Some(limits)).await;
    let claims = store.claim_batch(&deliveries(&store, "w-1").await, DEFAULT_POOL, "w-1", LEASE).await.unwrap();
    let fences: HashMap<TaskId, u64> = ids(&claims).into_iter().collect();
    assert_eq!(fences.len(), 5, "w-1 holds the other five: {fences:?}");

    let short = r#"{"content":[],"isError":false}"#;
    let long_result = format!(r#"{{"content":[{{"type":"text","text":"{}"}}],"isError":false}}"#, "x".repeat(100));
    let completed = |result| Finish::Completed { result, message: None };
    let end = |id: &TaskId, fence: u64, outcome: &Finish<'_>| Ending::new(id, fence, outcome);
    let first = store.finish_batch("w-1", &[end(&replayed, fences[&replayed], &completed(short))]).await.unwrap();
    assert_eq!(first, vec![true]);

    let other_before = record(&store, &other).await;
    let wrong_before = record(&store, &wrong).await;
    let replayed_before = record(&store, &replayed).await;
    let valid_before = record(&store, &valid).await;
    let timeline_len = |id: &TaskId| {
        let key = store.keys().task(id).timeline;
        let mut conn = store.conn();
        async move { redis::cmd("LLEN").arg(&key).query_async::<u64>(&mut conn).await.unwrap() }
    };
    let replayed_timeline = timeline_len(&replayed).await;
    let obx = record(&store, &announced).await.remove("obx").expect("a task with events on has `obx`");
    let outbox = store.keys().outbox(SHARD, obx.split(' ').next().unwrap());
    let outbox_len = count(&store, "XLEN", &outbox).await;
    assert!(outbox_len >= 1, "the create's entry");

    let failed = Finish::Failed { error: r#"{"code":-32603,"message":"late"}"#, message: None };
    let ends = [
        end(&valid, fences[&valid], &completed(short)),
        end(&other, their_fence, &completed(short)),
        end(&long, fences[&long], &completed(&long_result)),
        end(&replayed, fences[&replayed], &completed(short)),
        end(&wrong, fences[&wrong] + 1, &completed(short)),
        end(&replayed, fences[&replayed], &failed),
        end(&announced, fences[&announced], &completed(short)),
    ];
    let answers = store.finish_batch("w-1", &ends).await.unwrap();
    assert_eq!(answers, vec![true, false, true, true, false, false, true], "each end's answer, in order");

    // Written: the terminal fields, one version on, the lease gone.
    let valid_after = record(&store, &valid).await;
    assert_eq!(valid_after["status"], "completed");
    assert_eq!(valid_after["result"], short, "a short result stays in the record");
    assert_eq!(valid_after["finisher"], "w-1");
    assert!(!valid_after.contains_key("holder"), "{valid_after:?}");
    let version = |r: &HashMap<String, String>| r.get("ver").map_or(0, |v| v.parse::<u64>().unwrap());
    assert_eq!(version(&valid_after), version(&valid_before) + 1);
    assert!(!in_lease_index(&store, &valid).await);
    assert_eq!(count(&store, "EXISTS", &store.keys().task(&valid).outcome).await, 0);

    // Refused: the records and their leases as they were.
    assert_eq!(record(&store, &other).await, other_before, "another worker's task is untouched");
    assert_eq!(record(&store, &wrong).await, wrong_before, "a wrong token writes nothing");
    assert!(in_lease_index(&store, &other).await && in_lease_index(&store, &wrong).await);

    // Sent again, the same or otherwise: the terminal record is not written again.
    assert_eq!(record(&store, &replayed).await, replayed_before, "an ended task is not rewritten");
    assert_eq!(replayed_before["status"], "completed");
    assert_eq!(timeline_len(&replayed).await, replayed_timeline, "nor its timeline appended to");

    // A long result is set aside, expiring with the record.
    let long_after = record(&store, &long).await;
    assert_eq!(long_after["status"], "completed");
    assert_eq!(long_after["result"], "@aside", "a long result leaves the record");
    let out = store.keys().task(&long).outcome;
    let kept: String = redis::cmd("GET").arg(&out).query_async(&mut store.conn()).await.unwrap();
    assert_eq!(kept, long_result);
    let ttl: i64 = redis::cmd("PTTL").arg(&out).query_async(&mut store.conn()).await.unwrap();
    assert!(ttl > 0, "the set-aside result expires with the record: {ttl}");

    // A task with an outbox gets its end appended.
    assert_eq!(record(&store, &announced).await["status"], "completed");
    assert_eq!(count(&store, "XLEN", &outbox).await, outbox_len + 1, "one entry for the end");
    let last: Vec<(String, Vec<String>)> = redis::cmd("XREVRANGE")
        .arg(&outbox)
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1)
        .query_async(&mut store.conn())
        .await
        .unwrap();
    let fields: HashMap<&str, &str> = last[0].1.chunks(2).map(|kv| (kv[0].as_str(), kv[1].as_str())).collect();
    assert_eq!((fields["t"], fields["s"]), (announced.as_str(), "completed"), "{fields:?}");
}

/// One finish batch of the ends of tasks on three shards, interleaved, one with a stale token.
/// Where one call may use keys of several slots (standalone) it writes each valid end under its
/// own shard's keys (the record, the shard's lease index, the shard's outbox) and refuses the
/// stale one; on a Cluster the store refuses the whole batch before sending it (the worker
/// sends each shard's ends on their own there), and nothing is written.
async fn a_finish_batch_spans_shards_where_one_call_may(topology: Topology) {
    let stack = topology.builder().workers(0).gateways(0).spawn().await;
    let store = stack.store();
    let limits = OutboxLimits { retention_ms: 3_600_000, cap: 10_000 };
    let shards = [SHARD, 9, 200];
    let (mut plain, mut announced) = (Vec::new(), Vec::new());
    for shard in shards {
        let one = queue_on(&store, "a", shard, None).await;
        let other = queue_on(&store, "a", shard, Some(limits)).await;
        let claims = store.claim_batch(&deliveries_on(&store, "w-1", shard).await, DEFAULT_POOL, "w-1", LEASE).await;
        let fences: HashMap<TaskId, u64> = ids(&claims.unwrap()).into_iter().collect();
        assert_eq!(fences.len(), 2, "w-1 holds both of shard {shard}: {fences:?}");
        plain.push((one.clone(), fences[&one]));
        announced.push((other.clone(), fences[&other]));
    }
    let outbox_of = |id: &TaskId| {
        let store = store.clone();
        let (id, shard) = (id.clone(), id.shard());
        async move {
            let obx = record(&store, &id).await.remove("obx").expect("a task with events on has `obx`");
            store.keys().outbox(shard, obx.split(' ').next().unwrap())
        }
    };
    let mut outboxes = Vec::new();
    for (id, _) in &announced {
        let outbox = outbox_of(id).await;
        let len = count(&store, "XLEN", &outbox).await;
        outboxes.push((outbox, len));
    }
    let short = r#"{"content":[],"isError":false}"#;
    let done = Finish::Completed { result: short, message: None };
    // Shards interleaved; the second shard's announced task under a wrong token.
    let mut ends: Vec<Ending> = plain.iter().map(|(id, fence)| Ending::new(id, *fence, &done)).collect();
    ends.extend(announced.iter().enumerate().map(|(i, (id, fence))| Ending::new(id, fence + u64::from(i == 1), &done)));
    let status = |id: &TaskId| {
        let store = store.clone();
        let id = id.clone();
        async move { record(&store, &id).await.remove("status").unwrap_or_default() }
    };

    let answers = store.finish_batch("w-1", &ends).await;
    if matches!(topology, Topology::Standalone) {
        assert_eq!(answers.unwrap(), vec![true, true, true, true, false, true], "each end's answer, in order");
    } else {
        assert!(answers.is_err(), "a Cluster's batch keeps to one shard: {answers:?}");
        for end in &ends {
            assert_eq!(status(&end.task_id).await, "working", "nothing written");
            assert!(in_lease_index(&store, &end.task_id).await);
        }
        return;
    }
    for (i, end) in ends.iter().enumerate() {
        let refused = i == 4;
        assert_eq!(status(&end.task_id).await, if refused { "working" } else { "completed" }, "{i}");
        assert_eq!(in_lease_index(&store, &end.task_id).await, refused, "{i}: its shard's lease index");
    }
    for (i, (outbox, before)) in outboxes.iter().enumerate() {
        let appended = u64::from(i != 1);
        assert_eq!(count(&store, "XLEN", outbox).await, before + appended, "shard {}'s outbox", shards[i]);
    }
}

/// One read delivers from several shards: on a Redis that is not a Cluster one call claims for
/// them all, each shard's deliveries taking its own fair front; the same batch sent again
/// answers the same claims (a receipt per shard), another worker's takes nothing. A Cluster's
/// script keeps to one slot: there the store refuses such a batch, and claims nothing.
async fn a_claim_batch_spans_shards_where_one_call_may(topology: Topology) {
    let stack = topology.builder().workers(0).gateways(0).spawn().await;
    let store = stack.store();
    let a1 = queue_on(&store, "a", SHARD, None).await;
    let _a2 = queue_on(&store, "a", SHARD, None).await;
    let b1 = queue_on(&store, "b", SHARD, None).await;
    let c1 = queue_on(&store, "c", 9, None).await;
    let d1 = queue_on(&store, "d", 200, None).await;
    let d2 = queue_on(&store, "d", 200, None).await;
    let (five, nine, last) = (
        deliveries_on(&store, "w-1", SHARD).await,
        deliveries_on(&store, "w-1", 9).await,
        deliveries_on(&store, "w-1", 200).await,
    );
    // Shards interleaved, as one read over every shard brings them; two of shard 5's three.
    let batch = vec![five[0].clone(), nine[0].clone(), last[0].clone(), five[1].clone(), last[1].clone()];
    let claims = store.claim_batch(&batch, DEFAULT_POOL, "w-1", LEASE).await;
    if matches!(topology, Topology::Cluster) {
        assert!(claims.is_err(), "a Cluster's batch keeps to one shard: {claims:?}");
        assert_eq!(count(&store, "ZCARD", &store.keys().queue(SHARD, DEFAULT_POOL).ready).await, 3, "nothing taken");
        return;
    }
    let claims = claims.unwrap();
    let mut taken: Vec<String> = claims.iter().map(|c| c.task_id.as_str().to_owned()).collect();
    taken.sort();
    let mut front: Vec<String> = [&a1, &b1, &c1, &d1, &d2].iter().map(|id| id.as_str().to_owned()).collect();
    front.sort();
    assert_eq!(taken, front, "each shard's fair front: a's first and b's on shard {SHARD}, then 9's and 200's");
    let again = store.claim_batch(&batch, DEFAULT_POOL, "w-1", LEASE).await.unwrap();
    assert_eq!(ids(&again), ids(&claims), "a replay answers the same claims");
    let other = store.claim_batch(&batch, DEFAULT_POOL, "w-2", LEASE).await.unwrap();
    assert!(other.is_empty(), "another worker's batch of spent entries took {:?}", ids(&other));
    for (shard, left) in [(SHARD, 1), (9, 0), (200, 0)] {
        let queue = store.keys().queue(shard, DEFAULT_POOL);
        assert_eq!(count(&store, "ZCARD", &queue.ready).await, left, "queued on shard {shard}");
        assert_eq!(count(&store, "XLEN", &queue.stream).await, left, "entries left on shard {shard}");
    }
}
