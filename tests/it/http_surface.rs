//! The Streamable HTTP surface and the wire core, over real HTTP to the real gateway.

use std::time::Duration;

use serde_json::{Value, json};
use taskgate_tests::{McpClient, Stack, meta, meta_without_tasks, standard_headers};

fn with_header(mut headers: Vec<(String, String)>, name: &str, value: Option<&str>) -> Vec<(String, String)> {
    headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
    if let Some(value) = value {
        headers.push((name.to_owned(), value.to_owned()));
    }
    headers
}

async fn send_with(client: &McpClient, body: &Value, name: &str, value: Option<&str>) -> taskgate_tests::Reply {
    let headers = with_header(standard_headers(body), name, value);
    client.send(&headers, body.to_string().into_bytes()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discover_returns_versions_capabilities_and_cache_hints() {
    let stack = Stack::builder().workers(0).spawn().await;
    let reply = stack.client(0).call("server/discover", json!({})).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(
        reply.body,
        json!({"jsonrpc": "2.0", "id": 1, "result": {
            "resultType": "complete",
            "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}},
            // Nothing is published yet: not to be cached.
            "ttlMs": 0,
            "cacheScope": "public",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "taskgate", "version": env!("CARGO_PKG_VERSION")}}
        }})
    );
    // No session is ever minted.
    assert!(reply.header("mcp-session-id").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_post_mcp_is_served() {
    let stack = Stack::builder().workers(0).spawn().await;
    let client = stack.client(0);
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let r = client.http().request(method.clone(), client.url()).send().await.unwrap();
        assert_eq!(r.status(), 405, "{method}");
        assert_eq!(r.headers().get("allow").and_then(|v| v.to_str().ok()), Some("POST"), "{method}");
    }
    for path in ["/", "/mcp/x", "/sse", "/messages"] {
        let r = client.http().post(format!("{}{path}", client.base())).body("{}").send().await.unwrap();
        assert_eq!(r.status(), 404, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_type_and_accept_are_negotiated() {
    let stack = Stack::builder().workers(0).spawn().await;
    let client = stack.client(0);
    let body = client.envelope("server/discover", json!({}));
    for content_type in [None, Some("text/plain"), Some("application/jsonx")] {
        let r = send_with(&client, &body, "Content-Type", content_type).await;
        assert_eq!(r.status, 415, "{content_type:?}");
    }
    let r = send_with(&client, &body, "Content-Type", Some("Application/JSON; charset=utf-8")).await;
    assert_eq!(r.status, 200);
    for accept in [None, Some("application/json"), Some("text/event-stream"), Some("*/*")] {
        let r = send_with(&client, &body, "Accept", accept).await;
        assert_eq!(r.status, 406, "{accept:?}");
    }
    let r = send_with(&client, &body, "Accept", Some("text/event-stream;q=0.9, application/json")).await;
    assert_eq!(r.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_are_bounded() {
    let stack = Stack::builder().workers(0).spawn().await;
    let client = stack.client(0);
    let mut body = client.envelope("server/discover", json!({}));
    body["params"]["padding"] = Value::String("x".repeat(1024 * 1024));
    let r = client.send(&standard_headers(&body), body.to_string().into_bytes()).await;
    assert_eq!(r.status, 413);
    assert_eq!(r.error_code(), Some(-32700));
    assert_eq!(r.body["error"]["data"]["detail"], "request body exceeds the 1048576-byte limit");
    assert_eq!(r.body["id"], Value::Null);

    // The limit is configurable, and a chunked body (no Content-Length) is bounded too.
    let mut stack = stack;
    let i = stack.add_gateway(&["--max-body-bytes", "2048"]).await;
    let small = stack.client(i);
    let mut body = small.envelope("server/discover", json!({}));
    body["params"]["padding"] = Value::String("x".repeat(1500));
    assert_eq!(small.send(&standard_headers(&body), body.to_string().into_bytes()).await.status, 200);
    body["params"]["padding"] = Value::String("x".repeat(3000));
    let bytes = body.to_string().into_bytes();
    let stream =
        futures::stream::iter(bytes.chunks(512).map(|c| Ok::<_, std::io::Error>(c.to_vec())).collect::<Vec<_>>());
    let mut request = small.http().post(small.url()).body(reqwest::Body::wrap_stream(stream));
    for (name, value) in standard_headers(&body) {
        request = request.header(name, value);
    }
    let r = request.send().await.unwrap();
    assert_eq!(r.status(), 413);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framing_errors_are_json_rpc_errors() {
    let stack = Stack::builder().workers(0).spawn().await;
    let client = stack.client(0);
    let body = client.envelope("server/discover", json!({}));
    let headers = standard_headers(&body);

    let r = client.send(&headers, b"{not json".to_vec()).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32700)));
    assert_eq!(r.body["error"]["message"], "Parse error");

    let r = client.send(&headers, format!("[{body}]").into_bytes()).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32600)));

    let r = client.send(&headers, br#"{"jsonrpc":"1.0","id":9,"method":"server/discover"}"#.to_vec()).await;
    assert_eq!((r.status, r.error_code(), r.body["id"].clone()), (400, Some(-32600), json!(9)));

    let bad_params = json!({"jsonrpc": "2.0", "id": 3, "method": "server/discover", "params": [1]});
    let r = client.send(&headers, bad_params.to_string().into_bytes()).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32602)));
    assert_eq!(r.body["error"]["message"], "params must be an object");

    // An "id": null message is a request and is answered with id null.
    let null_id = json!({"jsonrpc": "2.0", "id": null, "method": "server/discover", "params": {"_meta": meta()}});
    let r = client.send(&headers, null_id.to_string().into_bytes()).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["id"], Value::Null);
    assert_eq!(r.result()["resultType"], "complete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_are_accepted_with_202_and_no_body() {
    let stack = Stack::builder().workers(0).spawn().await;
    let client = stack.client(0);
    // Even one that would be an error as a request: notifications never get a JSON-RPC reply.
    let note = json!({"jsonrpc": "2.0", "method": "tasks/get", "params": {"taskId": "missing", "_meta": meta()}});
    let r = client.send(&standard_headers(&note), note.to_string().into_bytes()).await;
    assert_eq!(r.status, 202);
    assert_eq!(r.text, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_and_resumption_headers_are_ignored() {
    let stack = Stack::builder().workers(0).spawn().await;
    let client = stack.client(0);
    let body = client.envelope("server/discover", json!({}));
    let mut headers = standard_headers(&body);
    headers.push(("Mcp-Session-Id".into(), "abc".into()));
    headers.push(("Last-Event-ID".into(), "42".into()));
    let r = client.send(&headers, body.to_string().into_bytes()).await;
    assert_eq!(r.status, 200);
    assert!(r.header("mcp-session-id").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrored_headers_must_match_the_body() {
    let stack = Stack::builder().spawn().await;
    let client = stack.client(0);
    let discover = client.envelope("server/discover", json!({}));
    let call = client.envelope("tools/call", json!({"name": "generate_report", "arguments": {}}));
    let get = client.envelope("tasks/get", json!({"taskId": "tsk_unknown"}));

    let cases: Vec<(&str, &Value, &str, Option<&str>)> = vec![
        ("missing version", &discover, "MCP-Protocol-Version", None),
        ("version mismatch", &discover, "MCP-Protocol-Version", Some("2025-11-25")),
        ("missing method", &discover, "Mcp-Method", None),
        ("method mismatch", &discover, "Mcp-Method", Some("tools/list")),
        ("method case", &discover, "Mcp-Method", Some("Server/Discover")),
        ("missing name on tools/call", &call, "Mcp-Name", None),
        ("name mismatch on tools/call", &call, "Mcp-Name", Some("sleep")),
        ("bad base64", &call, "Mcp-Name", Some("=?base64?not*base64?=")),
        ("name mismatch on tasks/get", &get, "Mcp-Name", Some("tsk_other")),
    ];
    for (what, body, header, value) in cases {
        let r = send_with(&client, body, header, value).await;
        assert_eq!((r.status, r.error_code()), (400, Some(-32020)), "{what}: {}", r.text);
    }

    // Duplicate routing headers.
    let mut headers = standard_headers(&call);
    headers.push(("Mcp-Name".into(), "generate_report".into()));
    let r = client.send(&headers, call.to_string().into_bytes()).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32020)));

    // Base64 sentinel is decoded before comparing; surrounding whitespace is trimmed.
    let encoded = format!("=?base64?{}?=", base64_of("generate_report"));
    let r = send_with(&client, &call, "Mcp-Name", Some(&encoded)).await;
    assert_eq!(r.result()["resultType"], "task", "{}", r.text);
    let r = send_with(&client, &call, "Mcp-Name", Some("  generate_report ")).await;
    assert_eq!(r.result()["resultType"], "task", "{}", r.text);

    // Mcp-Name is optional on task methods (fastmcp-tasks omits it) but checked when present.
    let r = send_with(&client, &get, "Mcp-Name", None).await;
    assert_eq!((r.status, r.error_code()), (200, Some(-32602)));
    assert_eq!(r.body["error"]["message"], "task not found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_headers_require_mcp_name_on_task_methods() {
    let stack = Stack::builder().workers(0).gateway_args(&["--strict-headers"]).spawn().await;
    let client = stack.client(0);
    let get = client.envelope("tasks/get", json!({"taskId": "tsk_unknown"}));
    let r = send_with(&client, &get, "Mcp-Name", None).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32020)));
    let r = send_with(&client, &get, "Mcp-Name", Some("tsk_unknown")).await;
    assert_eq!((r.status, r.error_code()), (200, Some(-32602)));
}

fn base64_of(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_meta_is_validated() {
    let stack = Stack::builder().workers(0).spawn().await;
    let client = stack.client(0);

    let r = client
        .call(
            "server/discover",
            json!({"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2025-11-25",
        "io.modelcontextprotocol/clientCapabilities": {}}}),
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.error(),
        &json!({"code": -32022, "message": "unsupported protocol version",
                "data": {"supported": ["2026-07-28"], "requested": "2025-11-25"}})
    );

    let cases = [
        (json!({}), "missing request _meta"),
        (json!({"_meta": 5}), "missing request _meta"),
        (json!({"_meta": {"io.modelcontextprotocol/clientCapabilities": {}}}), "missing protocol version"),
        (
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": null,
                          "io.modelcontextprotocol/clientCapabilities": {}}}),
            "missing protocol version",
        ),
        (json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}), "missing client capabilities"),
        (
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                          "io.modelcontextprotocol/clientCapabilities": "all"}}),
            "missing client capabilities",
        ),
        (
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                          "io.modelcontextprotocol/clientCapabilities": {},
                          "io.modelcontextprotocol/clientInfo": {"name": 1, "version": "1"}}}),
            "invalid client info",
        ),
    ];
    for (params, message) in cases {
        // Send with a matching version header where the body has none, so only _meta is wrong.
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": params});
        let headers = with_header(standard_headers(&body), "MCP-Protocol-Version", Some("2026-07-28"));
        let r = client.send(&headers, body.to_string().into_bytes()).await;
        assert_eq!((r.status, r.error_code()), (400, Some(-32602)), "{params}");
        assert_eq!(r.body["error"]["message"], message, "{params}");
    }

    // clientInfo is optional.
    let r = client.call("server/discover", json!({"_meta": meta_without_tasks()})).await;
    assert_eq!(r.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_methods_require_the_extension_on_their_own_request() {
    let stack = Stack::builder().spawn().await;
    let client = stack.client(0);
    let expected = json!({"code": -32021, "message": "missing required client capability",
                          "data": {"requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}});
    let created = client.call("tools/call", json!({"name": "generate_report"})).await;
    let task_id = created.result()["taskId"].as_str().expect("a task").to_owned();
    for (method, params) in [
        ("tools/call", json!({"name": "generate_report", "_meta": meta_without_tasks()})),
        ("tasks/get", json!({"taskId": task_id, "_meta": meta_without_tasks()})),
        ("tasks/update", json!({"taskId": task_id, "inputResponses": {}, "_meta": meta_without_tasks()})),
        ("tasks/cancel", json!({"taskId": task_id, "_meta": meta_without_tasks()})),
    ] {
        let r = client.call(method, params).await;
        assert_eq!(r.status, 400, "{method}");
        assert_eq!(r.error(), &expected, "{method}");
    }
    // discover and tools/list do not need it.
    assert_eq!(client.call("tools/list", json!({"_meta": meta_without_tasks()})).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_and_legacy_methods_are_not_found() {
    let stack = Stack::builder().workers(0).spawn().await;
    let client = stack.client(0);
    for method in [
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "tasks/status",
        "tasks/result",
        "tasks/list",
        "no/such/method",
    ] {
        let r = client.call(method, json!({"taskId": "unused"})).await;
        assert_eq!((r.status, r.error_code()), (404, Some(-32601)), "{method}");
    }
    let r = client.call("initialize", json!({})).await;
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("2026-07-28"), "{message}");
    assert_eq!(r.body["error"]["data"], json!({"supported": ["2026-07-28"]}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_is_deterministic_across_calls_and_replicas() {
    let stack = Stack::builder().gateways(2).spawn().await;
    let (a, b) = (stack.client(0), stack.client(1));
    // Wait until both replicas see the worker's catalogue.
    for client in [&a, &b] {
        taskgate_tests::eventually(Duration::from_secs(10), "the catalogue to be published", || async {
            let r = client.call("tools/list", json!({})).await;
            (r.result()["tools"].as_array().map_or(0, Vec::len) == 6).then_some(())
        })
        .await;
    }
    let body = a.envelope("tools/list", json!({}));
    let headers = standard_headers(&body);
    let first = a.send(&headers, body.to_string().into_bytes()).await;
    let second = a.send(&headers, body.to_string().into_bytes()).await;
    let other = b.send(&headers, body.to_string().into_bytes()).await;
    assert_eq!(first.text, second.text);
    assert_eq!(first.text, other.text);
    let result = first.result();
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["cacheScope"], "public");
    assert_eq!(result["ttlMs"], 60000);
    let names: Vec<&str> = result["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["dual_approval", "faulty", "generate_report", "ledger", "noop", "sleep"]);
    for tool in result["tools"].as_array().unwrap() {
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
    }
    assert_eq!(
        result["tools"][2]["inputSchema"],
        json!({"type":"object","properties":{"size":{"type":"string","enum":["small","medium","large"],"default":"medium"}},"required":[]})
    );
}

async fn send_extra(client: &McpClient, body: &Value, extra: Vec<(&str, &str)>) -> taskgate_tests::Reply {
    let mut headers = standard_headers(body);
    headers.extend(extra.into_iter().map(|(n, v)| (n.to_owned(), v.to_owned())));
    client.send(&headers, body.to_string().into_bytes()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_and_host_are_checked() {
    let mut stack = Stack::builder().workers(0).spawn().await;
    let client = stack.client(0);
    let body = client.envelope("server/discover", json!({}));
    let send = |extra: Vec<(&'static str, &'static str)>| send_extra(&client, &body, extra);
    assert_eq!(send(vec![("Origin", "https://evil.example")]).await.status, 403);
    assert_eq!(send(vec![("Origin", "http://localhost:3000")]).await.status, 200);
    assert_eq!(send(vec![("Host", "evil.example")]).await.status, 403);
    assert_eq!(send(vec![("Host", "attacker.example"), ("Origin", "http://attacker.example")]).await.status, 403);
    let r = send(vec![("Origin", "http://localhost:3000"), ("Origin", "http://localhost:3000")]).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32020)));

    // With an allowlist, only exact matches pass.
    let i = stack
        .add_gateway(&[
            "--allowed-origins",
            "https://app.example",
            "--allowed-hosts",
            "localhost,127.0.0.1,mcp.example",
        ])
        .await;
    let listed = stack.client(i);
    let body = listed.envelope("server/discover", json!({}));
    let send = |extra: Vec<(&'static str, &'static str)>| send_extra(&listed, &body, extra);
    assert_eq!(send(vec![("Origin", "https://app.example")]).await.status, 200);
    assert_eq!(send(vec![("Origin", "https://app.example.evil")]).await.status, 403);
    assert_eq!(send(vec![("Origin", "http://localhost:3000")]).await.status, 403);
    assert_eq!(send(vec![("Host", "mcp.example:443")]).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_follow_redis() {
    let mut stack = Stack::builder().workers(0).spawn().await;
    let base = stack.client(0).base().to_owned();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let status = |path: &'static str| {
        let request = http.get(format!("{base}{path}")).send();
        async move { request.await.map(|r| r.status().as_u16()).unwrap_or(0) }
    };
    assert_eq!(status("/healthz").await, 200);
    assert_eq!(status("/readyz").await, 200);
    stack.redis.kill().await;
    taskgate_tests::eventually(Duration::from_secs(10), "/readyz to turn 503", || async {
        (status("/readyz").await == 503).then_some(())
    })
    .await;
    assert_eq!(status("/healthz").await, 200);
    stack.redis.restart().await;
    taskgate_tests::eventually(Duration::from_secs(15), "/readyz to recover", || async {
        (status("/readyz").await == 200).then_some(())
    })
    .await;
}

/// A gateway that has not yet seen a new worker's tools refreshes its catalogue on the first
/// miss; calls that arrive while that refresh runs wait for it instead of being told the tool
/// is unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_calls_wait_for_the_catalogue_refresh() {
    let mut stack = Stack::builder().workers(0).gateway_args(&["--catalogue-refresh-ms", "600000"]).spawn().await;
    stack.add_worker(&[]).await;
    let client = std::sync::Arc::new(stack.client(0));
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(
                async move { client.call("tools/call", json!({"name": "sleep", "arguments": {"ms": 0}})).await },
            )
        })
        .collect();
    for call in calls {
        let r = call.await.unwrap();
        assert_eq!(r.result()["resultType"], "task", "{}", r.text);
    }
}
