//! The `taskgate` CLI run as a child process against a stack: its exit code and both outputs.

use std::time::Duration;

use serde_json::Value;

use crate::Binary;

/// Runs the CLI against one gateway.
#[derive(Clone)]
pub struct Cli {
    url: String,
    env: Vec<(String, String)>,
}

/// How one run ended.
#[derive(Debug)]
pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// stdout as JSON lines.
    pub fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l:?}\n{self:?}")))
            .collect()
    }

    /// stdout as one JSON document.
    pub fn json(&self) -> Value {
        let mut lines = self.json_lines();
        assert_eq!(lines.len(), 1, "one JSON line expected: {self:?}");
        lines.remove(0)
    }
}

impl Cli {
    /// The CLI aimed at `gateway_url` (`http://host:port`).
    pub fn new(gateway_url: &str) -> Self {
        Self { url: format!("{gateway_url}/mcp"), env: Vec::new() }
    }

    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The command to run, with the URL set and nothing of the caller's own taskgate settings.
    pub fn command(&self, args: &[&str]) -> std::process::Command {
        let mut command = std::process::Command::new(Binary::Cli.path());
        command.args(args).env("TASKGATE_URL", &self.url).env("CLICOLOR", "0").env("NO_COLOR", "1");
        for name in ["TASKGATE_TOKEN", "TASKGATE_TOKEN_FILE", "TASKGATE_OUTPUT", "TASKGATE_TIMEOUT"] {
            command.env_remove(name);
        }
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        command
    }

    /// Runs to the end (at most a minute) with no terminal and no standard input.
    pub async fn run(&self, args: &[&str]) -> Ran {
        let mut command = tokio::process::Command::from(self.command(args));
        command.stdin(std::process::Stdio::null()).kill_on_drop(true);
        let output = tokio::time::timeout(Duration::from_secs(60), command.output())
            .await
            .unwrap_or_else(|_| panic!("taskgate {args:?} did not end within a minute"))
            .expect("the CLI runs");
        Ran {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}
