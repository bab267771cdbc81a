//! The request path before Redis: headers and body as a client may send them.
//!
//! Input layout: the first byte holds flags (bit 0: strict headers); then header lines
//! `name: value\n` up to an empty line; the rest is the body. Invalid header names or values
//! are skipped, as hyper would refuse them before the gateway sees them.
#![no_main]

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use taskgate_gateway::fuzzing;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else { return };
    let (head, body) = match rest.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&rest[..at], &rest[at + 2..]),
        None => (&rest[..0], rest),
    };
    let mut headers = HeaderMap::new();
    for line in head.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else { continue };
        let (Ok(name), Ok(value)) =
            (HeaderName::from_bytes(&line[..colon]), HeaderValue::from_bytes(line[colon + 1..].trim_ascii()))
        else {
            continue;
        };
        headers.append(name, value);
    }
    if let Err(err) = fuzzing::wire(&headers, body, flags & 1 == 1) {
        // Every refusal is a JSON-RPC error a client can parse back.
        let text = serde_json::to_string(&fuzzing::error_json(&err)).expect("an error serializes");
        let back: serde_json::Value = serde_json::from_str(&text).expect("an error is valid JSON");
        assert!(back["error"]["code"].is_i64(), "{text}");
    }
    if let Ok(token) = std::str::from_utf8(body) {
        assert!(fuzzing::request_state(token).is_err(), "a forged requestState was accepted");
    }
});
