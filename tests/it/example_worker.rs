//! `examples/custom-worker`, the worker built as a library: its own Rust tool beside a
//! configured upstream MCP server, through the real gateway and Redis.

use std::time::Duration;

use serde_json::json;
use taskgate_tests::upstream::{upstreams_file, wait_for_tool};
use taskgate_tests::{Binary, Stack, eventually, meta_without_tasks};

const FIXTURE: &str = env!("CARGO_BIN_EXE_upstream-fixture");
const PATIENCE: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_worker_of_your_own_serves_its_tool_beside_an_upstream() {
    let mut stack = Stack::builder().workers(0).spawn().await;
    let body = format!("[[upstream]]\nname = \"fx\"\ncommand = {FIXTURE:?}\nargs = [\"stdio\"]\n");
    let file = upstreams_file(stack.scratch_dir(), "upstreams.toml", &body);
    let redis_url = stack.redis_url.clone();
    stack
        .add_worker_binary(Binary::ExampleWorker, &redis_url, &["--tools", "", "--upstreams", file.to_str().unwrap()])
        .await;
    let client = stack.client(0);
    wait_for_tool(&client, "count_words", PATIENCE).await;
    wait_for_tool(&client, "fx__echo", PATIENCE).await;

    // Inline, for a client without the Tasks extension (the tool is task-optional).
    let inline =
        json!({ "name": "count_words", "arguments": { "text": "one two three" }, "_meta": meta_without_tasks() });
    let short = client.call("tools/call", inline).await;
    assert_eq!(short.result()["structuredContent"]["words"], 3, "{}", short.text);

    // A long text asks for confirmation: the task parks, the answer resumes it (the replay
    // contract, on whichever worker claims it).
    let long = vec!["word"; 60].join(" ");
    let task = client.create_task("count_words", json!({ "text": long })).await;
    let parked = client.wait_for_status(&task, "input_required", PATIENCE).await;
    assert!(parked["inputRequests"]["confirm_count"]["params"]["message"].as_str().unwrap().contains("60 words"));
    client.update_task(&task, json!({ "confirm_count": { "action": "accept", "content": { "go": true } } })).await;
    let done = eventually(PATIENCE, "the count to complete", || async {
        let task = client.get_task(&task).await.result().clone();
        (task["status"] == "completed").then_some(task)
    })
    .await;
    assert_eq!(done["result"]["structuredContent"]["words"], 60, "{done}");

    let echoed = client.create_task("fx__echo", json!({ "text": "beside it" })).await;
    let echoed = client.wait_for_status(&echoed, "completed", PATIENCE).await;
    assert_eq!(echoed["result"]["content"][0]["text"], "beside it", "{echoed}");
}
