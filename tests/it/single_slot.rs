//! `--redis-single-slot`, for a proxy in front of a cluster that refuses commands across slots:
//! on a standalone Redis watched with `MONITOR`, a whole lifecycle (input, answer, listen,
//! cancel) and the workers' periodic passes (stale deliveries, reaping) send no command whose
//! keys span two hash tags. Without the flag the worker's read over every shard does, so the
//! check is shown to catch one.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use taskgate_tests::{RedisServer, Stack, eventually};

const PATIENCE: Duration = Duration::from_secs(20);

/// `redis-cli MONITOR` into a file, for as long as it lives.
struct Monitor {
    _child: tokio::process::Child,
    file: PathBuf,
    _dir: tempfile::TempDir,
}

impl Monitor {
    async fn start(redis: &RedisServer) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("monitor.log");
        let out = std::fs::File::create(&file).expect("monitor file");
        let child = tokio::process::Command::new("redis-cli")
            .args(["-p", &redis.port().to_string(), "monitor"])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-cli runs");
        let monitor = Self { _child: child, file, _dir: dir };
        eventually(PATIENCE, "MONITOR to start", || async {
            monitor.lines().first().is_some_and(|l| l == "OK").then_some(())
        })
        .await;
        monitor
    }

    fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.file).unwrap_or_default().lines().map(str::to_owned).collect()
    }

    /// Waits until a command named `name` has been seen.
    async fn until_seen(&self, name: &str) {
        let quoted = format!("\"{name}\"");
        eventually(PATIENCE, &format!("a {name} command"), || async {
            self.lines().iter().any(|l| l.contains(&quoted)).then_some(())
        })
        .await;
    }
}

/// The quoted arguments of a MONITOR line, unescaped enough to compare key names.
fn arguments(line: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut arg = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => arg.extend(chars.next()),
                '"' => break,
                c => arg.push(c),
            }
        }
        args.push(arg);
    }
    args
}

/// The keys a command names (channels are not keys).
fn keys(args: &[String], namespace: &str) -> Vec<String> {
    let Some(name) = args.first().map(|n| n.to_ascii_uppercase()) else { return Vec::new() };
    let prefix = format!("{namespace}:");
    match name.as_str() {
        "EVALSHA" | "EVAL" => {
            let n: usize = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(0);
            args.iter().skip(3).take(n).cloned().collect()
        }
        "XREADGROUP" => {
            let streams = args.iter().position(|a| a.eq_ignore_ascii_case("STREAMS")).map_or(0, |i| i + 1);
            let rest = &args[streams.min(args.len())..];
            rest[..rest.len() / 2].to_vec()
        }
        "PUBLISH" | "SPUBLISH" | "SUBSCRIBE" | "SSUBSCRIBE" | "UNSUBSCRIBE" | "SUNSUBSCRIBE" | "PSUBSCRIBE" => {
            Vec::new()
        }
        _ => args.iter().skip(1).filter(|a| a.starts_with(&prefix)).cloned().collect(),
    }
}

/// A key's hash tag: what is between its first `{` and the next `}`, else the whole key.
fn tag(key: &str) -> &str {
    key.find('{')
        .and_then(|open| key[open + 1..].find('}').filter(|&len| len > 0).map(|len| &key[open + 1..open + 1 + len]))
        .unwrap_or(key)
}

/// The MONITOR lines of commands whose keys span more than one hash tag.
fn spanning(lines: &[String], namespace: &str) -> Vec<String> {
    lines
        .iter()
        .filter(|line| {
            let keys = keys(&arguments(line), namespace);
            keys.iter().any(|k| tag(k) != tag(&keys[0]))
        })
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_single_slot_no_command_spans_two_hash_tags() {
    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let monitor = Monitor::start(&stack.redis).await;
    stack.add_gateway(&["--redis-single-slot"]).await;
    // A short lease, so that the periodic passes (stale deliveries, reaping) run during the test.
    stack.add_worker(&["--redis-single-slot", "--lease-ms", "3000"]).await;
    let client = stack.client(0);

    let report = client.create_task("generate_report", json!({"size": "small"})).await;
    let (_, mut stream) =
        client.open_stream("subscriptions/listen", json!({"notifications": {"taskIds": [&report]}})).await;
    client.wait_for_status(&report, "input_required", PATIENCE).await;
    client.update_task(&report, json!({"approve_outline": {"action": "accept", "content": {"approved": true}}})).await;
    client.wait_for_status(&report, "completed", PATIENCE).await;
    while stream.next_message(PATIENCE).await.is_some() {}
    let sleeper = client.create_task("sleep", json!({"ms": 60_000})).await;
    stack.wait_until_held(&sleeper, PATIENCE).await;
    client.cancel_task(&sleeper).await;
    client.wait_for_status(&sleeper, "cancelled", PATIENCE).await;
    monitor.until_seen("XAUTOCLAIM").await;

    let lines = monitor.lines();
    let reads = lines.iter().filter(|l| l.contains("\"XREADGROUP\"")).count();
    assert!(reads > 0, "the worker read deliveries");
    let evals = lines.iter().filter(|l| l.contains("\"EVALSHA\"")).count();
    assert!(evals > 5, "the lifecycle ran its scripts");
    let spanning = spanning(&lines, &stack.namespace);
    assert!(spanning.is_empty(), "commands across hash tags:\n{}", spanning.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_single_slot_the_worker_reads_every_shard_in_one_command() {
    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let monitor = Monitor::start(&stack.redis).await;
    stack.add_worker(&[]).await;
    monitor.until_seen("XREADGROUP").await;
    let spanning = spanning(&monitor.lines(), &stack.namespace);
    assert!(
        spanning.iter().any(|l| l.contains("\"XREADGROUP\"")),
        "the one read over every shard spans hash tags, and the check sees it"
    );
}

#[test]
fn monitor_lines_are_parsed() {
    let line = r#"1733071234.123456 [0 127.0.0.1:5555] "EVALSHA" "abc" "2" "ns:{s01}:t:x" "ns:{s02}:q" "ns:events""#;
    let args = arguments(line);
    assert_eq!(keys(&args, "ns"), ["ns:{s01}:t:x", "ns:{s02}:q"]);
    assert_eq!(spanning(&[line.to_owned()], "ns").len(), 1);
    let read = r#"1.0 [0 127.0.0.1:1] "XREADGROUP" "GROUP" "g" "c" "STREAMS" "ns:{s00}:q" ">""#;
    assert!(spanning(&[read.to_owned()], "ns").is_empty());
    assert_eq!(arguments(r#"x "a\"b" "c""#), ["a\"b", "c"]);
}
