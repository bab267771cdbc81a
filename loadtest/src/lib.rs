//! `taskgate-loadtest`: real MCP Tasks traffic at one or more gateways, and what it measured.
//!
//! - [`driver`]: closed and open loops (open loops count latency from the intended start);
//! - [`scenarios`]: what each scenario sends;
//! - [`redis_stats`]: `INFO commandstats` deltas and `redis-benchmark` in the same run;
//! - [`cpu`]: CPU time per operation of every process involved;
//! - [`report`]: the table and the JSON.

pub mod client;
pub mod config;
pub mod cpu;
pub mod driver;
pub mod redis_stats;
pub mod report;
pub mod scenarios;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use crate::config::Config;
use crate::driver::Recorder;
use crate::report::{Percentiles, Report};

/// Requests per `redis-benchmark` test: enough for its CPU time to be read to about 1 %
/// (`/proc` counts in 10 ms ticks).
const BENCHMARK_REQUESTS: u64 = 200_000;

/// Runs the configured scenario and reports it.
pub async fn run(config: Config) -> anyhow::Result<Report> {
    // One open file per connection: a listen run holds one per stream.
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) if config.scenario == config::Scenario::Listen && limit < config.subscriptions as u64 + 256 => {
            eprintln!("warning: {limit} open files at most (the hard limit), fewer than the streams asked for");
        }
        Ok(_) => {}
        Err(err) => eprintln!("warning: the open-file limit could not be raised: {err}"),
    }
    let mut watched = config.cpu_pids.clone();
    if let Some(url) = &config.redis_url
        && !watched.iter().any(|w| w.role == "redis")
        && let Some(pid) = redis_stats::local_pid(url).await?
    {
        watched.push(cpu::Watched { role: "redis".into(), pid });
    }
    // Fail before the run on a pid that is not there.
    cpu::Snapshot::take(&watched)?;
    // Listen runs hold one connection per stream; spread them over several clients.
    let connections = config.connections.unwrap_or(if config.scenario == config::Scenario::Listen { 64 } else { 1 });
    let client = client::Client::new(&config, connections);
    if config.scenario == config::Scenario::Neighbour {
        return neighbour(&config, client).await;
    }
    if config.scenario == config::Scenario::Drain {
        return drain(&config, client, &watched).await;
    }
    let recorder = Arc::new(Recorder::default());
    let (op, lags) = scenarios::prepare(&config, client, recorder.clone()).await?;

    let before = match &config.redis_url {
        Some(url) => Some(redis_stats::command_calls(url).await?),
        None => None,
    };
    let opened = Arc::new(std::sync::Mutex::new(None));
    let measuring = {
        let (opened, watched) = (opened.clone(), watched.clone());
        move || *opened.lock().expect("lock poisoned: a holder panicked") = Some(cpu::Snapshot::take(&watched))
    };
    let measured = driver::run(&config, op, recorder.clone(), measuring).await;
    // Every operation of the window has been recorded: the loops are done.
    let closed = cpu::Snapshot::take(&watched)?;
    if lags.is_some() {
        // Let the last notifications arrive.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let commands = match (&config.redis_url, &before) {
        (Some(url), Some(before)) => redis_stats::delta(before, &redis_stats::command_calls(url).await?),
        _ => Default::default(),
    };

    let ok = recorder.ok.load(std::sync::atomic::Ordering::Relaxed);
    let throughput = ok as f64 / measured.as_secs_f64();
    let opened = opened.lock().expect("lock poisoned: a holder panicked").take().transpose()?;
    // The window runs from its opening to the end of the last operation counted.
    let (cpu_us_per_op, cpu_cores) = opened.map(|opened| closed.since(&opened, ok)).unwrap_or_default();
    let mut report = Report {
        scenario: format!("{:?}", config.scenario).to_lowercase(),
        mode: if config.rate.is_some() { "open".into() } else { "closed".into() },
        http: if config.http2 { "HTTP/2".into() } else { "HTTP/1.1".into() },
        connections,
        concurrency: config.concurrency,
        rate: config.rate,
        duration_s: measured.as_secs_f64(),
        ok,
        errors: recorder.errors.lock().expect("lock poisoned: a holder panicked").clone(),
        throughput_per_s: throughput,
        latency_ms: Percentiles::of(&recorder.latency.lock().expect("lock poisoned: a holder panicked")),
        time_to_terminal_ms: Percentiles::of(
            &recorder.time_to_terminal.lock().expect("lock poisoned: a holder panicked"),
        ),
        notification_lag_ms: lags.and_then(|l| Percentiles::of(&l.lock().expect("lock poisoned: a holder panicked"))),
        // Includes warm-up traffic, so it is an upper bound per measured operation.
        redis_commands_per_op: (!commands.is_empty() && ok > 0)
            .then(|| commands.values().sum::<u64>() as f64 / ok as f64),
        redis_commands: commands,
        cpu_us_per_op,
        cpu_cores,
        redis_benchmark: Default::default(),
        redis_benchmark_cpu_us_per_op: Default::default(),
        ratios: Default::default(),
    };
    if config.compare_redis
        && let Some(url) = &config.redis_url
    {
        let redis_pid = watched.iter().find(|w| w.role == "redis").map(|w| w.pid);
        for test in ["get", "set"] {
            let run = redis_stats::benchmark(url, test, config.concurrency, BENCHMARK_REQUESTS, redis_pid)?;
            report.ratios.insert(format!("{} / redis {test}", report.scenario), throughput / run.per_s);
            report.redis_benchmark.insert(test.to_owned(), run.per_s);
            let Some(redis_us) = run.redis_cpu_us_per_op.filter(|us| *us > 0.0) else { continue };
            report.redis_benchmark_cpu_us_per_op.insert(test.to_owned(), redis_us);
            // The machine-normalised cost: the same CPU, clock and kernel price both sides.
            if let Some(gateway_us) = report.cpu_us_per_op.get("gateway") {
                report.ratios.insert(
                    format!("gateway cpu per {} / redis cpu per {test}", report.scenario),
                    gateway_us / redis_us,
                );
            }
        }
    }
    report.print();
    if let Some(path) = &config.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    if config.fail_on_error && !report.errors.is_empty() {
        anyhow::bail!("{} operations failed", report.errors.values().sum::<u64>());
    }
    Ok(report)
}

/// `--scenario neighbour`: rounds instead of a measured window.
async fn neighbour(config: &Config, client: client::Client) -> anyhow::Result<Report> {
    let rounds = scenarios::neighbour::run(config, client).await?;
    let report = Report {
        scenario: "neighbour".into(),
        mode: "rounds".into(),
        http: if config.http2 { "HTTP/2".into() } else { "HTTP/1.1".into() },
        connections: 1,
        concurrency: config.concurrency,
        rate: None,
        duration_s: 0.0,
        ok: rounds.each_ms.len() as u64,
        errors: Default::default(),
        throughput_per_s: 0.0,
        latency_ms: None,
        time_to_terminal_ms: rounds.neighbour,
        notification_lag_ms: None,
        redis_commands_per_op: None,
        redis_commands: Default::default(),
        cpu_us_per_op: Default::default(),
        cpu_cores: Default::default(),
        redis_benchmark: Default::default(),
        redis_benchmark_cpu_us_per_op: Default::default(),
        ratios: Default::default(),
    };
    report.print();
    if let Some(path) = &config.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(report)
}

/// `--scenario drain`: one backlog, worked off by one worker.
async fn drain(config: &Config, client: client::Client, watched: &[cpu::Watched]) -> anyhow::Result<Report> {
    // The CPU of the watched processes over the drain (set-up included for the gateway: it is
    // there for the creates), per task.
    let opened = cpu::Snapshot::take(watched)?;
    let drained = scenarios::drain::run(config, client).await?;
    let closed = cpu::Snapshot::take(watched)?;
    let (mut cpu_us_per_op, cpu_cores) = closed.since(&opened, drained.tasks);
    // Where Redis's time went, per task and command, most first (a script's `evalsha` includes
    // the commands it ran, also listed under their own names).
    let per_task = |n: u64| n as f64 / drained.tasks.max(1) as f64;
    let mut by_usec: Vec<_> = drained.usec.iter().collect();
    by_usec.sort_by(|a, b| b.1.cmp(a.1));
    for (name, usec) in by_usec {
        let calls = drained.commands.get(name).copied().unwrap_or(0);
        println!("drain command {name:<16} {:>7.3} calls/task {:>7.2} µs/task", per_task(calls), per_task(*usec));
    }
    // Redis's own figure is over the drain alone (`INFO cpu`), not the creates.
    cpu_us_per_op.insert("redis".into(), drained.redis_cpu_us_per_task);
    println!(
        "drain: {} tasks ({} completed) in {:.2} s from the resume to the last end: {:.0} tasks/s; Redis {:.1} µs CPU per task",
        drained.tasks, drained.completed, drained.seconds, drained.per_s, drained.redis_cpu_us_per_task
    );
    let report = Report {
        scenario: "drain".into(),
        mode: "backlog".into(),
        http: if config.http2 { "HTTP/2".into() } else { "HTTP/1.1".into() },
        connections: 1,
        concurrency: config.concurrency,
        rate: None,
        duration_s: drained.seconds,
        ok: drained.completed,
        errors: if drained.completed < drained.tasks {
            BTreeMap::from([("not completed".to_owned(), drained.tasks - drained.completed)])
        } else {
            BTreeMap::new()
        },
        throughput_per_s: drained.per_s,
        latency_ms: None,
        time_to_terminal_ms: None,
        notification_lag_ms: None,
        redis_commands_per_op: (drained.tasks > 0)
            .then(|| drained.commands.values().sum::<u64>() as f64 / drained.tasks as f64),
        redis_commands: drained.commands,
        cpu_us_per_op,
        cpu_cores,
        redis_benchmark: Default::default(),
        redis_benchmark_cpu_us_per_op: Default::default(),
        ratios: Default::default(),
    };
    report.print();
    if let Some(path) = &config.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    if config.fail_on_error && !report.errors.is_empty() {
        anyhow::bail!("{} tasks did not complete", drained.tasks - drained.completed);
    }
    Ok(report)
}
