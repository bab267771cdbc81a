//! The traffic each scenario sends. Each returns the operation the driver repeats.

pub mod drain;
mod get;
mod lifecycle;
mod listen;
pub mod neighbour;

use std::sync::Arc;

use serde_json::{Value, json};

use crate::client::{Client, LoadError};
use crate::config::{Config, Scenario};
use crate::driver::{Op, Recorder, Sample};

pub use listen::Lags;

/// Sets the scenario up and returns its operation (and, for `listen`, its lag histogram).
pub async fn prepare(config: &Config, client: Client, recorder: Arc<Recorder>) -> anyhow::Result<(Op, Option<Lags>)> {
    let tool = config.tool.clone();
    let tenants = tenants(config, &client)?;
    Ok(match config.scenario {
        Scenario::Get => (get::prepare(config, client, tenants).await?, None),
        Scenario::Create if tenants.len() > 1 => {
            let arguments = config.arguments.clone();
            (round_robin(tenants, |client| call_op(client, tool.clone(), arguments.clone(), true, MADE)), None)
        }
        Scenario::Sync if tenants.len() > 1 => {
            let arguments = config.arguments.clone();
            (
                round_robin(tenants, |client| call_op(client, tool.clone(), arguments.clone(), false, &["complete"])),
                None,
            )
        }
        Scenario::Lifecycle if tenants.len() > 1 => {
            (round_robin(tenants, |client| lifecycle::op(config, client)), None)
        }
        Scenario::Create => (call_op(client, tool, config.arguments.clone(), true, MADE), None),
        Scenario::Sync => (call_op(client, tool, config.arguments.clone(), false, &["complete"]), None),
        Scenario::Lifecycle => (lifecycle::op(config, client), None),
        Scenario::Neighbour => anyhow::bail!("neighbour runs rounds of its own (scenarios::neighbour::run)"),
        Scenario::Drain => anyhow::bail!("drain runs on its own (scenarios::drain::run)"),
        Scenario::Listen => {
            let (op, lags) = listen::prepare(config, client, recorder).await?;
            (op, Some(lags))
        }
    })
}

/// One client per token of `--tokens-file` (sharing `client`'s connections), or none.
fn tenants(config: &Config, client: &Client) -> anyhow::Result<Vec<Client>> {
    let Some(path) = &config.tokens_file else { return Ok(Vec::new()) };
    let text = std::fs::read_to_string(path)
        .map_err(|err| anyhow::anyhow!("cannot read --tokens-file {}: {err}", path.display()))?;
    Ok(text.lines().map(str::trim).filter(|t| !t.is_empty()).map(|t| client.with_token(t)).collect())
}

/// An operation that runs `make(client)`'s operation for each client in turn.
fn round_robin(clients: Vec<Client>, make: impl Fn(Client) -> Op) -> Op {
    let ops: Vec<Op> = clients.into_iter().map(make).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    Arc::new(move || {
        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        ops[i % ops.len()]()
    })
}

/// What a call made as a task may answer: its handle, or, when the task ended within the
/// gateway's completion budget (`--complete-within-ms`), its result.
const MADE: &[&str] = &["task", "complete"];

/// `tools/call` expecting one of these `resultType`s.
fn call_op(client: Client, tool: String, arguments: Value, tasks: bool, expect: &'static [&'static str]) -> Op {
    Arc::new(move || {
        let (client, tool, arguments) = (client.clone(), tool.clone(), arguments.clone());
        Box::pin(async move {
            let result = client.call_light("tools/call", json!({"name": tool, "arguments": arguments}), tasks).await?;
            if !expect.contains(&result.result_type.as_str()) {
                return Err(LoadError::Unexpected("wrong resultType"));
            }
            Ok(Sample::default())
        })
    })
}

/// A task a `tools/call` made: its id, and whether the reply was already its result.
struct Made {
    id: String,
    ended: bool,
}

/// Creates a task.
async fn make(client: &Client, tool: &str, arguments: Value) -> Result<Made, LoadError> {
    let result = client.call_light("tools/call", json!({"name": tool, "arguments": arguments}), true).await?;
    let answered = result.meta.and_then(|meta| meta.task_id);
    match (result.result_type.as_str(), result.task_id, answered) {
        ("task", Some(id), _) => Ok(Made { id, ended: false }),
        ("complete", None, Some(id)) => Ok(Made { id, ended: true }),
        _ => Err(LoadError::Unexpected("neither a task nor a task's result")),
    }
}

/// Creates a task; returns its id.
async fn create(client: &Client, tool: &str, arguments: Value) -> Result<String, LoadError> {
    make(client, tool, arguments).await.map(|made| made.id)
}

/// [`create`] for a scenario's set-up, which is not measured: a refusal by the tenant's
/// creation rate (429, -31429) is waited out, so a scenario can run against a gateway at its
/// defaults. Measured creates never retry: a refusal there is a figure.
async fn create_for_setup(client: &Client, tool: &str, arguments: Value) -> Result<String, LoadError> {
    let mut wait = std::time::Duration::from_millis(50);
    let give_up = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        match create(client, tool, arguments.clone()).await {
            Err(LoadError::Rpc(RATE_LIMITED)) if tokio::time::Instant::now() < give_up => {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(std::time::Duration::from_secs(1));
            }
            other => return other,
        }
    }
}

/// taskgate's code for a refusal by a limit.
const RATE_LIMITED: i64 = -31429;

/// Answers every outstanding request of an `input_required` snapshot with an acceptance.
async fn answer(client: &Client, snapshot: &Value) -> Result<(), LoadError> {
    let Some(requests) = snapshot["inputRequests"].as_object() else { return Ok(()) };
    let answers: serde_json::Map<String, Value> = requests
        .keys()
        .map(|k| {
            (k.clone(), json!({"action": "accept", "content": {"approved": true, "confirm": true, "name": "load"}}))
        })
        .collect();
    let task_id = snapshot["taskId"].clone();
    client.call("tasks/update", json!({"taskId": task_id, "inputResponses": answers}), true).await.map(drop)
}
