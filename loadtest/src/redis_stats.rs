//! Redis-side figures: commands executed (from `INFO commandstats`) and the reference
//! throughput of `redis-benchmark` on the same server, in the same run.

use std::collections::BTreeMap;

/// Calls per command, from `INFO commandstats`.
pub async fn command_calls(url: &str) -> anyhow::Result<BTreeMap<String, u64>> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut conn).await?;
    Ok(info
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.split(',').find_map(|kv| kv.strip_prefix("calls="))?.parse().ok()?;
            Some((name.to_owned(), calls))
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

/// `redis-benchmark -t <tests> -c <clients>`: requests per second by test name.
pub fn benchmark(url: &str, tests: &str, clients: usize, requests: u64) -> anyhow::Result<BTreeMap<String, f64>> {
    let rest = url.trim_start_matches("redis://");
    let authority = rest.split('/').next().unwrap_or(rest);
    let (host, port) = authority.rsplit_once(':').unwrap_or((authority, "6379"));
    let out = std::process::Command::new("redis-benchmark")
        .args([
            "-h",
            host,
            "-p",
            port,
            "-t",
            tests,
            "-c",
            &clients.to_string(),
            "-n",
            &requests.to_string(),
            "-q",
            "--csv",
        ])
        .output()?;
    anyhow::ensure!(out.status.success(), "redis-benchmark failed: {}", String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(',').map(|f| f.trim_matches('"')).collect();
            Some((fields.first()?.to_ascii_lowercase(), fields.get(1)?.parse().ok()?))
        })
        .collect())
}
