//! Heap allocations per operation on the hot paths, counted with a counting allocator: unlike
//! time, the count is exact and the same on every machine, so a bound on it is a regression
//! test. The micro-benchmarks (`benches/hot_path.rs`) time the same operations.

use axum::http::{HeaderMap, HeaderValue};
use serde_json::json;
use taskgate_gateway::fuzzing;
use taskgate_shared::protocol::{envelope, result};

#[path = "../benches/fixtures/mod.rs"]
mod fixtures;

#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

/// Blocks allocated while `operation` runs (what it returns is dropped inside).
fn allocations<T>(operation: impl Fn() -> T) -> u64 {
    drop(operation()); // warm any lazily initialised statics
    let before = dhat::HeapStats::get().total_blocks;
    drop(operation());
    dhat::HeapStats::get().total_blocks - before
}

// One test: a process has one profiler.
#[test]
fn hot_paths_allocate_within_their_budgets() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let snapshot = fixtures::completed(2);
    let id = json!(7);
    let meta = json!({"io.modelcontextprotocol/subscriptionId": 7});

    let get_response = allocations(|| {
        let body = result::encode_complete(256, |out| snapshot.write_detailed(out));
        envelope::encode_success(&id, &body)
    });
    let get_response_tree = allocations(|| {
        serde_json::to_vec(&envelope::success(&id, result::complete(snapshot.detailed_fields()))).unwrap()
    });
    let sse_event = allocations(|| {
        envelope::encode_notification("notifications/tasks", 384, |out| {
            snapshot.write_detailed(out);
            out.extend_from_slice(br#","_meta":"#);
            serde_json::to_writer(out, &meta).unwrap();
        })
    });

    let mut headers = HeaderMap::new();
    for (name, value) in [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tasks/get"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tasks/get", "params": {
        "taskId": "tsk_0e7eecd6a0e8045b8043444f120d48e683",
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
        },
    }})
    .to_string();
    assert_eq!(fuzzing::wire(&headers, body.as_bytes(), false), Ok(()));
    let get_request = allocations(|| fuzzing::wire(&headers, body.as_bytes(), false));

    println!("allocations per operation:");
    for (what, count) in [
        ("tasks/get response, written", get_response),
        ("tasks/get response, value tree", get_response_tree),
        ("notifications/tasks SSE event, written", sse_event),
        ("tasks/get request, parsed and checked", get_request),
    ] {
        println!("  {what:40} {count}");
    }
    // Measured: 3 (the result, the envelope around it, one growth), 2 and 8 (the request is
    // borrowed from the body, headers included; what remains is the client's capability map,
    // which a task keeps, and the checked version). A change that allocates more fails here.
    assert!(get_response <= 3, "tasks/get response: {get_response} allocations");
    assert!(sse_event <= 2, "SSE event: {sse_event} allocations");
    assert!(get_response < get_response_tree / 10, "{get_response} vs {get_response_tree}");
    assert!(get_request <= 8, "tasks/get request: {get_request} allocations");
}
