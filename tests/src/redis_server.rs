//! A private `redis-server`: its own port and directory, never the machine's 6379.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::{eventually, free_port};

pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts a server with no persistence.
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// Starts a server with extra arguments (e.g. `--appendonly yes`).
    pub async fn start_with(extra: &[&str]) -> Self {
        let dir = tempfile::Builder::new().prefix("taskgate-redis-").tempdir().expect("a temp dir");
        let mut server =
            Self { child: None, port: free_port(), dir, extra: extra.iter().map(|s| (*s).to_owned()).collect() };
        server.spawn().await;
        server
    }

    async fn spawn(&mut self) {
        let binary = which("redis-server").unwrap_or_else(|| {
            panic!("redis-server is not on PATH: install it (Debian: apt-get install -y redis-server)")
        });
        let log = std::fs::File::create(self.dir.path().join("redis.log")).expect("redis log file");
        let mut args: Vec<String> = vec![
            "--port".into(),
            self.port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--dir".into(),
            self.dir.path().display().to_string(),
            "--save".into(),
            String::new(),
        ];
        if !self.extra.iter().any(|a| a == "--appendonly") {
            args.extend(["--appendonly".into(), "no".into()]);
        }
        args.extend(self.extra.iter().cloned());
        let child = Command::new(binary)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let url = self.url();
        eventually(Duration::from_secs(10), "redis-server to answer PING", || {
            let url = url.clone();
            async move { ping(&url).await.then_some(()) }
        })
        .await;
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A connection for assertions made directly on Redis.
    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .expect("valid url")
            .get_multiplexed_async_connection()
            .await
            .expect("redis connection")
    }

    /// `kill -9`.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts again on the same port and directory (an AOF, if any, is replayed).
    pub async fn restart(&mut self) {
        self.kill().await;
        self.spawn().await;
    }
}

async fn ping(url: &str) -> bool {
    let Ok(client) = redis::Client::open(url) else { return false };
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else { return false };
    redis::cmd("PING").query_async::<String>(&mut conn).await.is_ok()
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|dir| Path::new(dir).join(name)).find(|p| p.is_file())
}
