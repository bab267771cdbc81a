//! Inline execution and MRTR: sync and optional tools without the Tasks extension,
//! signed requestState, the capability gate, progress over SSE, and cancellation on
//! disconnect.

use std::time::Duration;

use serde_json::{Value, json};
use taskgate_shared::protocol::sse;
use taskgate_tests::{Stack, eventually, meta_without_tasks, standard_headers};

fn conformance_stack() -> taskgate_tests::StackBuilder {
    Stack::builder().worker_args(&["--tools", "conformance"])
}

fn caps(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execution_follows_the_tool_declaration() {
    let stack = conformance_stack().spawn().await;
    let client = stack.client(0);
    // Sync-only: inline even when the extension is declared.
    let r = client.call("tools/call", json!({"name": "greet", "arguments": {"name": "Ada"}})).await;
    assert_eq!(r.result()["resultType"], "complete", "{}", r.text);
    assert_eq!(r.result()["content"][0]["text"], "Hello, Ada!");
    assert!(r.result().get("taskId").is_none());
    // Task-optional: a task with the extension, inline without it.
    let r = client.call("tools/call", json!({"name": "slow_compute", "arguments": {"seconds": 0}})).await;
    assert_eq!(r.result()["resultType"], "task");
    let r = client
        .call("tools/call", json!({"name": "slow_compute", "arguments": {"seconds": 0}, "_meta": meta_without_tasks()}))
        .await;
    assert_eq!(r.result()["resultType"], "complete", "{}", r.text);
    // Task-required: -32021 without it.
    let r = client.call("tools/call", json!({"name": "failing_job", "_meta": meta_without_tasks()})).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32021)));
    // A JSON-RPC error from an inline tool is the call's error.
    let r = client.call("tools/call", json!({"name": "protocol_error_job", "_meta": meta_without_tasks()})).await;
    assert_eq!((r.status, r.error_code()), (500, Some(-32603)));
    assert_eq!(r.body["error"]["message"], "the job hit a protocol error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mrtr_rounds_are_signed_and_bound() {
    let stack = conformance_stack().spawn().await;
    let client = stack.client(0);
    let tool = "test_input_required_result_multi_round";
    let round1 = client.call("tools/call", json!({"name": tool, "_meta": caps(json!({"elicitation": {}}))})).await;
    let r1 = round1.result();
    assert_eq!(r1["resultType"], "input_required", "{}", round1.text);
    assert!(r1["inputRequests"]["step1"].is_object());
    let state1 = r1["requestState"].as_str().unwrap().to_owned();
    assert!(state1.starts_with("v1."), "{state1}");

    let answer = |v: Value| json!({"action": "accept", "content": v});
    let round2 = client
        .call(
            "tools/call",
            json!({"name": tool, "inputResponses": {"step1": answer(json!({"name": "Alice"}))},
            "requestState": state1, "_meta": caps(json!({"elicitation": {}}))}),
        )
        .await;
    let state2 = round2.result()["requestState"].as_str().unwrap().to_owned();
    assert_ne!(state1, state2);
    assert!(round2.result()["inputRequests"]["step2"].is_object());

    // The state carries round 1's answer: round 3 only sends step2.
    let round3 = client
        .call(
            "tools/call",
            json!({"name": tool, "inputResponses": {"step2": answer(json!({"color": "blue"}))},
            "requestState": state2.clone(), "_meta": caps(json!({"elicitation": {}}))}),
        )
        .await;
    assert_eq!(round3.result()["content"][0]["text"], "Alice likes blue.", "{}", round3.text);

    // Tampering, a different tool or different arguments are refused with the reason.
    let mut tampered = state2.clone();
    tampered.push('x');
    for (params, reason) in [
        (json!({"name": tool, "requestState": tampered}), "requestState integrity check failed"),
        (json!({"name": tool, "requestState": "nonsense"}), "invalid requestState encoding"),
        (
            json!({"name": "test_input_required_result_elicitation", "requestState": state2.clone()}),
            "requestState method mismatch",
        ),
        (
            json!({"name": "confirm_delete", "arguments": {"filename": "x"}, "requestState": state2}),
            "requestState method mismatch",
        ),
    ] {
        let mut params = params;
        params["_meta"] = caps(json!({"elicitation": {}}));
        let r = client.call("tools/call", params).await;
        assert_eq!(r.error_code(), Some(-32602), "{}", r.text);
        assert_eq!(r.body["error"]["message"], reason);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_declared_input_kinds_are_asked() {
    let stack = conformance_stack().spawn().await;
    let client = stack.client(0);
    let r = client.call("tools/call", json!({"name": "test_missing_capability", "_meta": caps(json!({}))})).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.error(),
        &json!({"code": -32021, "message": "missing required client capability", "data": {"requiredCapabilities": {"sampling": {}}}})
    );
    let r = client
        .call(
            "tools/call",
            json!({"name": "test_input_required_result_capabilities", "_meta": caps(json!({"roots": {}}))}),
        )
        .await;
    assert_eq!(r.result()["inputRequests"]["client_roots"]["method"], "roots/list", "{}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_streams_over_sse_only_when_asked_for() {
    let stack = conformance_stack().spawn().await;
    let client = stack.client(0);
    let mut with_token = caps(json!({}));
    with_token["progressToken"] = json!("p-1");
    let body = client.envelope("tools/call", json!({"name": "test_tool_with_progress", "_meta": with_token}));
    let r = client.send(&standard_headers(&body), body.to_string().into_bytes()).await;
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert_eq!(r.header("x-accel-buffering"), Some("no"));
    let messages = sse_messages(&r.text);
    let ids =
        sse::decode(r.text.as_bytes()).into_iter().filter(|i| matches!(i, sse::SseItem::Event(e) if e.id.is_some()));
    assert_eq!(ids.count(), 0, "no SSE ids: nothing is replayed");
    let progress: Vec<f64> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| {
            assert_eq!(m["params"]["progressToken"], "p-1");
            m["params"]["progress"].as_f64().unwrap()
        })
        .collect();
    assert_eq!(progress, [0.0, 50.0, 100.0]);
    let last = messages.last().unwrap();
    assert_eq!(last["id"], body["id"]);
    assert_eq!(last["result"]["content"][0]["text"], "Progress test completed.");

    // Without a progressToken (or logLevel) the same call is plain JSON, and logs stay off.
    let r = client.call("tools/call", json!({"name": "test_tool_with_progress", "_meta": caps(json!({}))})).await;
    assert_eq!(r.header("content-type"), Some("application/json"));
    let r = client.call("tools/call", json!({"name": "test_logging_tool", "_meta": caps(json!({}))})).await;
    assert_eq!(r.header("content-type"), Some("application/json"));
    let mut logging = caps(json!({}));
    logging["io.modelcontextprotocol/logLevel"] = json!("info");
    let r = client.call("tools/call", json!({"name": "test_logging_tool", "_meta": logging})).await;
    assert_eq!(r.text.matches("notifications/message").count(), 3, "{}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_cancels_its_inline_call() {
    let stack = conformance_stack().spawn().await;
    let client = stack.client(0);
    let body = client.envelope(
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 30}, "_meta": meta_without_tasks()}),
    );
    let mut request = client.http().post(client.url()).body(body.to_string()).timeout(Duration::from_millis(700));
    for (name, value) in standard_headers(&body) {
        request = request.header(name, value);
    }
    assert!(request.send().await.is_err(), "the client gives up first");

    // The hidden task behind the call ends cancelled.
    let mut conn = stack.redis.connection().await;
    let pattern = format!("{}:*:task:tsk_*", stack.namespace);
    let status = eventually(Duration::from_secs(10), "the inline call's task to be cancelled", || {
        let mut conn = conn.clone();
        let pattern = pattern.clone();
        async move {
            let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query_async(&mut conn).await.ok()?;
            let record = keys.iter().find(|k| k.matches(':').count() == 3)?.clone();
            let status: Option<String> =
                redis::cmd("HGET").arg(record).arg("status").query_async(&mut conn).await.ok()?;
            status.filter(|s| s == "cancelled")
        }
    })
    .await;
    assert_eq!(status, "cancelled");
    let _ = &mut conn;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_calls_are_bounded_by_a_deadline() {
    let stack = conformance_stack().gateway_args(&["--inline-timeout-ms", "300"]).spawn().await;
    let client = stack.client(0);
    let r = client
        .call(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 20}, "_meta": meta_without_tasks()}),
        )
        .await;
    assert_eq!(r.error_code(), Some(-32603));
    assert_eq!(r.body["error"]["message"], "the tool did not finish within 300 ms");
}

/// A streamed call's end is answered by the same error table as any other, in-band after the
/// 200: the deadline passes after a progress notification went out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_after_the_stream_began_is_its_last_message() {
    let stack = conformance_stack().gateway_args(&["--inline-timeout-ms", "3000"]).spawn().await;
    let client = stack.client(0);
    let mut meta = meta_without_tasks();
    meta["progressToken"] = json!("p-late");
    let body =
        client.envelope("tools/call", json!({"name": "slow_compute", "arguments": {"seconds": 20}, "_meta": meta}));
    let r = client.send(&standard_headers(&body), body.to_string().into_bytes()).await;
    assert_eq!((r.status, r.header("content-type")), (200, Some("text/event-stream")), "{}", r.text);
    let messages = sse_messages(&r.text);
    assert_eq!(messages[0]["method"], "notifications/progress", "{}", r.text);
    assert_eq!(messages[0]["params"]["progressToken"], "p-late");
    let last = messages.last().unwrap();
    assert_eq!(last["id"], body["id"], "{last}");
    assert_eq!(last["error"]["code"], -32603, "{last}");
    assert_eq!(last["error"]["message"], "the tool did not finish within 3000 ms", "{last}");
    assert!(last.get("result").is_none(), "{last}");
}

/// The JSON-RPC messages of a whole SSE body, one per event.
fn sse_messages(text: &str) -> Vec<Value> {
    sse::data_of(text.as_bytes()).iter().map(|d| serde_json::from_str(d).expect("one JSON message per event")).collect()
}
