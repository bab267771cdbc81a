//! CPU time per operation of each process a run involves: the gateways, workers and Redis named
//! with `--cpu-pid`, Redis found by its `process_id` when it runs on this machine, and the load
//! tester itself. Read from `/proc/<pid>/stat` (user plus system time of every thread) at the
//! start and the end of the measured window. On a shared, noisy machine this is a far steadier
//! figure than throughput: a process's cost per operation hardly moves when another process
//! takes a core away from it.

use std::collections::BTreeMap;
use std::time::Duration;

/// Linux reports process times in USER_HZ ticks, fixed at 100 per second for user space.
const TICKS_PER_SECOND: u64 = 100;

/// A process to account for, by role; several pids under one role are summed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    pub role: String,
    pub pid: u32,
}

/// `role=pid`, as `--cpu-pid` takes it.
pub fn parse_watched(text: &str) -> Result<Watched, String> {
    let (role, pid) = text.split_once('=').ok_or_else(|| format!("expected ROLE=PID, got {text:?}"))?;
    let valid = !role.is_empty() && role.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid {
        return Err(format!("a role is letters, digits, '-' and '_', got {role:?}"));
    }
    let pid = pid.parse().map_err(|_| format!("not a process id: {pid:?}"))?;
    Ok(Watched { role: role.to_owned(), pid })
}

/// User plus system time so far of process `pid` (this process when `None`).
pub fn cpu_time(pid: Option<u32>) -> std::io::Result<Duration> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    let stat = std::fs::read_to_string(&path)?;
    parse_stat(&stat).ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{path}: unreadable")))
}

/// utime and stime of a `/proc/<pid>/stat` line. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted from its closing parenthesis.
fn parse_stat(stat: &str) -> Option<Duration> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    // After the name: state is field 3, utime field 14, stime field 15.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 1_000 / TICKS_PER_SECOND))
}

/// The command name of process `pid`, if it runs here.
pub fn command_name(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).ok().map(|name| name.trim().to_owned())
}

/// CPU time of every watched process, and of this one, at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    times: BTreeMap<String, Duration>,
    at: std::time::Instant,
}

impl Snapshot {
    /// Fails when a watched process is gone: its figures would be wrong.
    pub fn take(watched: &[Watched]) -> std::io::Result<Self> {
        let mut times = BTreeMap::new();
        for process in watched {
            let time = cpu_time(Some(process.pid)).map_err(|err| {
                std::io::Error::new(err.kind(), format!("{} (pid {}): {err}", process.role, process.pid))
            })?;
            *times.entry(process.role.clone()).or_insert(Duration::ZERO) += time;
        }
        times.insert("loadtest".to_owned(), cpu_time(None)?);
        Ok(Self { times, at: std::time::Instant::now() })
    }

    /// Per role: CPU microseconds per operation over the `ops` done since `before`, and the
    /// cores used meanwhile.
    pub fn since(&self, before: &Self, ops: u64) -> (BTreeMap<String, f64>, BTreeMap<String, f64>) {
        let wall = self.at.saturating_duration_since(before.at);
        let mut per_op = BTreeMap::new();
        let mut cores = BTreeMap::new();
        for (role, after) in &self.times {
            let spent = after.saturating_sub(before.times.get(role).copied().unwrap_or_default());
            if ops > 0 {
                per_op.insert(role.clone(), spent.as_secs_f64() * 1e6 / ops as f64);
            }
            if !wall.is_zero() {
                cores.insert(role.clone(), spent.as_secs_f64() / wall.as_secs_f64());
            }
        }
        (per_op, cores)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_read_past_odd_command_names() {
        let line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 37 0 0 20 0 9 0 123 0 0";
        assert_eq!(parse_stat(line), Some(Duration::from_millis(2_870)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_seen_spending_cpu() {
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while cpu_time(None).unwrap().is_zero() {
            assert!(start.elapsed() < Duration::from_secs(10), "no CPU time seen");
            for i in 0..1_000_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
        }
    }

    #[test]
    fn roles_and_pids_are_checked() {
        assert_eq!(parse_watched("gateway=12"), Ok(Watched { role: "gateway".into(), pid: 12 }));
        assert!(parse_watched("gateway").is_err());
        assert!(parse_watched("gate way=1").is_err());
        assert!(parse_watched("gateway=x").is_err());
    }
}
