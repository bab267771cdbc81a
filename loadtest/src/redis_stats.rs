//! Redis-side figures: commands executed (from `INFO commandstats`) and the reference
//! throughput of `redis-benchmark` on the same server, in the same run.

use std::collections::BTreeMap;

/// Calls per command, from `INFO commandstats`.
pub async fn command_calls(url: &str) -> anyhow::Result<BTreeMap<String, u64>> {
    Ok(command_stats(url).await?.into_iter().map(|(name, (calls, _))| (name, calls)).collect())
}

/// Calls and microseconds per command, from `INFO commandstats`. A script's own figure
/// (`evalsha`) includes the commands it runs, which are counted under their own names too.
pub async fn command_stats(url: &str) -> anyhow::Result<BTreeMap<String, (u64, u64)>> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut conn).await?;
    Ok(info
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| rest.split(',').find_map(|kv| kv.strip_prefix(key)?.parse::<u64>().ok());
            Some((name.to_owned(), (field("calls=")?, field("usec=")?)))
        })
        .collect())
}

/// The pid of the Redis server, when it runs on this machine (its `process_id` names a local
/// process called redis-server or valkey-server).
pub async fn local_pid(url: &str) -> anyhow::Result<Option<u32>> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO").arg("server").query_async(&mut conn).await?;
    let pid = info.lines().find_map(|line| line.strip_prefix("process_id:")?.trim().parse::<u32>().ok());
    Ok(pid.filter(|pid| {
        crate::cpu::command_name(*pid)
            .is_some_and(|name| name.starts_with("redis-server") || name.starts_with("valkey"))
    }))
}

/// The difference of two snapshots, leaving out the load tester's own `info`.
pub fn delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter(|(name, _)| name.as_str() != "info")
        .filter_map(|(name, calls)| {
            let d = calls.saturating_sub(*before.get(name).unwrap_or(&0));
            (d > 0).then(|| (name.clone(), d))
        })
        .collect()
}

/// One `redis-benchmark` test's figures.
pub struct Benchmark {
    pub per_s: f64,
    /// Redis's CPU microseconds per request over the test (user plus system, from `/proc`),
    /// when its pid is known.
    pub redis_cpu_us_per_op: Option<f64>,
}

/// `redis-benchmark -t <test> -c <clients> -n <requests>`, with Redis's CPU time over it when
/// `redis_pid` is given.
pub fn benchmark(
    url: &str,
    test: &str,
    clients: usize,
    requests: u64,
    redis_pid: Option<u32>,
) -> anyhow::Result<Benchmark> {
    let rest = url.trim_start_matches("redis://");
    let authority = rest.split('/').next().unwrap_or(rest);
    let (host, port) = authority.rsplit_once(':').unwrap_or((authority, "6379"));
    let cpu = || redis_pid.map(|pid| crate::cpu::cpu_time(Some(pid))).transpose();
    let before = cpu()?;
    let out = std::process::Command::new("redis-benchmark")
        .args([
            "-h",
            host,
            "-p",
            port,
            "-t",
            test,
            "-c",
            &clients.to_string(),
            "-n",
            &requests.to_string(),
            "-q",
            "--csv",
        ])
        .output()?;
    let after = cpu()?;
    anyhow::ensure!(out.status.success(), "redis-benchmark failed: {}", String::from_utf8_lossy(&out.stderr));
    let per_s = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(',').map(|f| f.trim_matches('"')).collect();
            fields.first()?.eq_ignore_ascii_case(test).then(|| fields.get(1)?.parse().ok())?
        })
        .next()
        .ok_or_else(|| anyhow::anyhow!("redis-benchmark printed no {test} figure"))?;
    let redis_cpu_us_per_op =
        before.zip(after).map(|(before, after)| after.saturating_sub(before).as_secs_f64() * 1e6 / requests as f64);
    Ok(Benchmark { per_s, redis_cpu_us_per_op })
}
