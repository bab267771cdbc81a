//! Helpers of the upstream-bridge tests: the hermetic fixture server over HTTP, the upstreams
//! file a worker is given, and waiting for a tool to appear in (or leave) `tools/list`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt as _;

use crate::McpClient;

/// The fixture (`src/bin/upstream_fixture.rs`) serving Streamable HTTP, logging to `log` in a
/// directory of its own; killed (and the directory removed) when dropped.
pub struct HttpFixture {
    _child: tokio::process::Child,
    _dir: tempfile::TempDir,
    pub url: String,
    pub log: PathBuf,
}

impl HttpFixture {
    /// Starts `bin http [--legacy]` and reads its URL.
    pub async fn start(bin: &str, legacy: bool) -> Self {
        let args: &[&str] = if legacy { &["--legacy"] } else { &[] };
        Self::spawn(bin, args, &[]).await
    }

    /// Starts `bin http --oauth` with `envs` (`FIXTURE_STATIC_TOKENS`, `FIXTURE_REFRESH_TOKENS`,
    /// `FIXTURE_TOKEN_TTL_S`, `FIXTURE_CLIENT_ID`, `FIXTURE_EXCHANGE_REFRESH=1` for a refresh
    /// token with each exchanged one): `/mcp` then demands a bearer token, and
    /// [`HttpFixture::token_url`] issues them.
    pub async fn start_oauth(bin: &str, envs: &[(&str, &str)]) -> Self {
        Self::spawn(bin, &["--oauth"], envs).await
    }

    /// The fixture's token endpoint (served with `--oauth` only).
    pub fn token_url(&self) -> String {
        format!("{}/token", self.url.strip_suffix("/mcp").expect("the URL ends in /mcp"))
    }

    async fn spawn(bin: &str, args: &[&str], envs: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("a directory for the fixture's log");
        let log = dir.path().join("fixture.log");
        let mut command = tokio::process::Command::new(bin);
        command.arg("http").args(args).envs(envs.iter().copied()).env("FIXTURE_LOG", &log);
        command.stdout(Stdio::piped()).stderr(Stdio::null()).kill_on_drop(true);
        let mut child = command.spawn().expect("the fixture starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let url = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("the fixture prints its URL in time")
            .expect("stdout reads")
            .expect("a URL line");
        Self { _child: child, _dir: dir, url, log }
    }
}

/// The pinned reference filesystem server (`@modelcontextprotocol/server-filesystem`): the Node
/// binary and the server's entry point, installed by `scripts/interop-servers` when missing (the
/// call panics naming the script if that fails). Run it as `node <entry> <dir>...`: the
/// directories it may touch come from its arguments, since the worker declares no roots.
pub fn filesystem_server() -> (PathBuf, PathBuf) {
    let crate::interop::Servers { node, filesystem, .. } = crate::interop::servers();
    (node, filesystem)
}

/// Writes an upstreams file into `dir` and returns its path.
pub fn upstreams_file(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, body).expect("the upstreams file is written");
    path
}

/// The fixture's event log (one line per event).
pub fn fixture_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits until `tools/list` lists `name`, and returns its descriptor.
pub async fn wait_for_tool(client: &McpClient, name: &str, patience: Duration) -> Value {
    crate::eventually(patience, &format!("tools/list to list {name}"), || async {
        let reply = client.call("tools/list", json!({})).await;
        reply.result()["tools"].as_array()?.iter().find(|t| t["name"] == name).cloned()
    })
    .await
}

/// Waits until `tools/list` no longer lists `name`.
pub async fn wait_for_no_tool(client: &McpClient, name: &str, patience: Duration) {
    crate::eventually(patience, &format!("tools/list to drop {name}"), || async {
        let reply = client.call("tools/list", json!({})).await;
        let tools = reply.result()["tools"].as_array()?.clone();
        (!tools.iter().any(|t| t["name"] == name)).then_some(())
    })
    .await;
}
