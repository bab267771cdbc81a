//! A short task answered in one request (`--complete-within-ms`, a tool's own
//! `complete_within_ms`): a Tasks client's `tools/call` of a tool that ends within the budget
//! gets the tool's result in the one reply, and the task it made stays readable as completed; a
//! tool that runs longer, or asks for input, gets its task handle as with a zero budget, which is
//! the call's answer before this existed. A retry with the same idempotency key answers as the
//! task is by then; a client that goes away while the call waits does not cancel the task.
//!
//! The harness sets the budget to 0 for every other suite; these stacks set it themselves.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use taskgate_tests::{McpClient, Reply, Stack, StackBuilder, standard_headers};

use crate::idempotency::keyed_call;

const PATIENCE: Duration = Duration::from_secs(20);
const TASK_ID_META: &str = "io.taskgate/taskId";

/// A stack whose gateway waits up to `budget_ms` (`None`: its own default).
fn with_budget(budget_ms: Option<u64>) -> StackBuilder {
    match budget_ms {
        Some(ms) => Stack::builder().gateway_option("--complete-within-ms", &ms.to_string()),
        None => Stack::builder().without_gateway_option("--complete-within-ms"),
    }
}

async fn call(client: &McpClient, tool: &str, arguments: Value) -> Reply {
    client.call("tools/call", json!({ "name": tool, "arguments": arguments })).await
}

/// The id of the task a direct answer came from.
fn answered_task(reply: &Reply) -> String {
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.result()["resultType"], "complete", "expected the result: {}", reply.text);
    assert!(reply.result().get("taskId").is_none(), "a result, not a task: {}", reply.text);
    reply.result()["_meta"][TASK_ID_META].as_str().expect("the task's id in _meta").to_owned()
}

fn handle(reply: &Reply) -> String {
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.result()["resultType"], "task", "expected a task: {}", reply.text);
    assert_eq!(reply.result()["status"], "working", "the handle is the task as created: {}", reply.text);
    reply.result()["taskId"].as_str().expect("taskId").to_owned()
}

/// A direct answer is exactly the result `tasks/get` inlines, with the task's id in `_meta`.
fn without_task_id(result: &Value) -> Value {
    let mut result = result.clone();
    result["_meta"].as_object_mut().expect("_meta").remove(TASK_ID_META);
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_tool_answers_its_result_and_its_task_stays_readable_as_completed() {
    // A generous budget, so a loaded machine does not turn the fast call into a task.
    let stack = with_budget(Some(5_000)).spawn().await;
    let client = stack.client(0);
    let reply = call(&client, "sleep", json!({"ms": 10})).await;
    let id = answered_task(&reply);
    assert_eq!(reply.result()["structuredContent"]["sleptMs"], 10, "{}", reply.text);

    let got = client.get_task(&id).await;
    assert_eq!(got.result()["status"], "completed", "{}", got.text);
    assert_eq!(without_task_id(reply.result()), got.result()["result"], "the reply is what tasks/get inlines");

    // A tool error is a result too (the task is `completed` with `isError`).
    let reply = call(&client, "faulty", json!({"mode": "tool_error"})).await;
    let id = answered_task(&reply);
    assert_eq!(reply.result()["isError"], true, "{}", reply.text);
    assert_eq!(client.get_task(&id).await.result()["status"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_fails_in_time_answers_its_error() {
    let stack = with_budget(Some(5_000)).spawn().await;
    let client = stack.client(0);
    let reply = call(&client, "faulty", json!({"mode": "rpc_error"})).await;
    assert_eq!(reply.error_code(), Some(-32602), "{}", reply.text);
    assert_eq!(reply.error()["message"], "the job could not run");
    assert_eq!(reply.error()["data"], json!({"reason": "demo"}), "the error tasks/get would inline");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_tool_answers_with_its_task_once_the_budget_is_spent() {
    let stack = with_budget(Some(300)).spawn().await;
    let client = stack.client(0);
    let started = Instant::now();
    let id = handle(&call(&client, "sleep", json!({"ms": 3_000})).await);
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(300), "the call waited its budget: {waited:?}");
    assert!(waited < Duration::from_millis(2_500), "and no longer: {waited:?}");
    let done = client.wait_for_status(&id, "completed", PATIENCE).await;
    assert_eq!(done["result"]["structuredContent"]["sleptMs"], 3_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_asks_for_input_answers_with_its_task_at_once() {
    let stack = with_budget(Some(10_000)).spawn().await;
    let client = stack.client(0);
    let started = Instant::now();
    let id = handle(&call(&client, "generate_report", json!({"size": "small"})).await);
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(8), "answered when the task parked, not at the budget's end: {waited:?}");
    let parked = client.wait_for_status(&id, "input_required", PATIENCE).await;
    assert!(parked["inputRequests"]["approve_outline"].is_object(), "{parked}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_budget_answers_with_the_task_whatever_the_tool() {
    let stack = with_budget(Some(0)).spawn().await;
    let client = stack.client(0);
    let id = handle(&call(&client, "noop", json!({})).await);
    client.wait_for_status(&id, "completed", PATIENCE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_s_own_budget_overrides_the_fleet_s() {
    // The fleet answers with tasks; noop's own budget answers its result.
    let stack = with_budget(Some(0)).worker_args(&["--tool-complete-within-ms", "noop=5000,sleep=0"]).spawn().await;
    let client = stack.client(0);
    answered_task(&call(&client, "noop", json!({})).await);
    handle(&call(&client, "sleep", json!({"ms": 0})).await);

    // The fleet waits; sleep's own zero answers with its task however fast it is.
    let stack = with_budget(Some(5_000)).worker_args(&["--tool-complete-within-ms", "sleep=0"]).spawn().await;
    let client = stack.client(0);
    handle(&call(&client, "sleep", json!({"ms": 0})).await);
    answered_task(&call(&client, "noop", json!({})).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_with_the_same_key_answers_as_the_task_is_by_then() {
    let stack = with_budget(Some(2_000)).spawn().await;
    let client = stack.client(0);

    // Answered with the result: the retry gets the same result, from the same task.
    let first = keyed_call(&client, "sleep", json!({"ms": 5}), Some("fast-1"), None).await;
    let id = answered_task(&first);
    let again = keyed_call(&client, "sleep", json!({"ms": 5}), Some("fast-1"), None).await;
    assert_eq!(answered_task(&again), id);
    assert_eq!(again.result(), first.result(), "the same answer");

    // Answered with the task: a retry while it runs gets the same task; once it ended, its result.
    let first = keyed_call(&client, "sleep", json!({"ms": 6_000}), Some("slow-1"), None).await;
    let id = handle(&first);
    let again = keyed_call(&client, "sleep", json!({"ms": 6_000}), None, Some("slow-1")).await;
    assert_eq!(handle(&again), id, "the same task, still running");
    let done = client.wait_for_status(&id, "completed", PATIENCE).await;
    let late = keyed_call(&client, "sleep", json!({"ms": 6_000}), Some("slow-1"), None).await;
    assert_eq!(answered_task(&late), id);
    assert_eq!(without_task_id(late.result()), done["result"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_while_the_call_waits_leaves_the_task_running() {
    let stack = with_budget(Some(10_000)).spawn().await;
    let client = stack.client(0);
    // The client gives up after 300 ms of a call that waits up to 10 s for a 1.5 s task.
    let body = client.envelope("tools/call", json!({"name": "sleep", "arguments": {"ms": 1_500}}));
    let mut request = client.http().post(client.url()).body(body.to_string()).timeout(Duration::from_millis(300));
    for (name, value) in standard_headers(&body) {
        request = request.header(name, value);
    }
    request = request.header("Idempotency-Key", "\"gone-1\"");
    let sent = request.send().await;
    assert!(sent.is_err_and(|err| err.is_timeout()), "the client went away before the answer");

    // The key names the task: the retry waits the budget again, within which its 1.5 s run
    // completes (a cancel by the hang-up would have ended it `cancelled` at once).
    let late = keyed_call(&client, "sleep", json!({"ms": 1_500}), Some("gone-1"), None).await;
    let id = answered_task(&late);
    assert_eq!(late.result()["structuredContent"]["sleptMs"], 1_500, "{}", late.text);
    assert_eq!(client.get_task(&id).await.result()["status"], "completed");
}
