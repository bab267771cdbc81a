//! `_meta["io.modelcontextprotocol/relatedTaskIds"]` on `tools/call`: only the caller's own
//! ids reach the tool (an upstream server sees them in its `tools/call`'s `_meta`), foreign,
//! unknown and expired ones leave no trace in the reply, and a tool that opts in to step reuse
//! starts a new call from the steps of a failed run of the same call.

use std::time::Duration;

use serde_json::{Value, json};
use sha2::Digest as _;
use taskgate_shared::task::TaskId;
use taskgate_tests::upstream::{fixture_log, upstreams_file, wait_for_tool};
use taskgate_tests::{McpClient, Stack, eventually, meta};

use super::upstream::FIXTURE;

const PATIENCE: Duration = Duration::from_secs(30);
const RELATED: &str = "io.modelcontextprotocol/relatedTaskIds";

/// A stack whose gateway knows three callers by API key: alice and bob of tenant acme, carol
/// of tenant globex; its worker runs `worker_args`.
async fn stack_of_three(worker_args: &[&str]) -> (Stack, [McpClient; 3]) {
    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let file = stack.scratch_dir().join("api-keys");
    let hash = |key: &str| sha2::Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect::<String>();
    let keys = format!("{} acme alice\n{} acme bob\n{} globex carol\n", hash("key-a"), hash("key-b"), hash("key-c"));
    std::fs::write(&file, keys).unwrap();
    stack.add_gateway_with_auth(&["--auth", "api-keys", "--api-keys-file", file.to_str().unwrap()]).await;
    stack.add_worker(worker_args).await;
    let clients = [stack.client_as(0, "key-a"), stack.client_as(0, "key-b"), stack.client_as(0, "key-c")];
    (stack, clients)
}

/// `tools/call` of `tool` with these related ids in `_meta` (as given: any JSON).
async fn call_with(client: &McpClient, tool: &str, arguments: Value, related: Value) -> taskgate_tests::Reply {
    let mut meta = meta();
    meta[RELATED] = related;
    client.call("tools/call", json!({"name": tool, "arguments": arguments, "_meta": meta})).await
}

/// The reply's bytes with what differs between any two creates (the request's id, the new
/// task's id and its timestamps) replaced by fixed text.
fn normalized(reply: &taskgate_tests::Reply) -> String {
    let result = reply.result();
    assert_eq!(result["resultType"], "task", "{}", reply.text);
    // The JSON-RPC id is the request's own.
    let mut text = reply.text.replace(&format!("\"id\":{}", reply.body["id"]), "\"id\":\"id\"");
    for field in ["taskId", "createdAt", "lastUpdatedAt"] {
        let value = result[field].as_str().unwrap_or_else(|| panic!("{field} in {}", reply.text));
        text = text.replace(value, field);
    }
    format!("{} {text}", reply.status)
}

/// The related ids the fixture's `echo` saw on the call tagged `tag` (`-`: none).
async fn seen_by_echo(log: &std::path::Path, tag: &str) -> String {
    let prefix = format!("related echo {tag} ");
    eventually(PATIENCE, &format!("the fixture to log the call tagged {tag}"), || async {
        fixture_log(log).lines().find_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_only() {
    let scratch = tempfile::tempdir().unwrap();
    let log = scratch.path().join("fixture.log");
    let table = format!(
        "[[upstream]]\nname = \"fx\"\ncommand = {FIXTURE:?}\nargs = [\"stdio\"]\nenv = {{ FIXTURE_LOG = {:?} }}\n",
        log.to_str().unwrap()
    );
    let file = upstreams_file(scratch.path(), "upstreams.toml", &table);
    let args = ["--tools", "demo", "--upstreams", file.to_str().unwrap(), "--tool-ttl-ms", "noop=1000"];
    let (_stack, [alice, bob, carol]) = stack_of_three(&args).await;
    wait_for_tool(&alice, "fx__echo", PATIENCE).await;

    // Alice's own tasks, one ended and one still running; bob's (same tenant) and carol's
    // (another tenant); an id nobody has; one of alice's that has expired.
    let done = alice.create_task("sleep", json!({"ms": 0})).await;
    let running = alice.create_task("sleep", json!({"ms": 60_000})).await;
    let bobs = bob.create_task("sleep", json!({"ms": 0})).await;
    let carols = carol.create_task("sleep", json!({"ms": 0})).await;
    let unknown = TaskId::generate(16).to_string();
    let expired = alice.create_task("noop", json!({})).await;
    eventually(PATIENCE, "alice's 1 s task to expire", || async {
        (alice.get_task(&expired).await.error()["message"] == "task not found").then_some(())
    })
    .await;

    let mixed = json!([bobs, done, carols, unknown, "not-a-task-id", expired, running, done]);
    let r = call_with(&alice, "fx__echo", json!({"text": "x", "tag": "mixed"}), mixed).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let seen: Value = serde_json::from_str(&seen_by_echo(&log, "mixed").await).unwrap();
    assert_eq!(seen, json!([done, running]), "only alice's own, in the order sent, once each");

    // Whichever foreign, unknown or expired ids are sent (or none, or alice's own), the reply
    // is the same bytes, and none of them reaches the tool.
    let cases = [
        ("none", Value::Null),
        ("empty", json!([])),
        ("colleague", json!([bobs])),
        ("tenant", json!([carols])),
        ("unknown", json!([unknown])),
        ("expired", json!([expired])),
        ("owned", json!([done])),
    ];
    let mut replies = Vec::new();
    for (tag, related) in &cases {
        let arguments = json!({"text": "x", "tag": "same"});
        let r = if related.is_null() {
            alice.call("tools/call", json!({"name": "fx__echo", "arguments": arguments})).await
        } else {
            call_with(&alice, "fx__echo", arguments, related.clone()).await
        };
        replies.push((*tag, normalized(&r)));
        let ran = alice.wait_for_status(r.result()["taskId"].as_str().unwrap(), "completed", PATIENCE).await;
        assert_eq!(ran["result"]["content"][0]["text"], "x", "{ran}");
    }
    for (tag, reply) in &replies[1..] {
        assert_eq!(reply, &replies[0].1, "the reply for {tag} differs from the one for none");
    }
    let seen: Vec<String> =
        fixture_log(&log).lines().filter_map(|l| l.strip_prefix("related echo same ").map(str::to_owned)).collect();
    assert_eq!(seen.len(), cases.len(), "{seen:?}");
    let owned = serde_json::to_string(&json!([done])).unwrap();
    assert_eq!(seen.iter().filter(|s| **s == owned).count(), 1, "{seen:?}");
    assert_eq!(seen.iter().filter(|s| *s == "-").count(), cases.len() - 1, "{seen:?}");

    // 20 of alice's own: the first 16 are used, and that is no error.
    let mut many = Vec::new();
    for _ in 0..20 {
        many.push(alice.create_task("sleep", json!({"ms": 0})).await);
    }
    let r = call_with(&alice, "fx__echo", json!({"text": "x", "tag": "many"}), json!(many)).await;
    assert_eq!(r.result()["resultType"], "task", "{}", r.text);
    let seen: Value = serde_json::from_str(&seen_by_echo(&log, "many").await).unwrap();
    assert_eq!(seen, json!(many[..16]));

    // Not an array of strings: a `_meta` error.
    for bad in [json!("a"), json!({"id": done}), json!([done, 7]), Value::Null] {
        let r = call_with(&alice, "fx__echo", json!({"text": "x"}), bad.clone()).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text);
        assert_eq!(r.error_code(), Some(-32602), "{bad}: {}", r.text);
        assert_eq!(
            r.error()["message"],
            "io.modelcontextprotocol/relatedTaskIds must be an array of task id strings",
            "{bad}"
        );
    }
}

/// The ledger's step numbers written for `task_id` (one line per step actually run).
fn ledger_steps(dir: &std::path::Path, task_id: &str) -> Vec<u64> {
    std::fs::read_to_string(dir.join(task_id))
        .unwrap_or_default()
        .lines()
        .map(|line| line.split_once(' ').expect("a ledger line").1.parse().expect("a step"))
        .collect()
}

/// The ledger's arguments in these tests: five durable steps, asking to continue after two.
fn ledger_call() -> Value {
    json!({"steps": 5, "checkpoint": true, "askAfter": 2})
}

/// Runs the ledger for `client` until it asks to continue, and declines: cancelled, with steps
/// 0 and 1 recorded. Returns the task id.
async fn stopped_after_two(client: &McpClient, dir: &std::path::Path) -> String {
    let task = client.create_task("ledger", ledger_call()).await;
    client.wait_for_status(&task, "input_required", PATIENCE).await;
    assert_eq!(ledger_steps(dir, &task), [0, 1]);
    client.update_task(&task, json!({"continue": {"action": "decline"}})).await;
    client.wait_for_status(&task, "cancelled", PATIENCE).await;
    task
}

/// A ledger call naming `related`, run to where it asks to continue: the steps it ran by then.
async fn steps_before_the_question(
    client: &McpClient,
    dir: &std::path::Path,
    arguments: Value,
    related: &str,
) -> Vec<u64> {
    let r = call_with(client, "ledger", arguments, json!([related])).await;
    let task = r.result()["taskId"].as_str().unwrap_or_else(|| panic!("a task: {}", r.text)).to_owned();
    client.wait_for_status(&task, "input_required", PATIENCE).await;
    let ran = ledger_steps(dir, &task);
    client.cancel_task(&task).await;
    ran
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_of_the_same_call_is_continued_by_a_tool_that_opts_in() {
    let ledger = tempfile::tempdir().unwrap();
    let dir = ledger.path();
    let args = ["--ledger-dir", dir.to_str().unwrap(), "--reuse-steps", "ledger"];
    let (_stack, [alice, bob, _]) = stack_of_three(&args).await;

    let first = stopped_after_two(&alice, dir).await;
    let r = call_with(&alice, "ledger", ledger_call(), json!([first])).await;
    let second = r.result()["taskId"].as_str().expect("a task").to_owned();
    alice.wait_for_status(&second, "input_required", PATIENCE).await;
    assert!(ledger_steps(dir, &second).is_empty(), "steps 0 and 1 came from the first run's record");
    alice.update_task(&second, json!({"continue": {"action": "accept", "content": {"go": true}}})).await;
    let done = alice.wait_for_status(&second, "completed", PATIENCE).await;
    assert_eq!(done["result"]["structuredContent"]["steps"], 5, "{done}");
    assert_eq!(ledger_steps(dir, &second), [2, 3, 4], "only the steps still missing ran");
    assert_eq!(ledger_steps(dir, &first), [0, 1], "the first run's record is unchanged");

    // Other arguments: another call, whose steps start afresh.
    let other = json!({"steps": 6, "checkpoint": true, "askAfter": 2});
    assert_eq!(steps_before_the_question(&alice, dir, other, &first).await, [0, 1]);
    // Bob's stopped ledger, same tenant, same arguments: never alice's to reuse.
    let bobs = stopped_after_two(&bob, dir).await;
    assert_eq!(steps_before_the_question(&alice, dir, ledger_call(), &bobs).await, [0, 1]);
    // And bob may reuse his own.
    assert!(steps_before_the_question(&bob, dir, ledger_call(), &bobs).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_did_not_opt_in_runs_every_step() {
    let ledger = tempfile::tempdir().unwrap();
    let dir = ledger.path();
    let (_stack, [alice, _, _]) = stack_of_three(&["--ledger-dir", dir.to_str().unwrap()]).await;
    let first = stopped_after_two(&alice, dir).await;
    assert_eq!(steps_before_the_question(&alice, dir, ledger_call(), &first).await, [0, 1]);
}
