//! Batch claims, through the store on a real Redis (standalone and Cluster, where the script
//! derives the tasks' keys in the queue's slot): the entries of one read take the front of the
//! fair ready set, one task each; a task cancelled while queued leaves the ready set for
//! nothing; an entry written before fair dispatch claims its own task; a batch re-sent after a
//! lost reply answers what its first run took, and takes nothing more.

use std::time::Duration;

use taskgate_shared::store::{Claim, DEFAULT_POOL, Delivery, NewTask, Store, WORKER_GROUP};
use taskgate_shared::task::{Owner, TaskId};
use taskgate_tests::Topology;

taskgate_tests::on_topologies!(
    [standalone: Standalone, cluster: Cluster]
    a_batch_takes_the_front_one_task_per_entry_and_replays_its_claims,
    a_cancelled_task_leaves_the_ready_set_and_an_old_entry_claims_its_own_task,
);

const SHARD: u8 = 5;
const LEASE: Duration = Duration::from_secs(30);

/// Creates a queued task of `tenant` on [`SHARD`].
async fn queue(store: &Store, tenant: &str) -> TaskId {
    let id = TaskId::derived(256, SHARD.into(), rand::random());
    let owner = Owner { tenant: tenant.into(), principal: "p".into() };
    store.create_task(NewTask { ..taskgate_tests::sleep_task(&id, &owner) }).await.expect("created");
    id
}

/// Every entry waiting on [`SHARD`]'s stream, read as worker `consumer`.
async fn deliveries(store: &Store, consumer: &str) -> Vec<Delivery> {
    let stream = store.keys().queue(SHARD, DEFAULT_POOL).stream;
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
    store.read_deliveries(&mut reader, &[SHARD], DEFAULT_POOL, consumer, 100, Duration::from_millis(100)).await.unwrap()
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
