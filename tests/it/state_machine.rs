//! Property test of the task state machine: random sequences of every transition,
//! issued by current and stale lease holders, owners and strangers, run against the real Lua
//! scripts on a real redis-server. After every step:
//! - a terminal state never changes again (status, result, error);
//! - the version never goes backwards, and the fencing token never shrinks;
//! - a write with a stale fencing token is refused and changes nothing;
//! - outstanding input requests exist only while `input_required`;
//! - a held question (`hold_for_input`) keeps its holder, and is marked only while the task
//!   shows `input_required`; looking for its answer changes nothing;
//! - an operator's fail ends any task that is not terminal, and leaves a terminal one alone.

use std::time::Duration;

use proptest::prelude::*;
use taskgate_shared::store::{
    CancelOutcome, DEFAULT_POOL, Delivery, Endpoint, Finish, Lease, OperatorFail, Parked, Released, Store,
};
use taskgate_shared::task::{Owner, TaskStatus};
use taskgate_tests::RedisServer;

#[derive(Debug, Clone)]
enum Op {
    /// Deliver and claim (as worker `w`).
    Claim(u8),
    /// Renew / status / park / finish with the latest fence (`true`) or a stale one.
    Renew(bool),
    Status(bool),
    Park(bool, u8),
    Complete(bool),
    Fail(bool),
    Release(bool),
    /// Answer input key `k`, as the owner (`true`) or a stranger.
    Answer(bool, u8),
    Cancel(bool),
    Reclaim,
    /// Hold a question open (key `k`) while keeping the lease, or look for its answer.
    Hold(bool, u8),
    HeldAnswer(bool, u8),
    /// An operator fails the task from the console, whoever holds it.
    OperatorFail,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..2).prop_map(Op::Claim),
        any::<bool>().prop_map(Op::Renew),
        any::<bool>().prop_map(Op::Status),
        (any::<bool>(), 0u8..4).prop_map(|(c, k)| Op::Park(c, k)),
        any::<bool>().prop_map(Op::Complete),
        any::<bool>().prop_map(Op::Fail),
        any::<bool>().prop_map(Op::Release),
        (any::<bool>(), 0u8..4).prop_map(|(o, k)| Op::Answer(o, k)),
        any::<bool>().prop_map(Op::Cancel),
        Just(Op::Reclaim),
        (any::<bool>(), 0u8..4).prop_map(|(c, k)| Op::Hold(c, k)),
        (any::<bool>(), 0u8..4).prop_map(|(c, k)| Op::HeldAnswer(c, k)),
        Just(Op::OperatorFail),
    ]
}

/// What the checker remembers of the task.
#[derive(Debug, Default)]
struct Seen {
    fence: u64,
    holder: Option<String>,
    terminal: Option<(TaskStatus, serde_json::Value, Option<serde_json::Value>)>,
}

async fn field(conn: &mut redis::aio::MultiplexedConnection, key: &str, name: &str) -> Option<String> {
    redis::cmd("HGET").arg(key).arg(name).query_async(conn).await.unwrap()
}

async fn run(store: &Store, conn: &mut redis::aio::MultiplexedConnection, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let owner = Owner { tenant: "t".into(), principal: "p".into() };
    let stranger = Owner { tenant: "t".into(), principal: "q".into() };
    let id = taskgate_tests::write_task(store, &owner).await;
    let keys = store.keys().task(&id);
    let mut seen = Seen::default();
    let lease_ms = Duration::from_millis(60_000);
    for op in ops {
        let fence_for = |current: bool| if current { seen.fence } else { seen.fence.saturating_sub(1) };
        let worker = seen.holder.clone().unwrap_or_else(|| "w0".into());
        let before = store.get_task(&id).await.unwrap().unwrap();
        match &op {
            Op::Claim(w) => {
                // Queue entries are hints; deliver one for the claim to act on.
                let entry: String = redis::cmd("XADD")
                    .arg(&keys.stream)
                    .arg("*")
                    .arg("id")
                    .arg(id.as_str())
                    .query_async(conn)
                    .await
                    .unwrap();
                let delivery = Delivery { entry_id: entry, task_id: id.clone() };
                if let Some(claim) =
                    store.claim(&mut delivery.clone(), DEFAULT_POOL, &format!("w{w}"), lease_ms).await.unwrap()
                {
                    prop_assert_eq!(&claim.task_id, &id);
                    prop_assert!(claim.fence > seen.fence, "fences grow");
                    prop_assert_eq!(before.status, TaskStatus::Working);
                    seen.fence = claim.fence;
                    seen.holder = Some(format!("w{w}"));
                }
            }
            Op::Renew(c) => {
                let _ = store
                    .renew(Lease { task_id: &id, worker: &worker, fence: fence_for(*c), outbox: None }, lease_ms)
                    .await
                    .unwrap();
            }
            Op::Status(c) => {
                store
                    .set_status(Lease { task_id: &id, worker: &worker, fence: fence_for(*c), outbox: None }, "s")
                    .await
                    .unwrap();
            }
            Op::Park(c, k) => {
                let requests = vec![(format!("k{k}"), r#"{"method":"roots/list","params":{}}"#.to_owned())];
                let parked = store
                    .request_input(
                        Lease { task_id: &id, worker: &worker, fence: fence_for(*c), outbox: None },
                        None,
                        &requests,
                        None,
                        "c",
                    )
                    .await
                    .unwrap();
                if matches!(parked, Parked::Parked | Parked::CancelledInstead) {
                    seen.holder = None;
                }
            }
            Op::Complete(c) => {
                store
                    .finish(
                        Lease { task_id: &id, worker: &worker, fence: fence_for(*c), outbox: None },
                        Finish::Completed { result: r#"{"ok":1}"#, message: None },
                    )
                    .await
                    .unwrap();
            }
            Op::Fail(c) => {
                store
                    .finish(
                        Lease { task_id: &id, worker: &worker, fence: fence_for(*c), outbox: None },
                        Finish::Failed { error: r#"{"code":1,"message":"m"}"#, message: None },
                    )
                    .await
                    .unwrap();
            }
            Op::Release(c) => {
                if store
                    .release(
                        Lease { task_id: &id, worker: &worker, fence: fence_for(*c), outbox: None },
                        DEFAULT_POOL,
                        "c",
                    )
                    .await
                    .unwrap()
                    != Released::LeaseLost
                {
                    seen.holder = None;
                }
            }
            Op::Answer(o, k) => {
                let who = if *o { &owner } else { &stranger };
                store
                    .answer_inputs(&id, who, &[(format!("k{k}"), r#"{"roots":[]}"#.to_owned())], None, 1.0)
                    .await
                    .unwrap();
            }
            Op::Cancel(o) => {
                let who = if *o { &owner } else { &stranger };
                let outcome = store.cancel_task(&id, who, "c").await.unwrap();
                if !*o {
                    prop_assert_eq!(outcome, CancelOutcome::NotFound, "a stranger learns nothing");
                }
            }
            Op::Hold(c, k) => {
                let lease = Lease { task_id: &id, worker: &worker, fence: fence_for(*c), outbox: None };
                let request = r#"{"method":"roots/list","params":{}}"#;
                store.hold_for_input(lease, "q", &format!("k{k}"), request).await.unwrap();
            }
            Op::HeldAnswer(c, k) => {
                let lease = Lease { task_id: &id, worker: &worker, fence: fence_for(*c), outbox: None };
                store.held_answer(lease, &format!("k{k}")).await.unwrap();
                let after = store.get_task(&id).await.unwrap().unwrap();
                prop_assert_eq!(after.version, before.version, "looking for an answer wrote");
            }
            Op::OperatorFail => {
                let outcome = store
                    .fail_task_as_operator(&id, r#"{"code":-32603,"message":"stopped"}"#, "stopped", "t/op", "stuck")
                    .await
                    .unwrap();
                let expected = if before.status.is_terminal() {
                    OperatorFail::AlreadyTerminal
                } else {
                    prop_assert!(matches!(outcome, OperatorFail::Failed { .. }), "{outcome:?}");
                    seen.holder = None;
                    outcome.clone()
                };
                prop_assert_eq!(outcome, expected);
            }
            Op::Reclaim => {
                // Expire the lease first so the reaper's step has something to do.
                let _: () = redis::cmd("HSET").arg(&keys.record).arg("lease").arg(0).query_async(conn).await.unwrap();
                let _ =
                    store.reclaim(&id, DEFAULT_POOL, 3, r#"{"code":-32603,"message":"lost"}"#, "f", "c").await.unwrap();
                if field(conn, &keys.record, "holder").await.is_none() {
                    seen.holder = None;
                }
            }
        }
        let after = store.get_task(&id).await.unwrap().unwrap();
        prop_assert!(after.version >= before.version, "version went back after {op:?}");
        let fence: u64 = field(conn, &keys.record, "fence").await.unwrap().parse().unwrap();
        prop_assert!(fence >= seen.fence, "fence shrank after {op:?}");
        if let Some((status, result, error)) = &seen.terminal {
            prop_assert_eq!(after.status, *status, "terminal state changed after {:?}", op);
            prop_assert_eq!(&after.parsed_result(), result);
            prop_assert_eq!(&after.error, error);
            prop_assert_eq!(after.version, before.version, "a terminal task was written after {:?}", op);
        } else if after.status.is_terminal() {
            seen.terminal = Some((after.status, after.parsed_result(), after.error.clone()));
        }
        let stale = matches!(
            op,
            Op::Renew(false)
                | Op::Status(false)
                | Op::Park(false, _)
                | Op::Complete(false)
                | Op::Fail(false)
                | Op::Release(false)
                | Op::Hold(false, _)
        );
        if stale && seen.fence > 0 {
            prop_assert_eq!(after.version, before.version, "a stale write landed: {:?}", op);
            prop_assert_eq!(after.status, before.status);
        }
        if field(conn, &keys.record, "held").await.is_some() {
            prop_assert_eq!(after.status, TaskStatus::InputRequired, "held outside input_required after {:?}", op);
            prop_assert!(field(conn, &keys.record, "holder").await.is_some(), "held without a holder after {op:?}");
        }
        let inputs: u64 = redis::cmd("HLEN").arg(&keys.inputs).query_async(conn).await.unwrap();
        prop_assert_eq!(
            inputs > 0,
            after.status == TaskStatus::InputRequired,
            "outstanding inputs only while input_required"
        );
    }
    Ok(())
}

#[test]
fn random_transition_sequences_keep_the_invariants() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let _entered = runtime.enter();
    let redis = runtime.block_on(RedisServer::start());
    // A multiplexed connection is a cheap clone.
    let conn = runtime.block_on(redis.connection());
    let config = ProptestConfig { cases: 256, ..ProptestConfig::default() };
    proptest!(config, |(ops in proptest::collection::vec(op(), 1..40))| {
        // A namespace per case: a claim takes the fairest task queued on its shard, which must
        // be this case's task, not one an earlier case left queued.
        let store =
            Store::connect_lazy(&Endpoint::new(redis.url()), &taskgate_tests::unique_namespace(), Duration::from_secs(2))
                .unwrap();
        runtime.block_on(store.ensure_groups(4, DEFAULT_POOL)).unwrap();
        runtime.block_on(run(&store, &mut conn.clone(), ops))?;
    });
}
