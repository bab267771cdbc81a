//! A gateway or worker binary run as a child process, its log captured to a file.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

/// Which binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binary {
    Gateway,
    Worker,
    /// `examples/custom-worker`: the worker as a library, with a tool of its own.
    ExampleWorker,
    /// The `taskgate` command-line client (run with `crate::cli`, not as a service).
    Cli,
    /// `taskgate-loadtest`, run to its end by a test.
    Loadtest,
}

impl Binary {
    fn file_name(self) -> &'static str {
        match self {
            Self::Gateway => "taskgate-gateway",
            Self::Worker => "taskgate-worker",
            Self::ExampleWorker => "custom-worker",
            Self::Cli => "taskgate",
            Self::Loadtest => "taskgate-loadtest",
        }
    }

    /// The binary next to this test's cargo target directory, rebuilt first (once per test
    /// process) so that running one test file never runs stale binaries.
    pub fn path(self) -> PathBuf {
        static BUILT: std::sync::Once = std::sync::Once::new();
        if std::env::var_os("TASKGATE_BIN_DIR").is_none() {
            BUILT.call_once(build_binaries);
        }
        let dir = std::env::var_os("TASKGATE_BIN_DIR").map(PathBuf::from).unwrap_or_else(|| {
            // target/<profile>/deps/<test-binary>
            let exe = std::env::current_exe().expect("current exe");
            exe.parent().and_then(|deps| deps.parent()).expect("target dir").to_path_buf()
        });
        let path = dir.join(self.file_name());
        assert!(path.is_file(), "{} is not built; run the suite with scripts/test", path.display());
        path
    }
}

/// `cargo build --bins` for the workspace, with the cargo that built this test.
fn build_binaries() {
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root");
    let status = std::process::Command::new(env!("CARGO"))
        .args([
            "build",
            "--quiet",
            "--bins",
            "-p",
            "taskgate-gateway",
            "-p",
            "taskgate-worker",
            "-p",
            "taskgate-example-worker",
            "-p",
            "taskgate-cli",
            "-p",
            "taskgate-loadtest",
        ])
        .current_dir(workspace)
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building the binaries failed");
}

/// A running service. Killed when dropped.
pub struct Service {
    binary: Binary,
    args: Vec<String>,
    env: Vec<(String, String)>,
    child: Option<Child>,
    log: PathBuf,
    /// For a gateway: its base URL.
    pub url: Option<String>,
}

impl Service {
    pub(crate) async fn spawn(
        binary: Binary,
        args: Vec<String>,
        env: Vec<(String, String)>,
        log: PathBuf,
        url: Option<String>,
    ) -> Self {
        let mut service = Self { binary, args, env, child: None, log, url };
        service.start().await;
        service
    }

    /// Starts it without waiting for readiness.
    pub(crate) async fn spawn_unready(
        binary: Binary,
        args: Vec<String>,
        env: Vec<(String, String)>,
        log: PathBuf,
        url: Option<String>,
    ) -> Self {
        let mut service = Self { binary, args, env, child: None, log, url };
        service.launch();
        service
    }

    async fn start(&mut self) {
        // Counted before the start, so that a worker quicker than this look is still seen.
        let started = self.log().matches("worker running").count();
        self.launch();
        match (&self.url, self.binary) {
            (Some(url), _) => wait_ready(url).await,
            (None, Binary::Worker | Binary::ExampleWorker) => {
                // A worker logs this once its consumer groups exist and its tools are published.
                crate::eventually(Duration::from_secs(20), "the worker to start", || {
                    let running = self.log().matches("worker running").count() > started;
                    async move { running.then_some(()) }
                })
                .await;
            }
            (None, Binary::Gateway | Binary::Cli | Binary::Loadtest) => {}
        }
    }

    fn launch(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).expect("log file");
        let child = Command::new(self.binary.path())
            .args(&self.args)
            .env("RUST_LOG", "info")
            .env_remove("TASKGATE_AUTH")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("binary starts");
        self.child = Some(child);
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().and_then(Child::id).expect("running")
    }

    /// `kill -9`, and reap.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts the same command again (same port, same arguments).
    pub async fn restart(&mut self) {
        self.kill().await;
        self.start().await;
    }

    /// Sends a signal by name (`TERM`, `STOP`, `CONT`); `STOP` returns once every thread of
    /// the process has stopped (see [`send_signal`]).
    pub fn signal(&self, name: &str) {
        send_signal(self.pid(), name);
    }

    /// Waits for the process to exit on its own and returns its exit code.
    pub async fn wait_exit(&mut self, patience: Duration) -> Option<i32> {
        let child = self.child.as_mut().expect("running");
        let status = tokio::time::timeout(patience, child.wait()).await.expect("process exits in time").expect("wait");
        self.child = None;
        status.code()
    }

    /// The captured log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

async fn wait_ready(url: &str) {
    let client = reqwest::Client::builder().no_proxy().build().expect("http client");
    let probe = format!("{url}/readyz");
    crate::eventually(Duration::from_secs(20), "the gateway's /readyz to answer 200", || {
        let request = client.get(&probe).send();
        async move { request.await.ok().filter(|r| r.status() == 200).map(drop) }
    })
    .await;
}

/// Sends a signal by name to `pid`. For `STOP`, waits until every thread of the process is
/// stopped: `kill` returns once the signal is queued, and the stop takes effect only when the
/// thread picked to handle it next runs. On a loaded machine that can be milliseconds later,
/// while the process's other threads go on running (a worker could still claim the task a test
/// queues right after "stopping" it).
pub(crate) fn send_signal(pid: u32, name: &str) {
    let status = std::process::Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).status();
    assert!(status.is_ok_and(|s| s.success()), "kill -{name} failed");
    if name != "STOP" {
        return;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !all_threads_stopped(pid) {
        assert!(std::time::Instant::now() < deadline, "process {pid} did not stop within 10 s of SIGSTOP");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Whether every thread of `pid` is stopped (or gone), by the state field of
/// `/proc/<pid>/task/<tid>/stat` (the first field after the parenthesised name).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return true };
    tasks.flatten().all(|task| {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { return true };
        let state = stat.rfind(')').and_then(|end| stat[end + 1..].trim_start().chars().next());
        matches!(state, Some('T' | 't' | 'Z' | 'X') | None)
    })
}
