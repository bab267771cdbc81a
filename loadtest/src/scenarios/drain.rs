//! `drain`: how fast one worker works off a backlog. `--tasks` no-op tasks are queued while the
//! worker (`--worker-pid`, the one worker of the deployment) is stopped (`SIGSTOP`), so none is
//! claimed while they are created; then it is resumed (`SIGCONT`). The figure is tasks per
//! second from the resume (Redis's clock, the first claim follows within milliseconds) to the
//! last terminal state (the latest `updated` of the tasks' records, Redis's clock too), with
//! Redis's CPU per task from `INFO cpu` and the commands per task from `INFO commandstats`
//! over the same window. The drain is over when the pool's ready sets, lease indexes and
//! wake-up streams of every shard are empty; those looks are taken off the command counts.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt as _;
use taskgate_shared::store::{DEFAULT_POOL, Keys};
use taskgate_shared::task::TaskId;

use super::create_for_setup;
use crate::client::Client;
use crate::config::Config;

/// What one drain measured.
pub struct Drained {
    pub tasks: u64,
    pub completed: u64,
    /// From the resume to the last terminal state.
    pub seconds: f64,
    pub per_s: f64,
    /// Redis's CPU (user plus system, `INFO cpu`) per task, µs.
    pub redis_cpu_us_per_task: f64,
    /// Commands per task over the drain (`INFO commandstats`, the drain's own looks left out).
    pub commands: BTreeMap<String, u64>,
    /// Microseconds Redis spent in each command over the drain (`INFO commandstats`).
    pub usec: BTreeMap<String, u64>,
}

/// The worker stopped for as long as this lives: resumed however the scenario ends.
struct Stopped(u32);

impl Stopped {
    fn new(pid: u32) -> anyhow::Result<Self> {
        signal(pid, "STOP")?;
        Ok(Self(pid))
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = signal(self.0, "CONT");
    }
}

fn signal(pid: u32, name: &str) -> anyhow::Result<()> {
    let status = std::process::Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).status()?;
    anyhow::ensure!(status.success(), "kill -{name} {pid} failed");
    Ok(())
}

/// Redis's clock (ms) and its CPU seconds so far (user plus system).
async fn clock_and_cpu(conn: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<(u64, f64)> {
    let (time, info): ((u64, u64), String) = redis::pipe().cmd("TIME").cmd("INFO").arg("cpu").query_async(conn).await?;
    let field = |name: &str| {
        info.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(':')?.trim().parse::<f64>().ok())
    };
    let cpu = field("used_cpu_user").unwrap_or(0.0) + field("used_cpu_sys").unwrap_or(0.0);
    Ok((time.0 * 1_000 + time.1 / 1_000, cpu))
}

pub async fn run(config: &Config, client: Client) -> anyhow::Result<Drained> {
    let url = config.redis_url.as_deref().ok_or_else(|| anyhow::anyhow!("--scenario drain needs --redis-url"))?;
    let pid = config.worker_pid.ok_or_else(|| anyhow::anyhow!("--scenario drain needs --worker-pid"))?;
    let mut conn = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
    let keys = Keys::new(config.namespace.clone());
    let stopped = Stopped::new(pid)?;
    let ids: Vec<String> = futures::stream::iter(0..config.tasks)
        .map(|_| create_for_setup(&client, &config.tool, config.arguments.clone()))
        .buffer_unordered(config.concurrency.max(1))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    let before = crate::redis_stats::command_stats(url).await?;
    let (resumed_ms, cpu_before) = clock_and_cpu(&mut conn).await?;
    drop(stopped);
    let shards = config.queue_shards.min(256);
    let mut looks = 0u64;
    let give_up = tokio::time::Instant::now() + Duration::from_secs(600);
    loop {
        let mut pipe = redis::pipe();
        for shard in 0..shards {
            let queue = keys.queue(shard as u8, DEFAULT_POOL);
            pipe.cmd("ZCARD")
                .arg(&queue.ready)
                .cmd("ZCARD")
                .arg(keys.shard(shard as u8).leases)
                .cmd("XLEN")
                .arg(&queue.stream);
        }
        let counts: Vec<u64> = pipe.query_async(&mut conn).await?;
        looks += 1;
        if counts.iter().all(|n| *n == 0) {
            break;
        }
        anyhow::ensure!(tokio::time::Instant::now() < give_up, "the backlog did not drain in 10 minutes");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, cpu_after) = clock_and_cpu(&mut conn).await?;
    let after = crate::redis_stats::command_stats(url).await?;
    let calls = |stats: &BTreeMap<String, (u64, u64)>| stats.iter().map(|(n, (c, _))| (n.clone(), *c)).collect();
    let usecs = |stats: &BTreeMap<String, (u64, u64)>| stats.iter().map(|(n, (_, u))| (n.clone(), *u)).collect();
    let mut commands = crate::redis_stats::delta(&calls(&before), &calls(&after));
    let usec = crate::redis_stats::delta(&usecs(&before), &usecs(&after));
    for (name, own) in [("zcard", 2 * looks * shards as u64), ("xlen", looks * shards as u64), ("time", 2)] {
        if let Some(calls) = commands.get_mut(name) {
            *calls = calls.saturating_sub(own);
        }
    }
    // When each task ended, from its record.
    let (mut completed, mut last_ms) = (0u64, resumed_ms);
    for chunk in ids.chunks(1_000) {
        let mut pipe = redis::pipe();
        for id in chunk {
            let id = TaskId::parse(id).ok_or_else(|| anyhow::anyhow!("not a task id: {id}"))?;
            pipe.cmd("HMGET").arg(keys.task(&id).record).arg("status").arg("updated");
        }
        let rows: Vec<(Option<String>, Option<u64>)> = pipe.query_async(&mut conn).await?;
        for (status, updated) in rows {
            completed += u64::from(status.as_deref() == Some("completed"));
            last_ms = last_ms.max(updated.unwrap_or(0));
        }
    }
    let tasks = ids.len() as u64;
    let seconds = (last_ms.saturating_sub(resumed_ms)) as f64 / 1_000.0;
    Ok(Drained {
        tasks,
        completed,
        seconds,
        per_s: if seconds > 0.0 { completed as f64 / seconds } else { 0.0 },
        redis_cpu_us_per_task: (cpu_after - cpu_before) * 1e6 / tasks.max(1) as f64,
        commands,
        usec,
    })
}
