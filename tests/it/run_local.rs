//! `scripts/run-local`, the README's first command, run as a user runs it: it starts a Redis of
//! its own (or uses `TASKGATE_REDIS_URL`), a worker and two gateways; the README's first task
//! completes through the `taskgate` CLI; Ctrl-C stops everything it started. And the shared
//! start-up helper, without any Redis on `PATH`, says what to run instead of failing obscurely.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use taskgate_tests::cli::Cli;
use taskgate_tests::{RedisServer, eventually, free_port};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

/// `scripts/run-local` started in a process group of its own, its output in a file.
struct RunLocal {
    child: tokio::process::Child,
    out: PathBuf,
    dir: tempfile::TempDir,
    ports: [u16; 2],
}

impl RunLocal {
    /// Starts it and waits until it says it is running. `redis_url`: the Redis to use, else
    /// its own on `redis_port`.
    async fn start(redis_url: Option<&str>, redis_port: u16) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = dir.path().join("run-local.out");
        let ports = [free_port(), free_port()];
        // SIGINT at its default, whatever this test process inherited: the script must see
        // Ctrl-C as a terminal would deliver it.
        let mut command = tokio::process::Command::new("env");
        command
            .args(["--default-signal=INT", "bash"])
            .arg(root().join("scripts/run-local"))
            .current_dir(root())
            .env("TASKGATE_LOCAL_DIR", dir.path().join("stack"))
            .env("TASKGATE_LOCAL_PORT", ports[0].to_string())
            .env("TASKGATE_LOCAL_PORT_2", ports[1].to_string())
            .env("TASKGATE_LOCAL_REDIS_PORT", redis_port.to_string())
            .env("PATH", path_with_cargo());
        for name in ["TASKGATE_REDIS_URL", "TASKGATE_NAMESPACE", "TASKGATE_UPSTREAMS", "TASKGATE_TOOLS"] {
            command.env_remove(name);
        }
        if let Some(url) = redis_url {
            command.env("TASKGATE_REDIS_URL", url);
        }
        let log = std::fs::File::create(&out).expect("output file");
        command
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .process_group(0)
            .kill_on_drop(true);
        let child = command.spawn().expect("scripts/run-local runs");
        let pid = child.id().expect("a pid");
        let run = Self { child, out, dir, ports };
        // A first build of the binaries may happen here, so the patience is long.
        eventually(Duration::from_secs(600), "scripts/run-local to say it is running", || async {
            let out = run.output();
            assert!(alive(pid), "scripts/run-local exited:\n{out}");
            out.contains("Ctrl-C stops everything").then_some(())
        })
        .await;
        run
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// `name pid` lines of what it started.
    fn started(&self) -> Vec<(String, u32)> {
        std::fs::read_to_string(self.dir.path().join("stack/pids"))
            .expect("the pids file")
            .lines()
            .filter_map(|l| l.split_once(' ').map(|(n, p)| (n.to_owned(), p.parse().expect("a pid"))))
            .collect()
    }

    fn cli(&self, replica: usize) -> Cli {
        Cli::new(&format!("http://127.0.0.1:{}", self.ports[replica]))
    }

    /// Ctrl-C, as a terminal sends it to the foreground process group; the exit code.
    async fn interrupt(mut self) -> (i32, String) {
        let pid = self.child.id().expect("running");
        let status = std::process::Command::new("kill").args(["-INT", "--", &format!("-{pid}")]).status();
        assert!(status.is_ok_and(|s| s.success()), "kill -INT");
        let status = tokio::time::timeout(Duration::from_secs(90), self.child.wait())
            .await
            .expect("scripts/run-local stops within 90 s of Ctrl-C")
            .expect("wait");
        (status.code().unwrap_or(-1), self.output())
    }
}

/// `PATH` with the directory of the cargo running these tests first: the script builds with it.
fn path_with_cargo() -> String {
    let cargo = std::env::var("CARGO").map(PathBuf::from).unwrap_or_else(|_| PathBuf::from(env!("CARGO")));
    let path = std::env::var("PATH").unwrap_or_default();
    match cargo.parent() {
        Some(dir) => format!("{}:{path}", dir.display()),
        None => path,
    }
}

fn alive(pid: u32) -> bool {
    // A zombie has exited; only its parent has not read its status yet.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
}

fn listening(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_local_starts_its_own_redis_serves_the_first_task_and_stops_on_ctrl_c() {
    let redis_port = free_port();
    let run = RunLocal::start(None, redis_port).await;
    let started = run.started();
    let names: Vec<&str> = started.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["redis", "gateway-1", "gateway-2", "worker-1"],
        "gateways first, as a deployment: {}",
        run.output()
    );
    assert!(listening(redis_port), "its Redis listens on TASKGATE_LOCAL_REDIS_PORT");
    assert!(run.output().contains(&format!("http://127.0.0.1:{}/mcp", run.ports[0])), "{}", run.output());

    // The README's first task, created on one replica and read back from the other.
    let call = run.cli(0).run(&["--output", "json", "call", "sleep", "--detach", "--arg", "ms=200"]).await;
    assert_eq!(call.code, 0, "{call:?}");
    let task_id = call.json()["taskId"].as_str().expect("a task id").to_owned();
    let followed = run.cli(1).run(&["follow", &task_id]).await;
    assert_eq!(followed.code, 0, "{followed:?}");
    let got = run.cli(1).run(&["--output", "json", "get", &task_id]).await;
    assert_eq!(got.json()["status"], "completed", "{got:?}");
    // Its Redis keeps an append-only file, so tasks outlive a restart.
    assert!(run.dir.path().join("stack/redis/appendonlydir").is_dir(), "AOF on");

    let (code, out) = run.interrupt().await;
    assert_eq!(code, 130, "Ctrl-C ends it as an interrupt:\n{out}");
    assert!(out.contains("stopping"), "{out}");
    for (name, pid) in &started {
        assert!(!alive(*pid), "{name} (pid {pid}) still runs after Ctrl-C");
    }
    assert!(!listening(redis_port), "its Redis is stopped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_local_uses_the_redis_of_taskgate_redis_url() {
    let redis = RedisServer::start().await;
    // A port nothing listens on: were the script to start a Redis, it would be there.
    let unused = free_port();
    let run = RunLocal::start(Some(&redis.url()), unused).await;
    let names: Vec<String> = run.started().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["gateway-1", "gateway-2", "worker-1"], "no Redis of its own:\n{}", run.output());
    assert!(!listening(unused));

    let call = run.cli(0).run(&["--output", "json", "call", "sleep", "--detach", "--arg", "ms=10"]).await;
    assert_eq!(call.code, 0, "{call:?}");
    let task_id = call.json()["taskId"].as_str().expect("a task id").to_owned();
    // The record is in the Redis it was given.
    let mut conn = redis.connection().await;
    let keys: Vec<String> =
        redis::cmd("KEYS").arg(format!("taskgate-local:*{task_id}*")).query_async(&mut conn).await.expect("KEYS");
    assert!(!keys.is_empty(), "the task's keys are in TASKGATE_REDIS_URL's Redis");

    let (code, out) = run.interrupt().await;
    assert_eq!(code, 130, "{out}");
    assert!(listening(redis.port()), "a Redis it did not start is left running");
}

#[test]
fn without_redis_on_path_the_helper_says_what_to_run() {
    // A PATH with no redis-server, valkey-server or apt-get: nothing can be found or installed.
    let bin = tempfile::tempdir().expect("temp dir");
    std::os::unix::fs::symlink("/usr/bin/uname", bin.path().join("uname")).expect("symlink");
    let out = std::process::Command::new("/bin/bash")
        .args(["-c", ". scripts/lib/stack.sh; stack_find_redis; echo found"])
        .current_dir(root())
        .env_clear()
        .env("PATH", bin.path())
        .output()
        .expect("bash runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).is_empty());
    assert!(stderr.contains("neither redis-server nor valkey-server is on PATH"), "{stderr}");
    assert!(stderr.contains("Run: "), "it names the command to run: {stderr}");
    assert!(stderr.contains("TASKGATE_REDIS_URL"), "it names the alternative: {stderr}");
}
