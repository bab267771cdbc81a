//! The baseline of the bridge benchmark (`scripts/perf-upstream`): calls one tool of an MCP
//! server directly with the official Rust SDK's client, one call at a time, and prints the
//! latency percentiles as one JSON line. `upstream-direct stdio CMD [ARGS…]` starts the server
//! as a child; `upstream-direct http URL` connects to one already serving. `CALLS` (default
//! 2000) and `TOOL` (default `echo`) set the run; the first tenth is a warm-up.

use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{Peer, RoleClient};
use rmcp::transport::TokioChildProcess;
use rmcp::transport::streamable_http_client::{StreamableHttpClientTransport, StreamableHttpClientTransportConfig};
use rmcp::{ClientLifecycleMode, ClientServiceExt as _};

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[index].as_secs_f64() * 1000.0
}

async fn measure(peer: &Peer<RoleClient>, tool: &str, calls: usize) -> anyhow::Result<Vec<Duration>> {
    let warmup = calls / 10;
    let mut samples = Vec::with_capacity(calls);
    for i in 0..calls + warmup {
        let started = Instant::now();
        peer.call_tool(CallToolRequestParams::new(tool.to_owned())).await?;
        if i >= warmup {
            samples.push(started.elapsed());
        }
    }
    samples.sort();
    Ok(samples)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let calls: usize = std::env::var("CALLS").ok().and_then(|c| c.parse().ok()).unwrap_or(2000);
    let tool = std::env::var("TOOL").unwrap_or_else(|_| "echo".into());
    let config =
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("taskgate-upstream-direct", "1.0.0"));
    let lifecycle = ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    };
    let (mode, samples) = match args.first().map(String::as_str) {
        Some("stdio") if args.len() > 1 => {
            let mut command = tokio::process::Command::new(&args[1]);
            command.args(&args[2..]).kill_on_drop(true);
            let client = config.serve_with_lifecycle(TokioChildProcess::new(command)?, lifecycle).await?;
            ("stdio", measure(client.peer(), &tool, calls).await?)
        }
        Some("http") if args.len() == 2 => {
            let transport = StreamableHttpClientTransport::from_config(StreamableHttpClientTransportConfig::with_uri(
                args[1].as_str(),
            ));
            let client = config.serve_with_lifecycle(transport, lifecycle).await?;
            ("http", measure(client.peer(), &tool, calls).await?)
        }
        _ => anyhow::bail!("usage: upstream-direct stdio CMD [ARGS…] | upstream-direct http URL"),
    };
    println!(
        "{}",
        serde_json::json!({
            "mode": mode,
            "tool": tool,
            "calls": samples.len(),
            "p50_ms": percentile(&samples, 0.5),
            "p90_ms": percentile(&samples, 0.9),
            "p99_ms": percentile(&samples, 0.99),
        })
    );
    Ok(())
}
