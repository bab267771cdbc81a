//! Micro-benchmarks of the gateway's hot paths, so that a regression shows without a full
//! stack: request parsing (the checks a request passes before it touches Redis), snapshot
//! encoding (a `tasks/get` response) and SSE event encoding (a `notifications/tasks` message).
//! The encodings are measured beside the `serde_json::Value` tree path they replaced.
//!
//! Run: `cargo bench -p taskgate-gateway --bench hot_path`. Allocations per operation are
//! checked by `tests/allocations.rs`.

use std::hint::black_box;

use axum::http::{HeaderMap, HeaderValue};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use taskgate_gateway::fuzzing;
use taskgate_shared::protocol::{envelope, result};

mod fixtures;
use fixtures::completed;

fn headers(method: &str, name: Option<&str>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    headers.insert("accept", HeaderValue::from_static("application/json, text/event-stream"));
    headers.insert("mcp-protocol-version", HeaderValue::from_static("2026-07-28"));
    headers.insert("mcp-method", HeaderValue::from_str(method).unwrap());
    if let Some(name) = name {
        headers.insert("mcp-name", HeaderValue::from_str(name).unwrap());
    }
    headers
}

fn request(method: &str, params: Value) -> Vec<u8> {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}},
    });
    json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).to_string().into_bytes()
}

fn request_parsing(c: &mut Criterion) {
    let mut group = c.benchmark_group("request parsing");
    let get = request("tasks/get", json!({"taskId": "tsk_0e7eecd6a0e8045b8043444f120d48e683"}));
    let get_headers = headers("tasks/get", None);
    group.bench_function("tasks/get", |b| b.iter(|| fuzzing::wire(&get_headers, black_box(&get), false)));
    let call = request("tools/call", json!({"name": "generate_report", "arguments": {"topic": "q3", "pages": 12}}));
    let call_headers = headers("tools/call", Some("generate_report"));
    group.bench_function("tools/call", |b| b.iter(|| fuzzing::wire(&call_headers, black_box(&call), false)));
    group.finish();
}

fn snapshot_encoding(c: &mut Criterion) {
    let mut group = c.benchmark_group("snapshot encoding");
    let id = json!(7);
    for (label, text_bytes) in [("small result", 2), ("1 KB result", 1_000)] {
        let snapshot = completed(text_bytes);
        group.bench_function(format!("{label}, written"), |b| {
            b.iter(|| {
                let hint = snapshot.encoded_len_hint();
                let body = result::encode_complete(hint, |out| black_box(&snapshot).write_detailed(out));
                envelope::encode_success(&id, &body)
            })
        });
        group.bench_function(format!("{label}, value tree"), |b| {
            b.iter(|| {
                let body = result::complete(black_box(&snapshot).detailed_fields());
                serde_json::to_vec(&envelope::success(&id, body)).unwrap()
            })
        });
    }
    group.finish();
}

fn sse_event_encoding(c: &mut Criterion) {
    let mut group = c.benchmark_group("sse event encoding");
    let snapshot = completed(2);
    let meta = json!({"io.modelcontextprotocol/subscriptionId": 7});
    group.bench_function("notifications/tasks, written", |b| {
        b.iter(|| {
            envelope::encode_notification("notifications/tasks", 384, |out| {
                black_box(&snapshot).write_detailed(out);
                out.extend_from_slice(br#","_meta":"#);
                serde_json::to_writer(out, &meta).unwrap();
            })
        })
    });
    group.bench_function("notifications/tasks, value tree", |b| {
        b.iter(|| {
            let mut params = black_box(&snapshot).detailed_fields();
            params.insert("_meta".into(), meta.clone());
            envelope::notification("notifications/tasks", Value::Object(params)).to_string()
        })
    });
    group.finish();
}

criterion_group!(benches, request_parsing, snapshot_encoding, sse_event_encoding);
criterion_main!(benches);
