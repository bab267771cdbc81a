//! The request pipeline and the connection defences, over real sockets to the real gateway:
//! panics, load shedding, request timeouts, header-read timeouts, the connection limit and the
//! HTTP/2 stream limit.

use std::time::{Duration, Instant};

use serde_json::json;
use taskgate_tests::{McpClient, Scrape, Stack, eventually, meta_without_tasks, standard_headers};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PATIENCE: Duration = Duration::from_secs(20);

/// `host:port` of a client's gateway.
pub(crate) fn authority(client: &McpClient) -> String {
    client.base().trim_start_matches("http://").trim_end_matches('/').to_owned()
}

/// Reads until the peer closes (`Ok` with what it sent) or `patience` passes (`Err`).
pub(crate) async fn read_until_closed(stream: &mut TcpStream, patience: Duration) -> Result<String, String> {
    let mut received = Vec::new();
    let deadline = tokio::time::Instant::now() + patience;
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Ok(String::from_utf8_lossy(&received).into_owned()),
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
            Err(_) => return Err(String::from_utf8_lossy(&received).into_owned()),
        }
    }
}

/// An inline `tools/call` of the conformance pack's `slow_compute` (no Tasks extension: the call
/// waits for the tool).
async fn inline_sleep(client: &McpClient, ms: u64) -> taskgate_tests::Reply {
    let arguments = json!({"seconds": ms as f64 / 1000.0});
    client
        .call("tools/call", json!({"name": "slow_compute", "arguments": arguments, "_meta": meta_without_tasks()}))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_is_answered_and_the_gateway_keeps_serving() {
    let stack = Stack::builder().workers(0).gateway_args(&["--test-routes"]).spawn().await;
    let client = stack.client(0);
    let response = client
        .http()
        .post(format!("{}/test/panic", client.base().trim_end_matches('/')))
        .header("X-Request-Id", "panic-1")
        .header("Mcp-Method", "tools/call")
        .send()
        .await
        .expect("an answer, not a dropped connection");
    assert_eq!(response.status(), 500);
    assert_eq!(response.headers()["x-request-id"], "panic-1");
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body, json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32603, "message": "internal error"}}));
    assert_eq!(client.call("server/discover", json!({})).await.status, 200);
    let scrape = Scrape::of(&format!("{}/metrics", client.base().trim_end_matches('/'))).await;
    assert_eq!(scrape.get("taskgate_gateway_requests_shed_total", &[("reason", "panic")]), 1.0);
    // Counted by the request metrics like any answer, under the method its header announced.
    let failed = [("method", "tools/call"), ("outcome", "server_error")];
    assert_eq!(scrape.get("taskgate_gateway_requests_total", &failed), 1.0);
    assert_eq!(scrape.get("taskgate_gateway_http_responses_total", &[("status_class", "5xx")]), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_in_flight_requests_are_shed_with_503_and_retry_after() {
    let stack =
        Stack::builder().worker_args(&["--tools", "conformance"]).gateway_args(&["--max-in-flight", "1"]).spawn().await;
    let client = stack.client(0);
    let start_busy = || {
        let client = stack.client(0);
        tokio::spawn(async move { inline_sleep(&client, 3_000).await })
    };
    // While an inline call holds the only slot, another request is shed at once. (The inline
    // call itself may be the one shed, if a probe got the slot first: then it starts again.)
    let mut busy = start_busy();
    let deadline = Instant::now() + PATIENCE;
    let shed = loop {
        assert!(Instant::now() < deadline, "no request was shed");
        if busy.is_finished() {
            let reply = busy.await.unwrap();
            assert_eq!(reply.status, 503, "the inline call ended unshed: {}", reply.text);
            busy = start_busy();
        }
        let reply = client.call("server/discover", json!({})).await;
        if reply.status == 503 {
            break reply;
        }
        assert_eq!(reply.status, 200);
    };
    assert_eq!(shed.header("retry-after"), Some("1"));
    assert_eq!(shed.error_code(), Some(-32603));
    assert_eq!(shed.body["error"]["message"], "the gateway is overloaded; retry shortly");
    // A shed request is counted once like any other, under its announced method.
    let scrape = Scrape::of(&format!("{}/metrics", client.base().trim_end_matches('/'))).await;
    let shed_count = scrape.get("taskgate_gateway_requests_shed_total", &[("reason", "overloaded")]);
    let server_errors = scrape.sum("taskgate_gateway_requests_total", &[("outcome", "server_error")]);
    assert!(shed_count >= 1.0 && server_errors == shed_count, "{shed_count} shed, {server_errors} server errors");
    let discover = [("method", "server/discover"), ("outcome", "server_error")];
    assert!(scrape.get("taskgate_gateway_requests_total", &discover) >= 1.0, "the shed discover, by its method");
    // Probes are outside the bound.
    let health = client.http().get(format!("{}/healthz", client.base().trim_end_matches('/'))).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let done = busy.await.unwrap();
    assert_eq!(done.status, 200, "{}", done.text);
    assert_eq!(client.call("server/discover", json!({})).await.status, 200, "the slot is given back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_its_timeout_is_answered_504() {
    let stack = Stack::builder()
        .worker_args(&["--tools", "conformance"])
        .gateway_args(&["--request-timeout-ms", "300"])
        .spawn()
        .await;
    let client = stack.client(0);
    let started = Instant::now();
    let reply = inline_sleep(&client, 5_000).await;
    assert_eq!(reply.status, 504, "{}", reply.text);
    assert_eq!(reply.error_code(), Some(-32603));
    assert!(started.elapsed() < Duration::from_secs(4), "answered at the timeout, not after the tool");
    assert_eq!(client.call("server/discover", json!({})).await.status, 200);
}

/// `--runtime per-core` with two runtimes, each with its own listener: every connection limit
/// and timeout holds there too, whichever runtime the kernel hands a connection to.
pub(crate) const PER_CORE: [&str; 4] = ["--runtime", "per-core", "--runtime-threads", "2"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_slow_connections_are_closed_within_the_header_timeout() {
    silent_and_slow_connections_are_closed(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_core_silent_and_slow_connections_are_closed_within_the_header_timeout() {
    silent_and_slow_connections_are_closed(&PER_CORE).await;
}

async fn silent_and_slow_connections_are_closed(runtime: &[&str]) {
    let args = [&["--header-read-timeout-ms", "1000", "--idle-timeout-ms", "4000"], runtime].concat();
    let stack = Stack::builder().workers(0).gateway_args(&args).spawn().await;
    let client = stack.client(0);
    let address = authority(&client);
    let mut partial = Vec::new();
    let mut silent = Vec::new();
    for _ in 0..20 {
        let mut stream = TcpStream::connect(&address).await.unwrap();
        stream.write_all(b"POST /mcp HTTP/1.1\r\nHost: localhost\r\n").await.unwrap();
        partial.push(stream);
        silent.push(TcpStream::connect(&address).await.unwrap());
    }
    // A keep-alive connection that finished a request and then went quiet.
    let mut idle = TcpStream::connect(&address).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n").await.unwrap();
    let mut first = [0u8; 12];
    idle.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");

    // Meanwhile a normal client is served.
    assert_eq!(client.call("server/discover", json!({})).await.status, 200);

    let started = Instant::now();
    for stream in partial.iter_mut().chain(silent.iter_mut()) {
        let closed = read_until_closed(stream, Duration::from_secs(10)).await;
        // A partial head is never served.
        assert_eq!(closed.expect("closed by the gateway"), "");
    }
    // The idle connection is not held to the head's timeout: it still stands, with its answer
    // read whole, and is closed once its own idle timeout passes.
    let rest = read_until_closed(&mut idle, Duration::from_millis(200)).await;
    let rest = rest.expect_err("an idle keep-alive connection outlives the header timeout");
    assert!(rest.ends_with("ok"), "{rest}");
    assert!(read_until_closed(&mut idle, Duration::from_secs(10)).await.is_ok(), "closed once idle too long");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_connections_a_connection_is_refused_with_503() {
    refused_past_max_connections(&[], 3).await;
}

/// Two runtimes share out four connections, two each: the kernel may give the third to a full
/// one (refused early), but never is a fifth served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_core_past_max_connections_a_connection_is_refused_with_503() {
    refused_past_max_connections(&PER_CORE, 4).await;
}

async fn refused_past_max_connections(runtime: &[&str], limit: usize) {
    let most = limit.to_string();
    let args = [&["--max-connections", most.as_str()], runtime].concat();
    let stack = Stack::builder().workers(0).gateway_args(&args).spawn().await;
    let client = stack.client(0);
    let address = authority(&client);
    // Open connections up to the limit (reqwest's own pool may hold one of them: count by
    // refusal).
    let mut held = Vec::new();
    let refused = loop {
        let mut stream = TcpStream::connect(&address).await.unwrap();
        stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n").await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut buf)).await.expect("an answer").unwrap();
        let head = String::from_utf8_lossy(&buf[..n]).into_owned();
        if head.starts_with("HTTP/1.1 503") {
            break head;
        }
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        held.push(stream);
        assert!(held.len() <= limit, "a connection past the limit was served");
    };
    assert!(refused.to_ascii_lowercase().contains("retry-after: 1"), "{refused}");
    assert!(refused.to_ascii_lowercase().contains("connection: close"), "{refused}");
    assert!(refused.contains("\"code\":-32603"), "{refused}");
    // Freeing a slot lets the next connection in.
    held.clear();
    eventually(PATIENCE, "a connection is served again", || async {
        let mut stream = TcpStream::connect(&address).await.ok()?;
        stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n").await.ok()?;
        let mut buf = vec![0u8; 256];
        let n = stream.read(&mut buf).await.ok()?;
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200").then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_connections_announce_the_stream_limit() {
    let stack = Stack::builder().workers(0).gateway_args(&["--http2-max-streams", "2"]).spawn().await;
    let client = stack.client(0);
    let tcp = TcpStream::connect(authority(&client)).await.unwrap();
    let (mut sender, connection) = h2::client::handshake(tcp).await.expect("an HTTP/2 handshake (prior knowledge)");
    let driver = tokio::spawn(connection);
    // The server's SETTINGS arrive with the first exchange.
    let request = axum::http::Request::get(format!("http://{}/healthz", authority(&client))).body(()).unwrap();
    sender = sender.ready().await.unwrap();
    let (response, _) = sender.send_request(request, true).unwrap();
    assert_eq!(response.await.unwrap().status(), 200);
    assert_eq!(sender.current_max_send_streams(), 2);
    driver.abort();
}

/// One HTTP/1.1 POST of `body` to `/mcp` on an open socket; returns the response head and body.
async fn post_on(stream: &mut TcpStream, body: &serde_json::Value) -> String {
    let bytes = body.to_string();
    let mut request = String::from("POST /mcp HTTP/1.1\r\nHost: localhost\r\n");
    for (name, value) in taskgate_tests::standard_headers(body) {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{bytes}", bytes.len()));
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    // The answers here are small JSON with a Content-Length: read until the body is whole.
    loop {
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut buf)).await.expect("an answer").unwrap();
        assert!(n > 0, "closed before answering: {}", String::from_utf8_lossy(&received));
        received.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&received).into_owned();
        if let Some((head, rest)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length: ").map(str::to_owned))
                .and_then(|l| l.trim().parse::<usize>().ok());
            if length.is_some_and(|len| rest.len() >= len) {
                return text;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_under_way_is_never_idle() {
    let args = ["--idle-timeout-ms", "500", "--header-read-timeout-ms", "500"];
    let stack = Stack::builder().worker_args(&["--tools", "conformance"]).gateway_args(&args).spawn().await;
    let client = stack.client(0);
    let mut stream = TcpStream::connect(authority(&client)).await.unwrap();
    // Two seconds of waiting on one connection (four idle timeouts), then the next request on
    // the same connection at once: the connection was busy, never idle, so it is still open.
    let slow = client.envelope(
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 2}, "_meta": meta_without_tasks()}),
    );
    let first = post_on(&mut stream, &slow).await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert!(first.contains("Computed"), "{first}");
    let second = post_on(&mut stream, &client.envelope("server/discover", json!({}))).await;
    assert!(second.starts_with("HTTP/1.1 200"), "{second}");
}

/// `--http1-max-buffer-bytes 8192`: a head with a 6 KB bearer token is still read whole (an
/// unknown key here: 401, not 431), a 6 KB header beside a valid token is served, and a head
/// past the cap is refused 431.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capped_http1_read_buffer_still_takes_a_6_kb_token() {
    let mut stack = Stack::builder().gateways(0).gateway_args(&["--http1-max-buffer-bytes", "8192"]).spawn().await;
    let keys = super::observability::api_keys_file(stack.scratch_dir());
    stack.add_gateway_with_auth(&["--auth", "api-keys", "--api-keys-file", keys.to_str().unwrap()]).await;
    let stranger = stack.client_as(0, &"k".repeat(6 * 1024));
    let refused = stranger.call("tools/list", json!({})).await;
    assert_eq!((refused.status, refused.error_code()), (401, Some(-31401)), "{}", refused.text);
    let client = stack.client_as(0, "secret-key-alice");
    let body = client.envelope("tools/list", json!({}));
    let padded = |bytes: usize| {
        let mut headers = standard_headers(&body);
        headers.push(("x-padding".to_owned(), "p".repeat(bytes)));
        headers
    };
    let served = client.send(&padded(6 * 1024), body.to_string().into_bytes()).await;
    assert_eq!(served.status, 200, "{}", served.text);
    let too_long = client.send(&padded(10 * 1024), body.to_string().into_bytes()).await;
    assert_eq!(too_long.status, 431, "{}", too_long.text);
}
