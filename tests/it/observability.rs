//! Observability: Prometheus metrics of the gateway and the worker after a full
//! lifecycle, one trace from the client's request to the worker's execution over OTLP, request
//! fields on log lines, and dashboards and alerts that name only metrics that exist.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use sha2::Digest as _;
use taskgate_tests::{McpClient, Scrape, Stack, eventually, free_port, standard_headers};

const PATIENCE: Duration = Duration::from_secs(20);

pub(crate) fn api_keys_file(dir: &std::path::Path) -> std::path::PathBuf {
    let file = dir.join("api-keys");
    let hash = |key: &str| sha2::Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect::<String>();
    std::fs::write(&file, format!("{} acme alice\n", hash("secret-key-alice"))).unwrap();
    file
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_after_a_full_lifecycle() {
    let mut stack = Stack::builder()
        .gateways(0)
        .workers(0)
        .gateway_option("--poll-tolerance", "0.5")
        .gateway_args(&["--poll-limit", "refuse"])
        .spawn()
        .await;
    let keys = api_keys_file(stack.scratch_dir());
    stack.add_gateway_with_auth(&["--auth", "api-keys", "--api-keys-file", keys.to_str().unwrap()]).await;
    let metrics_port = free_port();
    stack.add_worker(&["--metrics-listen", &format!("127.0.0.1:{metrics_port}"), "--lease-ms", "1500"]).await;
    let gateway_metrics = format!("{}/metrics", stack.gateways[0].url.as_deref().unwrap());
    let worker_base = format!("http://127.0.0.1:{metrics_port}");
    let client = stack.client_as(0, "secret-key-alice");

    // Input, then completion.
    let report = client.create_task("generate_report", json!({})).await;
    client.wait_for_status(&report, "input_required", PATIENCE).await;
    let (listen, mut stream) =
        client.open_stream("subscriptions/listen", json!({"notifications": {"taskIds": [&report]}})).await;
    assert_eq!(stream.status, 200);
    let open = Scrape::of(&gateway_metrics).await;
    assert_eq!(open.present("taskgate_gateway_sse_streams", &[]), 1.0);
    let r = client
        .update_task(&report, json!({"approve_outline": {"action": "accept", "content": {"approved": true}}}))
        .await;
    assert_eq!(r.result()["resultType"], "complete");
    loop {
        let message = stream.next_message(PATIENCE).await.expect("the stream runs to its end");
        if message.get("id") == Some(&listen["id"]) {
            break;
        }
    }
    drop(stream);
    // A poll faster than the task's interval is refused (-31429, limit "poll").
    client.get_task(&report).await;
    let r = client.get_task(&report).await;
    assert_eq!(r.error_code(), Some(-31429), "{}", r.text);
    client.wait_for_status(&report, "completed", PATIENCE).await;

    // A parked task cancelled by the client (at the gateway) and a running one (at the worker).
    let parked = client.create_task("generate_report", json!({})).await;
    client.wait_for_status(&parked, "input_required", PATIENCE).await;
    client.cancel_task(&parked).await;
    let running = client.create_task("sleep", json!({"ms": 60_000})).await;
    // Held long enough for the 1.5 s lease to be renewed.
    eventually(PATIENCE, "a lease renewal", || async {
        let worker = Scrape::of(&format!("{worker_base}/metrics")).await;
        (worker.get("taskgate_worker_leases_renewed_total", &[]) >= 1.0).then_some(())
    })
    .await;
    client.cancel_task(&running).await;
    client.wait_for_status(&running, "cancelled", PATIENCE).await;

    // An unauthenticated request.
    let stranger = stack.client_as(0, "not-a-key");
    assert_eq!(stranger.call("server/discover", json!({})).await.status, 401);

    let g = Scrape::of(&gateway_metrics).await;
    let w = eventually(PATIENCE, "the worker to record every outcome", || async {
        let w = Scrape::of(&format!("{worker_base}/metrics")).await;
        (w.get("taskgate_task_transitions_total", &[("from", "working"), ("to", "cancelled")]) == 1.0).then_some(w)
    })
    .await;

    // Requests by method and outcome, with their latency.
    let calls = [("tools/call", "ok", 3.0), ("tasks/update", "ok", 1.0), ("tasks/cancel", "ok", 2.0)];
    for (method, outcome, n) in calls {
        assert_eq!(
            g.get("taskgate_gateway_requests_total", &[("method", method), ("outcome", outcome)]),
            n,
            "{method}"
        );
        let count = [("method", method), ("outcome", outcome)];
        assert_eq!(g.get("taskgate_gateway_request_duration_seconds_count", &count), n, "{method}");
    }
    // Polls refused for coming too fast: the test's own, and any of wait_for_status's.
    let too_fast = g.get("taskgate_gateway_rate_limited_total", &[("limit", "poll")]);
    assert!(too_fast >= 1.0);
    let refused = [("method", "tasks/get"), ("outcome", "client_error")];
    assert_eq!(g.get("taskgate_gateway_requests_total", &refused), too_fast);
    let unauthenticated = [("method", "server/discover"), ("outcome", "client_error")];
    assert_eq!(g.get("taskgate_gateway_requests_total", &unauthenticated), 1.0);
    assert_eq!(g.present("taskgate_gateway_http_responses_total", &[("status_class", "5xx")]), 0.0);
    assert_eq!(g.get("taskgate_gateway_http_responses_total", &[("status_class", "4xx")]), 1.0 + too_fast, "401, 429s");
    let requests = g.sum("taskgate_gateway_requests_total", &[]);
    let responses = g.sum("taskgate_gateway_http_responses_total", &[]);
    assert_eq!(requests, responses, "every /mcp response is counted once");

    // Tasks and transitions: the gateway's and the worker's share.
    assert_eq!(g.get("taskgate_tasks_created_total", &[("tool", "generate_report")]), 2.0);
    assert_eq!(g.get("taskgate_tasks_created_total", &[("tool", "sleep")]), 1.0);
    let transition =
        |s: &Scrape, from: &str, to: &str| s.get("taskgate_task_transitions_total", &[("from", from), ("to", to)]);
    assert_eq!(transition(&g, "none", "working"), 3.0);
    assert_eq!(transition(&g, "input_required", "working"), 1.0);
    assert_eq!(transition(&g, "input_required", "cancelled"), 1.0);
    assert_eq!(transition(&w, "working", "input_required"), 2.0);
    assert_eq!(transition(&w, "working", "completed"), 1.0);
    assert_eq!(transition(&w, "working", "cancelled"), 1.0);

    // Time in each state: queued (4 claims: 3 tasks, one resumed), working (4 exits),
    // input_required (1 resume, 1 cancel while parked).
    let in_state = |s: &Scrape, state: &str| s.get("taskgate_task_state_duration_seconds_count", &[("state", state)]);
    assert_eq!(in_state(&w, "queued"), 4.0);
    assert_eq!(in_state(&w, "working"), 4.0);
    assert_eq!(in_state(&g, "input_required"), 2.0);
    assert!(g.get("taskgate_task_state_duration_seconds_sum", &[("state", "input_required")]) > 0.0);

    // Leases and fencing.
    assert_eq!(w.present("taskgate_worker_leases_taken_total", &[]), 4.0);
    assert!(w.present("taskgate_worker_leases_renewed_total", &[]) >= 1.0);
    assert_eq!(w.present("taskgate_worker_leases_expired_total", &[]), 0.0);
    assert_eq!(w.present("taskgate_worker_leases_reclaimed_total", &[]), 0.0);
    assert_eq!(w.present("taskgate_worker_fenced_writes_refused_total", &[]), 0.0);

    // Tool run time by tool and outcome.
    let runs = |tool: &str, outcome: &str| {
        w.get("taskgate_worker_tool_duration_seconds_count", &[("tool", tool), ("outcome", outcome)])
    };
    assert_eq!(runs("generate_report", "input_required"), 2.0);
    assert_eq!(runs("generate_report", "completed"), 1.0);
    assert_eq!(runs("sleep", "cancelled"), 1.0);

    // Backlog and capacity, read when scraped.
    assert_eq!(w.present("taskgate_queue_depth", &[("pool", "default")]), 0.0);
    assert_eq!(w.present("taskgate_queue_oldest_age_seconds", &[("pool", "default")]), 0.0);
    assert_eq!(w.present("taskgate_worker_slots", &[]), 16.0);
    assert_eq!(w.present("taskgate_worker_slots_busy", &[]), 0.0);
    assert_eq!(w.present("taskgate_worker_ready", &[]), 1.0);
    assert_eq!(g.present("taskgate_gateway_ready", &[]), 1.0);

    // SSE: the stream closed, its notifications measured.
    assert_eq!(g.present("taskgate_gateway_sse_streams", &[]), 0.0);
    // After the answer the task changes at least twice (working, completed). A stream that
    // re-reads the task after both changes sends one notification and counts the other as
    // coalesced, so only the sum is certain.
    let lagged = g.present("taskgate_gateway_sse_notification_lag_seconds_count", &[]);
    let coalesced = g.present("taskgate_gateway_sse_coalesced_snapshots_total", &[]);
    assert!(lagged >= 1.0 && lagged + coalesced >= 2.0, "{lagged} sent, {coalesced} coalesced");

    // Redis, auth and limits.
    assert_eq!(g.get("taskgate_redis_command_duration_seconds_count", &[("command", "script:create_task")]), 3.0);
    assert_eq!(w.get("taskgate_redis_command_duration_seconds_count", &[("command", "script:claim_batch")]), 4.0);
    assert_eq!(g.sum("taskgate_redis_errors_total", &[]) + w.sum("taskgate_redis_errors_total", &[]), 0.0);
    assert_eq!(g.get("taskgate_gateway_auth_failures_total", &[("reason", "unknown API key")]), 1.0);

    // The worker's probes.
    let http = reqwest::Client::new();
    assert_eq!(http.get(format!("{worker_base}/healthz")).send().await.unwrap().status(), 200);
    assert_eq!(http.get(format!("{worker_base}/readyz")).send().await.unwrap().status(), 200);

    // Logs: request-scoped fields, never a credential.
    let gateway_log = stack.gateways[0].log();
    let refusal =
        gateway_log.lines().find(|l| l.contains("request refused by authentication")).expect("the refusal is logged");
    let refusal: Value = serde_json::from_str(refusal).unwrap();
    assert_eq!(refusal["span"]["method"], "server/discover", "{refusal}");
    assert!(refusal["span"]["request_id"].as_str().is_some_and(|id| id.starts_with("req_")), "{refusal}");
    for secret in ["secret-key-alice", "not-a-key"] {
        assert!(!gateway_log.contains(secret), "a credential reached the log");
    }
    let worker_log = stack.workers[0].log();
    let written = worker_log.lines().find(|l| l.contains("outcome written")).expect("an outcome is logged");
    let written: Value = serde_json::from_str(written).unwrap();
    assert!(written["span"]["task_id"].as_str().is_some_and(|id| id.starts_with("tsk_")), "{written}");
    assert!(written["span"]["tool"].is_string(), "{written}");

    // Every metric the dashboard and the alert rules query exists.
    let exported: BTreeSet<String> = g.families.union(&w.families).cloned().collect();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    for file in ["deploy/observability/grafana-dashboard.json", "deploy/observability/alerts.yml"] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        if file.ends_with(".json") {
            let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is valid JSON");
            assert!(dashboard["panels"].as_array().is_some_and(|p| !p.is_empty()));
        }
        let named = metric_names(&text);
        assert!(named.len() >= 10, "{file} names {named:?}");
        let missing: Vec<_> = named.iter().filter(|n| !exported.contains(*n)).collect();
        assert!(missing.is_empty(), "{file} queries metrics that do not exist: {missing:?}");
    }
}

/// `taskgate_*` metric names in a text, histogram suffixes folded into their family.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("taskgate_") {
        let start = i + at;
        let end = start
            + bytes[start..].iter().take_while(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || **b == b'_').count();
        let preceded = start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let name = &text[start..end];
        if !preceded && name.len() > "taskgate_".len() {
            let family = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name);
            names.insert(family.to_owned());
        }
        i = end.max(start + 1);
    }
    names
}

/// OTLP/HTTP JSON receiver: every exported span, with its service name.
#[derive(Clone, Default)]
struct Receiver(Arc<Mutex<Vec<(String, Value)>>>);

impl Receiver {
    async fn start(self) -> u16 {
        let port = free_port();
        let spans = self.0.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let spans = spans.clone();
                async move {
                    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let mut spans = spans.lock().unwrap();
                    for resource in request["resourceSpans"].as_array().into_iter().flatten() {
                        let service = resource["resource"]["attributes"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .find(|a| a["key"] == "service.name")
                            .and_then(|a| a["value"]["stringValue"].as_str())
                            .unwrap_or_default()
                            .to_owned();
                        for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                            for span in scope["spans"].as_array().into_iter().flatten() {
                                spans.push((service.clone(), span.clone()));
                            }
                        }
                    }
                    axum::Json(json!({}))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        port
    }

    /// How many spans named `name` have no parent.
    fn roots(&self, name: &str) -> usize {
        let spans = self.0.lock().unwrap();
        spans
            .iter()
            .filter(|(_, s)| s["name"] == name && s["parentSpanId"].as_str().unwrap_or_default().is_empty())
            .count()
    }

    /// The spans of one trace, as (service, span).
    fn trace(&self, trace_id: &str) -> Vec<(String, Value)> {
        self.0.lock().unwrap().iter().filter(|(_, s)| s["traceId"].as_str() == Some(trace_id)).cloned().collect()
    }
}

/// Sends `tools/call` with a trace context, in the header or in `_meta`.
async fn traced_call(client: &McpClient, traceparent: &str, in_meta: bool) -> String {
    let mut body = client.envelope("tools/call", json!({"name": "sleep", "arguments": {"ms": 0}}));
    let mut headers = standard_headers(&body);
    if in_meta {
        body["params"]["_meta"]["traceparent"] = json!(traceparent);
    } else {
        headers.push(("traceparent".to_owned(), traceparent.to_owned()));
    }
    let r = client.send(&headers, serde_json::to_vec(&body).unwrap()).await;
    assert_eq!(r.result()["resultType"], "task", "{}", r.text);
    r.result()["taskId"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_from_the_request_to_the_worker() {
    let receiver = Receiver::default();
    let port = receiver.clone().start().await;
    let stack = Stack::builder()
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &format!("http://127.0.0.1:{port}"))
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .spawn()
        .await;
    let client = stack.client(0);

    for (trace_id, in_meta) in [("4bf92f3577b34da6a3ce929d0e0e4736", false), ("0af7651916cd43dd8448eb211c80319c", true)]
    {
        let traceparent = format!("00-{trace_id}-00f067aa0ba902b7-01");
        let task_id = traced_call(&client, &traceparent, in_meta).await;
        client.wait_for_status(&task_id, "completed", PATIENCE).await;
        let (request, execution) = eventually(PATIENCE, "both spans exported in one trace", || async {
            let spans = receiver.trace(trace_id);
            let request = spans.iter().find(|(svc, s)| svc == "taskgate-gateway" && s["name"] == "tools/call")?;
            let execution = spans.iter().find(|(svc, s)| svc == "taskgate-worker" && s["name"] == "task.execute")?;
            Some((request.1.clone(), execution.1.clone()))
        })
        .await;
        assert_eq!(request["parentSpanId"], "00f067aa0ba902b7", "the request span continues the client's trace");
        assert_eq!(execution["parentSpanId"], request["spanId"], "the execution is a child of the request");
        let spans = receiver.trace(trace_id);
        let script = spans
            .iter()
            .find(|(_, s)| s["name"] == "script:create_task")
            .expect("the Redis call has a span of its own");
        assert_eq!(script.1["parentSpanId"], request["spanId"]);
        // The end is written in a batch with whatever other ends gathered (here none): the
        // task's `task.finish` span, and under it the batch's script call.
        let finish = spans
            .iter()
            .find(|(svc, s)| svc == "taskgate-worker" && s["name"] == "task.finish")
            .expect("the task's end has a span in its trace");
        assert!(
            spans.iter().any(|(svc, s)| svc == "taskgate-worker"
                && s["name"] == "script:finish_batch"
                && s["parentSpanId"] == finish.1["spanId"]),
            "the worker's Redis calls join the trace"
        );
    }

    // A malformed traceparent is ignored: the request starts a trace of its own, as a root.
    let roots_before = receiver.roots("tools/call");
    let task_id = traced_call(&client, "00-zz-not-a-trace", false).await;
    client.wait_for_status(&task_id, "completed", PATIENCE).await;
    eventually(PATIENCE, "a root span for the request", || async {
        (receiver.roots("tools/call") > roots_before).then_some(())
    })
    .await;
}
