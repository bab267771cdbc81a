//! `get`: `tasks/get` on a set of tasks created (and finished) up front.
//!
//! With one token, each request reads a task drawn at random. With `--tokens-file`, the tasks
//! are shared out among the tokens (task `i` belongs to token `i mod n`) and read by their
//! owners in a fixed cycle, so that with `--rate R` each of `--tasks N` tasks is polled once
//! every `N / R` seconds: the steady polling of a fleet of agents, each watching its own tasks.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;

use super::create_for_setup;
use crate::client::{Client, LoadError};
use crate::config::Config;
use crate::driver::{Op, Sample};

pub(super) async fn prepare(config: &Config, client: Client, owners: Vec<Client>) -> anyhow::Result<Op> {
    let cycle = !owners.is_empty();
    let owners = if cycle { owners } else { vec![client] };
    let mut ids = Vec::with_capacity(config.tasks);
    for i in 0..config.tasks.max(1) {
        let owner = &owners[i % owners.len()];
        let id = create_for_setup(owner, &config.tool, config.arguments.clone())
            .await
            .map_err(|e| anyhow::anyhow!("creating: {e}"))?;
        ids.push((owner.clone(), id));
    }
    // Let them settle, so every read is of a finished task.
    for (client, id) in &ids {
        for _ in 0..200 {
            let result = client.call("tasks/get", json!({"taskId": id}), true).await;
            if result.as_ref().is_ok_and(|r| r["status"] != "working") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let ids = Arc::new(ids);
    let next = AtomicUsize::new(0);
    Ok(Arc::new(move || {
        let i = if cycle { next.fetch_add(1, Ordering::Relaxed) % ids.len() } else { rand::random_range(0..ids.len()) };
        let ids = ids.clone();
        Box::pin(async move {
            let (client, id) = &ids[i];
            let result = client.call_light("tasks/get", json!({"taskId": id}), true).await?;
            if result.result_type != "complete" {
                return Err(LoadError::Unexpected("wrong resultType"));
            }
            Ok(Sample::default())
        })
    }))
}
