//! Prompts, resources, resource templates and completion, served from what workers publish and
//! made on a worker: through the real gateway and a worker with the `conformance` pack's
//! providers.

use std::time::Duration;

use serde_json::json;
use taskgate_tests::{Stack, eventually, meta_without_tasks};

const PATIENCE: Duration = Duration::from_secs(30);

async fn conformance_stack() -> Stack {
    Stack::builder().worker_args(&["--tools", "conformance"]).spawn().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_are_advertised_only_while_something_is_served() {
    // The demo pack offers tools only: nothing else is advertised, and the methods are absent.
    let mut stack = Stack::builder().spawn().await;
    let client = stack.client(0);
    let caps = client.call("server/discover", json!({})).await.result()["capabilities"].clone();
    assert_eq!(caps, json!({"tools": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}));
    for method in ["prompts/list", "resources/list", "resources/templates/list", "completion/complete"] {
        let reply = client.call(method, json!({})).await;
        assert_eq!((reply.status, reply.error_code()), (404, Some(-32601)), "{method}: {}", reply.text);
    }
    let reply = client.call("prompts/get", json!({"name": "test_simple_prompt"})).await;
    assert_eq!((reply.status, reply.error_code()), (404, Some(-32601)), "{}", reply.text);

    // A worker with providers joins: the same gateway advertises and serves them.
    stack.add_worker(&["--tools", "conformance"]).await;
    let caps = eventually(PATIENCE, "prompts to be advertised", || async {
        let caps = client.call("server/discover", json!({})).await.result()["capabilities"].clone();
        caps.get("prompts").is_some().then_some(caps)
    })
    .await;
    assert_eq!(caps["resources"], json!({}));
    assert_eq!(caps["completions"], json!({}));
    let listed = client.call("prompts/list", json!({})).await;
    assert_eq!(listed.status, 200, "{}", listed.text);
}

/// A gateway that starts before its workers (every pod of a fresh rollout does) and re-reads its
/// catalogue only every ten minutes: as soon as a worker has published prompts and resources,
/// `server/discover` declares what `prompts/list` serves, and asks caches not to keep it while
/// the catalogue is empty or has just changed. A discovery's refresh does not take the one a
/// `tools/call` right after it needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_agrees_with_the_methods_on_a_gateway_that_started_first() {
    let mut stack =
        Stack::builder().workers(0).gateways(2).gateway_args(&["--catalogue-refresh-ms", "600000"]).spawn().await;
    let (first, second) = (stack.client(0), stack.client(1));

    // Nothing published: tools only, not to be cached.
    let discovered = first.call("server/discover", json!({})).await.result().clone();
    assert_eq!(discovered["capabilities"], json!({"tools": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}));
    assert_eq!(discovered["ttlMs"], 0, "{discovered}");
    // A worker with tools only: the call right after that discovery finds its tool.
    stack.add_worker(&[]).await;
    let called = first.call("tools/call", json!({"name": "sleep", "arguments": {"ms": 0}})).await;
    assert_eq!(called.result()["resultType"], "task", "{}", called.text);

    // The second gateway has read the tools-only catalogue (as a list does)...
    let tools = second.call("tools/list", json!({})).await;
    assert_eq!(tools.status, 200, "{}", tools.text);
    // ... when a worker with prompts and resources joins: discovery declares them at once.
    stack.add_worker(&["--tools", "conformance"]).await;
    let discovered = second.call("server/discover", json!({})).await.result().clone();
    let prompts = second.call("prompts/list", json!({})).await;
    assert_eq!(prompts.status, 200, "{}", prompts.text);
    assert!(!prompts.result()["prompts"].as_array().unwrap().is_empty(), "{}", prompts.text);
    let caps = &discovered["capabilities"];
    assert_eq!(
        (&caps["prompts"], &caps["resources"], &caps["completions"]),
        (&json!({}), &json!({}), &json!({})),
        "prompts/list serves prompts, so discovery declares them: {discovered}"
    );
    // The catalogue has just changed: a cache keeps this answer for less than a second.
    assert_eq!(discovered["ttlMs"], 0, "{discovered}");
    let resources = second.call("resources/list", json!({})).await;
    assert_eq!(resources.status, 200, "{}", resources.text);
}

/// A worker without providers that claims a prompt's hidden task hands it back to one with
/// them, as it does with a tool it does not serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_without_providers_hands_a_hidden_task_back() {
    let mut stack = Stack::builder().workers(0).spawn().await;
    stack.add_worker(&["--tools", "conformance"]).await;
    let plain = stack.add_worker(&[]).await;
    // The worker with providers dies (its catalogue entries live on until they expire): only
    // the plain one is left to claim.
    stack.workers[0].kill().await;
    let asking = {
        let client = stack.client(0);
        tokio::spawn(async move { client.call("prompts/get", json!({"name": "test_simple_prompt"})).await })
    };
    eventually(PATIENCE, "the plain worker to hand the task back", || async {
        stack.workers[plain].log().contains("releasing it for another worker").then_some(())
    })
    .await;
    stack.add_worker(&["--tools", "conformance"]).await;
    let got = tokio::time::timeout(PATIENCE, asking).await.expect("the prompt is made").unwrap();
    assert_eq!(got.result()["messages"][0]["content"]["text"], "This is a simple prompt for testing.", "{}", got.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_are_cacheable_and_paginated_by_opaque_cursors() {
    let stack = conformance_stack().await;
    let client = stack.client(0);
    let prompts = client.call("prompts/list", json!({})).await;
    let listed = prompts.result();
    let names: Vec<&str> = listed["prompts"].as_array().unwrap().iter().filter_map(|p| p["name"].as_str()).collect();
    assert!(names.contains(&"test_simple_prompt") && names.contains(&"test_prompt_with_arguments"), "{names:?}");
    assert!(listed["prompts"].as_array().unwrap().iter().all(|p| p["description"].is_string()));
    assert_eq!((listed["ttlMs"].clone(), listed["cacheScope"].clone()), (json!(60_000), json!("public")));
    assert!(listed.get("nextCursor").is_none(), "one page: {listed}");

    let resources = client.call("resources/list", json!({})).await;
    let uris: Vec<&str> =
        resources.result()["resources"].as_array().unwrap().iter().filter_map(|r| r["uri"].as_str()).collect();
    assert!(uris.contains(&"test://static-text") && uris.contains(&"test://static-binary"), "{uris:?}");
    assert!(!uris.iter().any(|u| u.contains('{')), "templates are not resources: {uris:?}");
    let templates = client.call("resources/templates/list", json!({})).await;
    assert_eq!(templates.result()["resourceTemplates"][0]["uriTemplate"], "test://template/{id}/data");
    assert_eq!(templates.result()["cacheScope"], "public");

    for cursor in [json!("not-ours"), json!(3)] {
        let reply = client.call("prompts/list", json!({"cursor": cursor})).await;
        assert_eq!(reply.error_code(), Some(-32602), "{}", reply.text);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_are_made_on_a_worker_and_may_ask_first() {
    let stack = conformance_stack().await;
    let client = stack.client(0);
    let got = client
        .call(
            "prompts/get",
            json!({"name": "test_prompt_with_arguments", "arguments": {"arg1": "hello", "arg2": "world"}}),
        )
        .await;
    assert_eq!(got.result()["resultType"], "complete", "{}", got.text);
    assert_eq!(got.result()["messages"][0]["content"]["text"], "Prompt with arguments: arg1='hello', arg2='world'");
    let image = client.call("prompts/get", json!({"name": "test_prompt_with_image"})).await;
    assert_eq!(image.result()["messages"][0]["content"]["type"], "image", "{}", image.text);

    let unknown = client.call("prompts/get", json!({"name": "no_such_prompt"})).await;
    assert_eq!((unknown.status, unknown.error_code()), (200, Some(-32602)), "{}", unknown.text);
    let bad = client.call("prompts/get", json!({"name": "test_simple_prompt", "arguments": {"n": 1}})).await;
    assert_eq!(bad.error_code(), Some(-32602), "{}", bad.text);

    // Round 1 asks; round 2 carries the answer and the signed state back.
    let params = json!({"name": "test_input_required_result_prompt"});
    let asked = client.call("prompts/get", params.clone()).await;
    let asked = asked.result().clone();
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    assert_eq!(asked["inputRequests"]["user_context"]["method"], "elicitation/create");
    let mut retry = params.clone();
    retry["requestState"] = asked["requestState"].clone();
    retry["inputResponses"] = json!({"user_context": {"action": "accept", "content": {"context": "Alice"}}});
    let answered = client.call("prompts/get", retry.clone()).await;
    assert_eq!(answered.result()["messages"][0]["content"]["text"], "Prompt with context: Alice", "{}", answered.text);

    // The state is bound to its method: replayed on another, it is refused.
    let state = asked["requestState"].clone();
    let answers = retry["inputResponses"].clone();
    let on_read = json!({"uri": "test://static-text", "requestState": state, "inputResponses": answers});
    let refused = client.call("resources/read", on_read).await;
    assert_eq!(refused.error_code(), Some(-32602), "{}", refused.text);
    assert!(refused.text.contains("requestState"), "{}", refused.text);
    let on_call =
        json!({"name": "test_simple_text", "arguments": {}, "requestState": state, "inputResponses": answers});
    let refused = client.call("tools/call", on_call).await;
    assert_eq!(refused.error_code(), Some(-32602), "{}", refused.text);

    // A client that cannot answer is not asked.
    let without = json!({"name": "test_input_required_result_prompt", "_meta": meta_without_tasks()});
    let refused = client.call("prompts/get", without).await;
    assert_eq!(refused.error_code(), Some(-32021), "{}", refused.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_are_read_on_a_worker_and_an_unknown_one_gets_one_answer() {
    let stack = conformance_stack().await;
    let client = stack.client(0);
    let text = client.call("resources/read", json!({"uri": "test://static-text"})).await;
    let read = text.result();
    assert_eq!(read["contents"][0]["text"], "This is the content of the static text resource.", "{}", text.text);
    assert_eq!((read["ttlMs"].clone(), read["cacheScope"].clone()), (json!(0), json!("private")));
    let binary = client.call("resources/read", json!({"uri": "test://static-binary"})).await;
    assert!(binary.result()["contents"][0]["blob"].as_str().is_some_and(|b| !b.is_empty()), "{}", binary.text);
    let templated = client.call("resources/read", json!({"uri": "test://template/123/data"})).await;
    assert_eq!(
        templated.result()["contents"][0]["text"],
        "{\"id\":\"123\",\"templateTest\":true,\"data\":\"Data for ID: 123\"}",
        "{}",
        templated.text
    );

    for uri in ["test://nonexistent", "test://template/1/2/data"] {
        let missing = client.call("resources/read", json!({"uri": uri})).await;
        let error = missing.error().clone();
        assert_eq!(error, json!({"code": -32602, "message": "Resource not found", "data": {"uri": uri}}), "{uri}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_suggests_values_for_a_prompt_argument() {
    let stack = conformance_stack().await;
    let client = stack.client(0);
    let params = json!({"ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"}, "argument": {"name": "arg1", "value": "par"}});
    let done = client.call("completion/complete", params).await;
    assert_eq!(done.result()["completion"]["values"], json!(["paris", "park", "party"]), "{}", done.text);
    let unknown = json!({"ref": {"type": "ref/prompt", "name": "nope"}, "argument": {"name": "a", "value": ""}});
    assert_eq!(client.call("completion/complete", unknown).await.error_code(), Some(-32602));
    let template = json!({"ref": {"type": "ref/resource", "uri": "test://template/{id}/data"}, "argument": {"name": "id", "value": "1"}});
    let done = client.call("completion/complete", template).await;
    assert_eq!(done.result()["completion"]["values"], json!([]), "{}", done.text);
}
