//! The durable task lifecycle across replicas: real redis-server, real gateways and
//! workers, crashes by `kill -9`.

use std::time::Duration;

use serde_json::{Value, json};
use taskgate_shared::store::{Finish, Lease};
use taskgate_shared::task::{Owner, TaskId};
use taskgate_tests::{McpClient, Stack, ack, eventually, meta};

const PATIENCE: Duration = Duration::from_secs(15);

/// A field of a task's Redis record, for white-box assertions.
async fn record_field(stack: &Stack, task_id: &str, field: &str) -> Option<String> {
    let id = TaskId::parse(task_id).expect("a task id");
    let key = stack.store().keys().task(&id).record;
    let mut conn = stack.redis.connection().await;
    redis::cmd("HGET").arg(key).arg(field).query_async(&mut conn).await.expect("HGET")
}

/// Waits until some worker holds the task; returns the holder's index in `stack.workers`.
async fn holder_index(stack: &Stack, task_id: &str) -> usize {
    let holder =
        eventually(PATIENCE, "a worker to claim the task", || async { record_field(stack, task_id, "holder").await })
            .await;
    let prefix = holder.split('-').next().unwrap_or_default().trim_start_matches('w').to_owned();
    prefix.parse().expect("worker ids are w<index>-…")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_created_answered_and_finished_across_two_replicas() {
    let mut stack = Stack::builder().gateways(2).workers(0).spawn().await;
    let (a, b) = (stack.client(0), stack.client(1));

    let discover = a.call("server/discover", json!({})).await;
    assert_eq!(discover.result()["resultType"], "complete");
    assert!(discover.result().get("status").is_none(), "discover has no status (an acknowledgement carries none)");

    // The catalogue comes from workers; start one to publish it, then stop it so the task stays
    // observably `working` until a worker runs again.
    let w = stack.add_worker(&[]).await;
    stack.workers[w].kill().await;

    let created = a.call("tools/call", json!({"name": "generate_report", "arguments": {"size": "large"}})).await;
    let result = created.result();
    assert_eq!(result["resultType"], "task");
    assert_eq!(result["status"], "working");
    assert_eq!(result["statusMessage"], "Preparing report outline.");
    assert_eq!(result["ttlMs"], 900000);
    assert_eq!(result["pollIntervalMs"], 1000);
    assert_eq!(result["createdAt"], result["lastUpdatedAt"]);
    for absent in ["inputRequests", "result", "error", "requestState"] {
        assert!(result.get(absent).is_none(), "CreateTaskResult has no {absent}");
    }
    let task_id = result["taskId"].as_str().unwrap().to_owned();
    assert!(TaskId::parse(&task_id).is_some(), "128 random bits, shard-tagged: {task_id}");

    stack.gateways[0].restart().await;

    let got = b.get_task(&task_id).await;
    assert_eq!(got.result()["resultType"], "complete");
    assert_eq!(got.result()["status"], "working");
    assert_eq!(got.result()["taskId"], task_id.as_str());

    stack.add_worker(&[]).await;
    let parked = b.wait_for_status(&task_id, "input_required", PATIENCE).await;
    assert_eq!(parked["statusMessage"], "Waiting for outline approval.");
    assert_eq!(
        parked["inputRequests"],
        json!({"approve_outline": {"method": "elicitation/create", "params": {
            "mode": "form",
            "message": "Approve the generated report outline?",
            "requestedSchema": {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}
        }}})
    );

    let a = stack.client(0);
    let updated =
        a.update_task(&task_id, json!({"approve_outline": {"action": "accept", "content": {"approved": true}}})).await;
    assert_eq!(updated.result(), &ack());

    let done = b.wait_for_status(&task_id, "completed", PATIENCE).await;
    assert_eq!(done["statusMessage"], "Report completed.");
    assert!(done.get("inputRequests").is_none());
    assert_eq!(
        done["result"],
        json!({
            "resultType": "complete",
            "content": [{"type": "text", "text": "Generated large report with approved outline."}],
            "structuredContent": {"size": "large", "approved": true},
            "isError": false,
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "taskgate", "version": env!("CARGO_PKG_VERSION")}}
        })
    );
    // Timestamps are ISO 8601 and only move forward.
    assert!(done["lastUpdatedAt"].as_str() > done["createdAt"].as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_methods_keep_their_contract_over_the_wire() {
    let stack = Stack::builder().spawn().await;
    let client = stack.client(0);

    // Server-directed creation: the request carries no legacy task flag.
    let request = client.envelope("tools/call", json!({"name": "generate_report", "arguments": {"size": "large"}}));
    assert!(request["params"]["_meta"].get("task").is_none());
    let task_id = client.create_task("generate_report", json!({"size": "large"})).await;

    // tasks/get uses the complete discriminator whatever the task's status.
    assert_eq!(client.get_task(&task_id).await.result()["resultType"], "complete");

    // An unknown input key is ignored: acknowledged, still input_required.
    client.wait_for_status(&task_id, "input_required", PATIENCE).await;
    let r = client.update_task(&task_id, json!({"unknown": {"value": 1}})).await;
    assert_eq!(r.result(), &ack());
    let r = client.update_task(&task_id, json!({"approve_outline": "not an object"})).await;
    assert_eq!(r.result(), &ack());
    let still = client.get_task(&task_id).await;
    assert_eq!(still.result()["status"], "input_required");
    assert!(still.result()["inputRequests"].get("approve_outline").is_some());

    // 8 and 9. Accepting moves it on; the completed task inlines the nested result.
    let r = client
        .update_task(&task_id, json!({"approve_outline": {"action": "accept", "content": {"approved": true}}}))
        .await;
    assert_eq!(r.result(), &ack());
    let done = client.wait_for_status(&task_id, "completed", PATIENCE).await;
    assert_eq!(done["result"]["resultType"], "complete");
    assert_eq!(done["result"]["isError"], false);
    assert_eq!(done["result"]["structuredContent"]["size"], "large");
    assert_eq!(done["result"]["_meta"], ack()["_meta"]);

    // An update to a finished task is ignored, and a size outside the enum is refused.
    assert_eq!(client.update_task(&task_id, json!({"approve_outline": {"action": "decline"}})).await.result(), &ack());
    assert_eq!(client.get_task(&task_id).await.result()["status"], "completed");
    let r = client.call("tools/call", json!({"name": "generate_report", "arguments": {"size": "huge"}})).await;
    assert_eq!((r.status, r.error_code()), (200, Some(-32602)));
    assert!(r.body["error"]["message"].as_str().unwrap().starts_with("invalid arguments: /size"), "{}", r.text);
    let r = client.call("tools/call", json!({"name": "generate_report", "arguments": "large"})).await;
    assert_eq!(r.body["error"]["message"], "arguments must be an object");
    let r = client.call("tools/call", json!({"name": "no_such_tool"})).await;
    assert_eq!(r.body["error"]["message"], "unknown tool");

    // Cancel is acknowledged and idempotent.
    let other = client.create_task("generate_report", json!({})).await;
    for _ in 0..2 {
        assert_eq!(client.cancel_task(&other).await.result(), &ack());
    }
    assert_eq!(client.wait_for_status(&other, "cancelled", PATIENCE).await["status"], "cancelled");

    // tasks/update needs an inputResponses object.
    let r = client.call("tasks/update", json!({"taskId": other, "inputResponses": []})).await;
    assert_eq!(r.body["error"]["message"], "inputResponses must be an object");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_foreign_and_malformed_ids_look_the_same() {
    let stack = Stack::builder().workers(0).spawn().await;
    let client = stack.client(0);
    // A task that belongs to someone else, written straight into the store.
    let owner = Owner { tenant: "acme".into(), principal: "alice".into() };
    let id = taskgate_tests::write_task(&stack.store(), &owner).await;
    let unknown = TaskId::generate(16);
    let cases = [id.as_str(), unknown.as_str(), "tsk_not-an-id", ""];
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let mut texts = Vec::new();
        for task_id in cases {
            let body = json!({"jsonrpc": "2.0", "id": 7, "method": method,
                              "params": {"taskId": task_id, "inputResponses": {}, "_meta": meta()}});
            let headers = taskgate_tests::standard_headers(&body);
            let r = client.send(&headers, body.to_string().into_bytes()).await;
            assert_eq!(r.status, 200, "{method} {task_id}");
            texts.push(r.text);
        }
        assert!(texts.iter().all(|t| *t == texts[0]), "{method}: {texts:?}");
        assert!(texts[0].contains("\"message\":\"task not found\""), "{}", texts[0]);
    }
    // The foreign task was not touched.
    assert_eq!(record_field(&stack, id.as_str(), "status").await.as_deref(), Some("working"));
    assert_eq!(record_field(&stack, id.as_str(), "cancel").await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_outstanding_keys_with_a_partial_update() {
    let stack = Stack::builder().spawn().await;
    let client = stack.client(0);
    let task_id = client.create_task("dual_approval", json!({"change": "raise limits"})).await;
    let parked = client.wait_for_status(&task_id, "input_required", PATIENCE).await;
    let keys: Vec<&String> = parked["inputRequests"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["finance_approval", "legal_approval"]);

    let accept = json!({"action": "accept", "content": {"approved": true}});
    assert_eq!(client.update_task(&task_id, json!({"legal_approval": accept})).await.result(), &ack());
    let partial = client.get_task(&task_id).await;
    assert_eq!(partial.result()["status"], "input_required");
    let keys: Vec<&String> = partial.result()["inputRequests"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["finance_approval"]);

    // An answered key is not answered again; an unknown one is ignored.
    let decline = json!({"action": "decline"});
    let r = client.update_task(&task_id, json!({"legal_approval": decline, "bogus": decline})).await;
    assert_eq!(r.result(), &ack());
    assert_eq!(client.get_task(&task_id).await.result()["status"], "input_required");

    client.update_task(&task_id, json!({"finance_approval": accept})).await;
    let done = client.wait_for_status(&task_id, "completed", PATIENCE).await;
    assert_eq!(done["result"]["structuredContent"], json!({"change": "raise limits", "legal": true, "finance": true}));
    // Both keys were issued once and are recorded for the task's lifetime.
    let id = TaskId::parse(&task_id).unwrap();
    let mut conn = stack.redis.connection().await;
    let mut issued: Vec<String> =
        redis::cmd("SMEMBERS").arg(stack.store().keys().task(&id).issued).query_async(&mut conn).await.unwrap();
    issued.sort();
    assert_eq!(issued, ["finance_approval", "legal_approval"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_task_is_finished_by_another_exactly_once() {
    let mut stack = Stack::builder().workers(2).worker_args(&["--lease-ms", "1000"]).spawn().await;
    let client = stack.client(0);
    let task_id = client.create_task("sleep", json!({"ms": 1500})).await;
    let holder = holder_index(&stack, &task_id).await;
    let first = taskgate_tests::record_fence(&stack.store(), &task_id).await;
    assert!(first > 0, "claimed");
    stack.workers[holder].kill().await;

    let done = client.wait_for_status(&task_id, "completed", PATIENCE).await;
    let token = taskgate_tests::result_token(&done);
    assert!(token > first, "the second claim finished it: {token} after {first}");
    assert_eq!(record_field(&stack, &task_id, "reclaims").await.as_deref(), Some("1"));

    // The dead worker's lease cannot write any more: the script refuses the stale token.
    let id = TaskId::parse(&task_id).unwrap();
    let dead = record_field(&stack, &task_id, "holder").await;
    assert_eq!(dead, None, "a finished task has no holder");
    let version = record_field(&stack, &task_id, "ver").await;
    let stale = Lease { task_id: &id, worker: "w-stale", fence: first, outbox: None };
    let written = stack.store().finish(stale, Finish::Completed { result: "{}", message: None }).await.unwrap();
    assert!(!written);
    assert_eq!(record_field(&stack, &task_id, "ver").await, version);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_worker_that_lost_its_lease_cannot_overwrite_the_result() {
    let stack = Stack::builder().workers(2).worker_args(&["--lease-ms", "1000"]).spawn().await;
    let client = stack.client(0);
    let task_id = client.create_task("sleep", json!({"ms": 1200})).await;
    let holder = holder_index(&stack, &task_id).await;
    let first = taskgate_tests::record_fence(&stack.store(), &task_id).await;
    stack.workers[holder].signal("STOP");

    let done = client.wait_for_status(&task_id, "completed", PATIENCE).await;
    let token = taskgate_tests::result_token(&done);
    assert!(token > first, "another claim finished it: {token} after {first}");
    let version = record_field(&stack, &task_id, "ver").await;

    // Resumed, the stale worker notices; whatever it tries is refused.
    stack.workers[holder].signal("CONT");
    eventually(PATIENCE, "the stale worker to give up", || async {
        let log = stack.workers[holder].log();
        // Depending on which it notices first: its lease's validity ran out while it was
        // paused (it stops, writing nothing), or its write is refused.
        let gave_up = ["lease lost", "write refused by fencing", "lease no longer known to be valid"];
        gave_up.iter().any(|m| log.contains(m)).then_some(())
    })
    .await;
    let after = client.get_task(&task_id).await;
    assert_eq!(taskgate_tests::result_token(after.result()), token, "the result stands");
    assert_eq!(record_field(&stack, &task_id, "ver").await, version);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_in_every_state() {
    let mut stack = Stack::builder().workers(0).spawn().await;
    let client = stack.client(0);
    // Publish the catalogue, then stop the worker so a new task stays queued.
    let w = stack.add_worker(&[]).await;
    stack.workers[w].kill().await;

    let queued = client.create_task("sleep", json!({"ms": 60_000})).await;
    assert_eq!(client.cancel_task(&queued).await.result(), &ack());
    let cancelled = client.get_task(&queued).await;
    assert_eq!(cancelled.result()["status"], "cancelled", "a queued task ends at once");

    stack.add_worker(&[]).await;
    let parked = client.create_task("generate_report", json!({})).await;
    client.wait_for_status(&parked, "input_required", PATIENCE).await;
    assert_eq!(client.cancel_task(&parked).await.result(), &ack());
    let r = client.get_task(&parked).await;
    assert_eq!(r.result()["status"], "cancelled", "a parked task ends at once");
    assert!(r.result().get("inputRequests").is_none());
    // Answers after the cancel change nothing.
    client.update_task(&parked, json!({"approve_outline": {"action": "accept", "content": {"approved": true}}})).await;
    assert_eq!(client.get_task(&parked).await.result()["status"], "cancelled");

    let running = client.create_task("sleep", json!({"ms": 60_000})).await;
    holder_index(&stack, &running).await;
    assert_eq!(client.cancel_task(&running).await.result(), &ack());
    // Signalled over pub/sub: far sooner than a lease renewal (10 s) would notice.
    let r = client.wait_for_status(&running, "cancelled", Duration::from_secs(3)).await;
    assert_eq!(r["statusMessage"], "Sleep was cancelled.");

    // The queued task's stale queue entry was skipped by the worker.
    assert_eq!(client.get_task(&queued).await.result()["status"], "cancelled");

    let finished = client.create_task("sleep", json!({"ms": 0})).await;
    let done = client.wait_for_status(&finished, "completed", PATIENCE).await;
    assert_eq!(client.cancel_task(&finished).await.result(), &ack());
    assert_eq!(client.get_task(&finished).await.result(), &{
        let mut same = done.clone();
        same["_meta"] = ack()["_meta"].clone();
        same
    });

    let declined = client.create_task("generate_report", json!({})).await;
    client.wait_for_status(&declined, "input_required", PATIENCE).await;
    client.update_task(&declined, json!({"approve_outline": {"action": "decline"}})).await;
    let r = client.wait_for_status(&declined, "cancelled", PATIENCE).await;
    assert_eq!(r["statusMessage"], "User did not approve the outline.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_map_to_task_states() {
    let stack = Stack::builder().spawn().await;
    let client = stack.client(0);

    let tool_error = client.create_task("faulty", json!({"mode": "tool_error"})).await;
    let r = client.wait_for_status(&tool_error, "completed", PATIENCE).await;
    assert_eq!(r["result"]["isError"], true);

    let rpc_error = client.create_task("faulty", json!({"mode": "rpc_error"})).await;
    let r = client.wait_for_status(&rpc_error, "failed", PATIENCE).await;
    assert_eq!(r["error"], json!({"code": -32602, "message": "the job could not run", "data": {"reason": "demo"}}));
    assert!(r.get("result").is_none());
    assert_eq!(r["statusMessage"], "the job could not run");

    let panicked = client.create_task("faulty", json!({"mode": "panic"})).await;
    let r = client.wait_for_status(&panicked, "failed", PATIENCE).await;
    assert_eq!(r["error"]["code"], -32603);

    // The worker survived the panic.
    let after = client.create_task("sleep", json!({"ms": 0})).await;
    client.wait_for_status(&after, "completed", PATIENCE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_expire_after_their_ttl() {
    let stack = Stack::builder().worker_args(&["--tool-ttl-ms", "sleep=1500"]).spawn().await;
    let client = stack.client(0);
    let created = client.call("tools/call", json!({"name": "sleep", "arguments": {"ms": 0}})).await;
    assert_eq!(created.result()["ttlMs"], 1500);
    let task_id = created.result()["taskId"].as_str().unwrap().to_owned();
    client.wait_for_status(&task_id, "completed", PATIENCE).await;

    let id = TaskId::parse(&task_id).unwrap();
    let mut conn = stack.redis.connection().await;
    let pttl: i64 = redis::cmd("PTTL").arg(stack.store().keys().task(&id).record).query_async(&mut conn).await.unwrap();
    assert!((1..=1500).contains(&pttl), "expiry is createdAt + ttlMs: {pttl}");

    let gone = eventually(PATIENCE, "the task to expire", || async {
        let r = client.get_task(&task_id).await;
        (r.error_code() == Some(-32602)).then_some(r)
    })
    .await;
    let unknown = client.get_task(TaskId::generate(16).as_str()).await;
    assert_eq!(gone.error(), unknown.error(), "an expired task answers like an unknown one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_create_survives_the_gateway_dying() {
    let mut stack = Stack::builder().gateways(2).spawn().await;
    let task_id = stack.client(0).create_task("sleep", json!({"ms": 100})).await;
    stack.gateways[0].kill().await;
    let b = stack.client(1);
    let r = b.get_task(&task_id).await;
    assert_eq!(r.result()["taskId"], task_id.as_str(), "{}", r.text);
    b.wait_for_status(&task_id, "completed", PATIENCE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_worker_hands_its_tasks_back_at_once() {
    // A 30 s lease: only an explicit release can move the task within this test's patience.
    let mut stack = Stack::builder().workers(1).worker_args(&["--drain-grace-ms", "200"]).spawn().await;
    let client = stack.client(0);
    let task_id = client.create_task("sleep", json!({"ms": 2_000})).await;
    let first = holder_index(&stack, &task_id).await;
    let first_fence = taskgate_tests::record_fence(&stack.store(), &task_id).await;
    let second = stack.add_worker(&[]).await;
    stack.workers[first].signal("TERM");
    assert_eq!(stack.workers[first].wait_exit(PATIENCE).await, Some(0));

    let claimed_by = holder_index(&stack, &task_id).await;
    assert_eq!(claimed_by, second);
    let done = client.wait_for_status(&task_id, "completed", PATIENCE).await;
    assert!(taskgate_tests::result_token(&done) > first_fence, "the second claim finished it: {done}");
    assert_eq!(record_field(&stack, &task_id, "reclaims").await, None, "a release is not a reclaim");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_worker_lets_short_tools_finish() {
    let mut stack = Stack::builder().spawn().await;
    let client = stack.client(0);
    let task_id = client.create_task("sleep", json!({"ms": 700})).await;
    holder_index(&stack, &task_id).await;
    let fence = taskgate_tests::record_fence(&stack.store(), &task_id).await;
    stack.workers[0].signal("TERM");
    assert_eq!(stack.workers[0].wait_exit(PATIENCE).await, Some(0));
    let r = client.get_task(&task_id).await;
    assert_eq!(r.result()["status"], "completed");
    assert_eq!(taskgate_tests::result_token(r.result()), fence, "finished by the claim it had");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durability_replicas_that_do_not_acknowledge_refuse_the_create() {
    // No replica exists, so WAIT 1 can never be satisfied: the client must get -32603 and no
    // handle.
    let stack =
        Stack::builder().gateway_args(&["--durability-replicas", "1", "--durability-timeout-ms", "100"]).spawn().await;
    let client: McpClient = stack.client(0);
    let r = client.call("tools/call", json!({"name": "sleep", "arguments": {"ms": 0}})).await;
    assert_eq!(r.error_code(), Some(-32603), "{}", r.text);
    assert!(r.body.get("result").is_none());
    assert_eq!(r.body["error"]["message"], "the task could not be made durable; it was not created");
    let _: Value = r.body;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_loses_too_many_workers_fails() {
    let mut stack = Stack::builder().worker_args(&["--lease-ms", "500", "--max-reclaims", "0"]).spawn().await;
    let client = stack.client(0);
    let task_id = client.create_task("sleep", json!({"ms": 30_000})).await;
    holder_index(&stack, &task_id).await;
    stack.workers[0].kill().await;
    stack.add_worker(&[]).await;
    let failed = client.wait_for_status(&task_id, "failed", PATIENCE).await;
    assert_eq!(failed["error"]["code"], -32603);
    assert_eq!(failed["error"]["message"], "the task was abandoned: its worker lease expired more than 0 times");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_worker_drains_every_shard_without_waiting_for_a_lease() {
    // Reads over 16 shards can deliver more than 2 free slots; the surplus must wait for slots,
    // not for the stale-delivery takeover (one 30 s lease).
    let stack = Stack::builder().worker_args(&["--concurrency", "2"]).spawn().await;
    let client = stack.client(0);
    let mut ids = Vec::new();
    for _ in 0..40 {
        ids.push(client.create_task("sleep", json!({"ms": 0})).await);
    }
    for id in &ids {
        client.wait_for_status(id, "completed", Duration::from_secs(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_never_asks_for_input_its_creator_did_not_declare() {
    let stack = Stack::builder().spawn().await;
    let client = stack.client(0);
    // The Tasks extension, but no elicitation capability.
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    });
    let r = client.call("tools/call", json!({"name": "generate_report", "arguments": {}, "_meta": meta})).await;
    let task_id = r.result()["taskId"].as_str().expect("a task").to_owned();
    let failed = client.wait_for_status(&task_id, "failed", PATIENCE).await;
    assert_eq!(
        failed["error"],
        json!({"code": -32021, "message": "missing required client capability",
               "data": {"requiredCapabilities": {"elicitation": {"form": {}}}}})
    );
    assert!(failed.get("inputRequests").is_none());
}
