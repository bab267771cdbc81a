//! Telemetry shared by both binaries:
//! - [`logging`]: the global subscriber (JSON in containers, text on a TTY), with an OpenTelemetry
//!   layer when an OTLP endpoint is configured;
//! - [`metrics`]: the Prometheus families both processes export, and the text encoder;
//! - [`trace`]: W3C `traceparent` parsing and propagation between a request and the worker.

pub mod logging;
pub mod metrics;
pub mod trace;

pub use logging::{LogFormat, Telemetry, init};
