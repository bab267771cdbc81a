//! W3C trace context between a client's request, the gateway and the worker.
//!
//! A client's `traceparent` (the HTTP header, or `_meta.traceparent`) is hostile input: it is
//! checked against the W3C format before use. The gateway's request span takes it as parent;
//! the task record stores the traceparent of that span (or, with tracing off, the client's own),
//! so the worker's execution span joins the same trace as a child of the request that created
//! the task.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

static ENABLED: AtomicBool = AtomicBool::new(false);

pub(super) fn set_enabled() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Whether spans are exported; fine-grained spans (Redis calls) are only made when they are.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// A `traceparent` in the W3C format (`00-<32 hex>-<16 hex>-<2 hex>`, ids not all zero),
/// lowercased; `None` for anything else.
pub fn parse_traceparent(value: &str) -> Option<String> {
    let value = value.trim();
    let parts: Vec<&str> = value.split('-').collect();
    let [version, trace_id, parent_id, flags] = parts.as_slice() else { return None };
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    let nonzero = |s: &str| s.bytes().any(|b| b != b'0');
    let ok = hex(version, 2)
        && !version.eq_ignore_ascii_case("ff")
        && *version == "00"
        && hex(trace_id, 32)
        && nonzero(trace_id)
        && hex(parent_id, 16)
        && nonzero(parent_id)
        && hex(flags, 2);
    ok.then(|| value.to_ascii_lowercase())
}

/// Makes `span` a child of the remote context `traceparent` (already checked).
pub fn set_parent(span: &tracing::Span, traceparent: &str) {
    if !enabled() {
        return;
    }
    let carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    let _ = span.set_parent(cx);
}

/// The `traceparent` of `span`, when it is being exported.
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    if !enabled() {
        return None;
    }
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    carrier.remove("traceparent")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_w3c_traceparents_are_accepted() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(parse_traceparent(good).as_deref(), Some(good));
        assert_eq!(parse_traceparent("00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01").as_deref(), Some(good));
        for bad in [
            "",
            "garbage",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad}");
        }
    }
}
