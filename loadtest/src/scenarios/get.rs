//! `get`: `tasks/get` on a set of tasks created (and finished) up front.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::create_for_setup;
use crate::client::{Client, LoadError};
use crate::config::Config;
use crate::driver::{Op, Sample};

pub(super) async fn prepare(config: &Config, client: Client) -> anyhow::Result<Op> {
    let mut ids = Vec::with_capacity(config.tasks);
    for _ in 0..config.tasks.max(1) {
        ids.push(
            create_for_setup(&client, &config.tool, config.arguments.clone())
                .await
                .map_err(|e| anyhow::anyhow!("creating: {e}"))?,
        );
    }
    // Let them settle, so every read is of a finished task.
    for id in &ids {
        for _ in 0..200 {
            let result = client.call("tasks/get", json!({"taskId": id}), true).await;
            if result.as_ref().is_ok_and(|r| r["status"] != "working") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let ids = Arc::new(ids);
    Ok(Arc::new(move || {
        let (client, ids) = (client.clone(), ids.clone());
        Box::pin(async move {
            let id = &ids[rand::random_range(0..ids.len())];
            let result = client.call_light("tasks/get", json!({"taskId": id}), true).await?;
            if result.result_type != "complete" {
                return Err(LoadError::Unexpected("wrong resultType"));
            }
            Ok(Sample::default())
        })
    }))
}
