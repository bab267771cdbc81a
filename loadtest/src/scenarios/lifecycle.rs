//! `lifecycle`: create → wait (listen, or poll honouring `pollIntervalMs`) → answer any input
//! → terminal, with a share of tasks cancelled. Records time-to-terminal. A call answered with
//! its task's result (the task ended within the gateway's `--complete-within-ms`) is terminal
//! at once: nothing is followed, and it is never cancelled.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::{answer, make};
use crate::client::{Client, LoadError, SseReader};
use crate::config::{Config, Wait};
use crate::driver::{Op, Sample};

const TERMINAL: [&str; 3] = ["completed", "failed", "cancelled"];

pub(super) fn op(config: &Config, client: Client) -> Op {
    let (tool, wait, cancel_ratio) = (config.tool.clone(), config.wait, config.cancel_ratio);
    let arguments = config.arguments.clone();
    Arc::new(move || {
        let (client, tool, arguments) = (client.clone(), tool.clone(), arguments.clone());
        Box::pin(async move {
            let t0 = Instant::now();
            let made = make(&client, &tool, arguments).await?;
            if !made.ended {
                if rand::random::<f64>() < cancel_ratio {
                    client.call("tasks/cancel", json!({"taskId": made.id}), true).await?;
                }
                wait_until_terminal(&client, &made.id, wait).await?;
            }
            Ok(Sample { latency: None, time_to_terminal: Some(t0.elapsed()) })
        })
    })
}

/// Waits for task `id` to end, answering any input it asks for.
pub(super) async fn wait_until_terminal(client: &Client, id: &str, wait: Wait) -> Result<(), LoadError> {
    match wait {
        Wait::Listen => listen_until_terminal(client, id).await,
        Wait::Poll => poll_until_terminal(client, id).await,
    }
}

async fn listen_until_terminal(client: &Client, id: &str) -> Result<(), LoadError> {
    let mut stream = SseReader::new(client.listen(&[id]).await?);
    let mut answered = Vec::<String>::new();
    while let Some(message) = stream.next().await {
        if message["method"] != "notifications/tasks" {
            continue;
        }
        let snapshot = &message["params"];
        let status = snapshot["status"].as_str().unwrap_or_default();
        if TERMINAL.contains(&status) {
            return Ok(());
        }
        if status == "input_required" {
            let keys: Vec<String> =
                snapshot["inputRequests"].as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default();
            if keys.iter().any(|k| !answered.contains(k)) {
                answer(client, snapshot).await?;
                answered.extend(keys);
            }
        }
    }
    Err(LoadError::Unexpected("listen stream ended before a terminal state"))
}

async fn poll_until_terminal(client: &Client, id: &str) -> Result<(), LoadError> {
    loop {
        let snapshot: Value = client.call("tasks/get", json!({"taskId": id}), true).await?;
        let status = snapshot["status"].as_str().unwrap_or_default();
        if TERMINAL.contains(&status) {
            return Ok(());
        }
        if status == "input_required" {
            answer(client, &snapshot).await?;
        }
        let interval = snapshot["pollIntervalMs"].as_u64().unwrap_or(1_000);
        tokio::time::sleep(Duration::from_millis(interval)).await;
    }
}
