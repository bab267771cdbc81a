//! Graceful rollouts. Gateway on SIGTERM: readiness off at once, requests still served
//! for the shutdown delay, in-flight calls finish, listen streams end with their result, exit 0.
//! (The worker's side, drain then release, is in lifecycle.rs.)

use std::time::{Duration, Instant};

use serde_json::json;
use taskgate_tests::{Stack, eventually, meta_without_tasks};

const PATIENCE: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_gateway_drains_before_it_exits() {
    drains_before_it_exits(&[]).await;
}

/// The same with one runtime per core: the stream and the call may be on either; every runtime
/// stops together and the process exits once all have drained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_per_core_gateway_drains_before_it_exits() {
    drains_before_it_exits(&crate::pipeline::PER_CORE).await;
}

async fn drains_before_it_exits(runtime: &[&str]) {
    let mut stack = Stack::builder()
        .gateway_args(&[&["--shutdown-delay-ms", "3000"], runtime].concat())
        .worker_args(&["--tools", "conformance"])
        .spawn()
        .await;
    let client = stack.client(0);
    let base = stack.gateways[0].url.clone().unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();

    // A task to listen to, and an inline call that outlasts the delay, so it is still in flight
    // when the listener closes.
    let task_id = client.create_task("slow_compute", json!({"seconds": 30})).await;
    let (request, mut stream) =
        client.open_stream("subscriptions/listen", json!({"notifications": {"taskIds": [&task_id]}})).await;
    assert_eq!(stream.status, 200);
    let in_flight = {
        let client = stack.client(0);
        tokio::spawn(async move {
            let params = json!({"name": "slow_compute", "arguments": {"seconds": 5}, "_meta": meta_without_tasks()});
            let reply = client.call("tools/call", params).await;
            (reply, Instant::now())
        })
    };
    // In flight once the gateway has written its (hidden) task: the second slow_compute task.
    eventually(PATIENCE, "the inline call to reach the gateway", || async {
        let metrics = http.get(format!("{base}/metrics")).send().await.ok()?.text().await.ok()?;
        metrics.contains("taskgate_tasks_created_total{tool=\"slow_compute\"} 2").then_some(())
    })
    .await;

    let terminated = Instant::now();
    stack.gateways[0].signal("TERM");
    eventually(PATIENCE, "/readyz to report not ready", || async {
        let r = http.get(format!("{base}/readyz")).send().await.ok()?;
        (r.status() == 503).then_some(())
    })
    .await;
    // Still serving while load balancers catch up.
    let r = client.call("tools/list", json!({})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(terminated.elapsed() < Duration::from_millis(3000), "checked within the delay");

    // The listen stream ends with its graceful result once the delay is over.
    loop {
        let message = stream.next_message(PATIENCE).await.expect("the closing result before the end");
        if message.get("id") == Some(&request["id"]) {
            assert_eq!(message["result"]["resultType"], "complete", "{message}");
            break;
        }
    }
    let closed = Instant::now();
    assert!(closed - terminated >= Duration::from_millis(3000), "streams end after the delay");
    let (r, answered) = in_flight.await.unwrap();
    assert_eq!(r.result()["resultType"], "complete", "the in-flight call finished: {}", r.text);
    assert!(answered > closed, "the call was still in flight when the listener closed");
    assert_eq!(stack.gateways[0].wait_exit(PATIENCE).await, Some(0));
    // The task itself is untouched: another replica still serves it.
    stack.add_gateway(&[]).await;
    assert_eq!(stack.client(1).get_task(&task_id).await.result()["status"], "working");
}
