//! The global subscriber. Logs: JSON lines when stderr is not a terminal (containers),
//! human-readable text on a TTY; `RUST_LOG` filters, the default is `info`. Each line carries
//! the fields of the span it was logged in (request id, tenant, method, task id), never a token,
//! tool arguments or elicitation content.
//!
//! Traces: exported over OTLP/HTTP when the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set and `OTEL_SDK_DISABLED` is not `true`; off
//! otherwise. `OTEL_EXPORTER_OTLP_PROTOCOL=http/json` selects JSON, anything else protobuf.

use std::io::IsTerminal;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// JSON unless stderr is a terminal.
    #[default]
    Auto,
    Json,
    Text,
}

impl std::str::FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Self::Auto),
            "json" => Ok(Self::Json),
            "text" => Ok(Self::Text),
            other => Err(format!("unknown log format {other:?} (auto, json, text)")),
        }
    }
}

/// Keeps the trace exporter alive; dropping it flushes the spans not yet sent.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            let _ = provider.shutdown();
        }
    }
}

/// Installs the global subscriber and, if configured, the OTLP trace exporter. Call once, from
/// `main`, inside the Tokio runtime; keep the guard until the process ends.
pub fn init(format: LogFormat, service: &'static str) -> Telemetry {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let json = match format {
        LogFormat::Auto => !std::io::stderr().is_terminal(),
        LogFormat::Json => true,
        LogFormat::Text => false,
    };
    let (provider, export_error) = match tracer_provider(service) {
        Ok(provider) => (provider, None),
        Err(err) => (None, Some(err)),
    };
    let otel = provider.as_ref().map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer("taskgate")));
    let registry = tracing_subscriber::registry().with(filter).with(otel);
    if json {
        let fmt = tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(std::io::stderr);
        registry.with(fmt).init();
    } else {
        registry.with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr)).init();
    }
    if let Some(err) = export_error {
        tracing::error!(error = %err, "OpenTelemetry export is configured but could not start; tracing is off");
    }
    if provider.is_some() {
        super::trace::set_enabled();
        tracing::info!("exporting traces over OTLP");
    }
    Telemetry { provider }
}

fn tracer_provider(service: &'static str) -> Result<Option<SdkTracerProvider>, opentelemetry_otlp::ExporterBuildError> {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    if disabled || !(set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) {
        return Ok(None);
    }
    let protocol = match std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL").as_deref() {
        Ok("http/json") => Protocol::HttpJson,
        _ => Protocol::HttpBinary,
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder().with_http().with_protocol(protocol).build()?;
    // `OTEL_SERVICE_NAME` (read by the builder) wins over the binary's own name.
    let mut resource = opentelemetry_sdk::Resource::builder();
    if !set("OTEL_SERVICE_NAME") {
        resource = resource.with_service_name(service);
    }
    let resource = resource.build();
    opentelemetry::global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());
    Ok(Some(SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build()))
}
