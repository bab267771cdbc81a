//! The pinned third-party MCP clients of the interop tests, installed on first use.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root")
}

/// The pinned Python SDK's interpreter, installed by `scripts/interop-clients` when missing.
pub fn python() -> PathBuf {
    let python = root().join(".cache/interop/venv/bin/python");
    if !python.is_file() {
        let status = std::process::Command::new(root().join("scripts/interop-clients"))
            .current_dir(root())
            .status()
            .expect("scripts/interop-clients runs");
        assert!(status.success(), "scripts/interop-clients could not install the pinned Python SDK");
    }
    python
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
