//! A private `redis-server`: its own port and directory, never the machine's 6379.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::{eventually, free_port};

pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    /// A TLS port beside the plain one, which the harness keeps for its own checks.
    tls_port: Option<u16>,
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
        let mut server = Self {
            child: None,
            port: free_port(),
            tls_port: None,
            dir,
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
        };
        server.spawn().await;
        server
    }

    /// Starts a server that also listens for TLS, with `pki`'s server certificate, and asks
    /// clients on that port for a certificate of `pki`'s CA (mutual TLS) when `client_certs`.
    pub async fn start_tls(pki: &crate::tls::Pki, client_certs: bool, extra: &[&str]) -> Self {
        let tls_port = free_port();
        let mut args = tls_args(pki, tls_port, client_certs);
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let dir = tempfile::Builder::new().prefix("taskgate-redis-").tempdir().expect("a temp dir");
        let mut server = Self { child: None, port: free_port(), tls_port: Some(tls_port), dir, extra: args };
        server.spawn().await;
        server
    }

    /// `rediss://127.0.0.1:<tls port>` of a server started with [`Self::start_tls`].
    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port.expect("a TLS server"))
    }

    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// Starts a replica of `primary` and waits until the primary reports it in sync (`online`).
    pub async fn start_replica_of(primary: &RedisServer) -> Self {
        let replica = Self::start_with(&["--replicaof", "127.0.0.1", &primary.port().to_string()]).await;
        let conn = primary.connection().await;
        eventually(Duration::from_secs(20), "the replica to be in sync", || {
            let mut conn = conn.clone();
            async move {
                let info: String = redis::cmd("INFO").arg("replication").query_async(&mut conn).await.ok()?;
                info.contains("state=online").then_some(())
            }
        })
        .await;
        replica
    }

    /// Starts the server and waits for it to answer. A server that exits first (its port was
    /// taken between `free_port` and its bind, by another test's process) is started again on a
    /// new port; one that neither answers nor exits in 30 s fails the test with its log.
    async fn spawn(&mut self) {
        const ATTEMPTS: u32 = 3;
        for attempt in 1..=ATTEMPTS {
            self.start_child();
            match self.wait_until_answering(Duration::from_secs(30)).await {
                Ok(()) => return,
                Err(NotAnswering::Exited) if attempt < ATTEMPTS => self.port = free_port(),
                Err(why) => panic!("redis-server on port {} {why}; its log:\n{}", self.port, self.log_tail()),
            }
        }
    }

    fn start_child(&mut self) {
        let binary = which("redis-server").unwrap_or_else(|| {
            panic!("redis-server is not on PATH: run the tests with scripts/test, which installs what they need")
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
    }

    /// Until the server answers `PING`, exits, or `patience` passes.
    async fn wait_until_answering(&mut self, patience: Duration) -> Result<(), NotAnswering> {
        let deadline = tokio::time::Instant::now() + patience;
        let url = self.url();
        loop {
            if ping(&url).await {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut()
                && child.try_wait().ok().flatten().is_some()
            {
                return Err(NotAnswering::Exited);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(NotAnswering::TimedOut(patience));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The end of the server's log, for a failure message.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
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
        self.try_connection().await.expect("redis connection")
    }

    /// A connection for polling a node that may refuse one for a moment: Sentinel closes every
    /// client's connection to a node it reconfigures.
    pub async fn try_connection(&self) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
        redis::Client::open(self.url())?.get_multiplexed_async_connection().await
    }

    /// Sends a signal by name (`STOP`, `CONT`); `STOP` returns once the server has stopped.
    pub fn signal(&self, name: &str) {
        let pid = self.child.as_ref().and_then(Child::id).expect("running");
        crate::process::send_signal(pid, name);
    }

    /// Whether the process is up (not killed by [`Self::kill`]).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
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

/// How many replicas have every write `server` took before the call, waiting up to `patience`.
/// `WAIT` alone counts only the writes of its own connection (a fresh connection has none, and
/// it answers at once), so this writes a marker first: replication is in order, so a replica that
/// acknowledged the marker holds everything written before it on any connection. The connection
/// has no response timeout of its own, since `WAIT` blocks for as long as it is told.
pub async fn replicated(server: &RedisServer, replicas: usize, patience: Duration) -> usize {
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let mut conn = redis::Client::open(server.url())
        .expect("the server's url")
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("a connection for WAIT");
    let (acked,): (usize,) = redis::pipe()
        .cmd("INCR")
        .arg("taskgate-tests:replication-marker")
        .ignore()
        .cmd("WAIT")
        .arg(replicas)
        .arg(patience.as_millis() as u64)
        .query_async(&mut conn)
        .await
        .expect("the marker and WAIT");
    acked
}

/// The server arguments of a TLS port with `pki`'s certificate, also used on the cluster bus
/// and to replicas.
fn tls_args(pki: &crate::tls::Pki, tls_port: u16, client_certs: bool) -> Vec<String> {
    vec![
        "--tls-port".into(),
        tls_port.to_string(),
        "--tls-cert-file".into(),
        pki.server_cert().display().to_string(),
        "--tls-key-file".into(),
        pki.server_key().display().to_string(),
        "--tls-ca-cert-file".into(),
        pki.ca().display().to_string(),
        "--tls-auth-clients".into(),
        if client_certs { "yes" } else { "no" }.into(),
        "--tls-replication".into(),
        "yes".into(),
    ]
}

/// Whether a Redis answers `PING` at `url` within a second (whatever holds the port may not be
/// a Redis, and may never answer).
async fn ping(url: &str) -> bool {
    let Ok(client) = redis::Client::open(url) else { return false };
    let answered = async {
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        redis::cmd("PING").query_async::<String>(&mut conn).await.ok()
    };
    matches!(tokio::time::timeout(Duration::from_secs(1), answered).await, Ok(Some(_)))
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|dir| Path::new(dir).join(name)).find(|p| p.is_file())
}

/// A local Redis Cluster of `masters` primaries (no replicas), each a [`RedisServer`] with its own
/// port, bus port and directory, joined with `redis-cli --cluster create`.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub async fn start(masters: usize) -> Self {
        Self::start_with(masters, None).await
    }

    /// A cluster whose nodes also speak mutual TLS with `pki`'s certificates, on the cluster bus
    /// too; each keeps a plain port for the harness. Redis tells a TLS client the TLS ports.
    pub async fn start_tls(masters: usize, pki: &crate::tls::Pki) -> Self {
        Self::start_with(masters, Some(pki)).await
    }

    async fn start_with(masters: usize, pki: Option<&crate::tls::Pki>) -> Self {
        let mut nodes = Vec::with_capacity(masters);
        for _ in 0..masters {
            let bus = free_port().to_string();
            let mut args = vec![
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-port",
                bus.as_str(),
                "--cluster-node-timeout",
                "5000",
            ];
            nodes.push(match pki {
                Some(pki) => {
                    args.extend(["--tls-cluster", "yes"]);
                    RedisServer::start_tls(pki, true, &args).await
                }
                None => RedisServer::start_with(&args).await,
            });
        }
        let cli =
            which("redis-cli").expect("redis-cli is not on PATH: run the tests with scripts/test, which installs it");
        let mut create = Command::new(cli);
        create.args(["--cluster", "create"]);
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        let out = create
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .await
            .expect("redis-cli runs");
        assert!(out.status.success(), "redis-cli --cluster create failed: {}", String::from_utf8_lossy(&out.stdout));
        for node in &nodes {
            let url = node.url();
            let masters = nodes.len();
            // `cluster_state:ok` comes before every bus link is up, and a PUBLISH reaches only the
            // nodes linked at that moment: wait for every link too.
            eventually(Duration::from_secs(20), "every cluster node to be ok and linked to every other", || {
                let url = url.clone();
                async move {
                    let client = redis::Client::open(url).ok()?;
                    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
                    let info: String = redis::cmd("CLUSTER").arg("INFO").query_async(&mut conn).await.ok()?;
                    let links: String = redis::cmd("CLUSTER").arg("NODES").query_async(&mut conn).await.ok()?;
                    let linked = links.lines().filter(|l| l.trim_end().contains(" connected")).count();
                    (info.contains("cluster_state:ok") && linked == masters).then_some(())
                }
            })
            .await;
        }
        Self { nodes }
    }

    /// The URL taskgate takes for a Cluster: every node as a seed, on the TLS ports of a TLS
    /// cluster.
    pub fn url(&self) -> String {
        let seeds: Vec<String> =
            self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.tls_port().unwrap_or(n.port()))).collect();
        let scheme = if self.nodes.iter().any(|n| n.tls_port().is_some()) { "rediss" } else { "redis" };
        format!("{scheme}+cluster://{}", seeds.join(","))
    }
}

/// Why a started server is not usable.
#[derive(Debug)]
enum NotAnswering {
    Exited,
    TimedOut(Duration),
}

impl std::fmt::Display for NotAnswering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exited => write!(f, "exited before answering PING"),
            Self::TimedOut(patience) => write!(f, "did not answer PING within {patience:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    /// The port `free_port` gave was taken before the server bound it: it starts on another.
    #[tokio::test]
    async fn a_server_whose_port_was_taken_starts_on_another() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let dir = tempfile::Builder::new().prefix("taskgate-redis-").tempdir().unwrap();
        let mut server = super::RedisServer { child: None, port, tls_port: None, dir, extra: Vec::new() };
        server.spawn().await;
        assert_ne!(server.port(), port, "started again on a new port");
        assert!(super::ping(&server.url()).await);
    }
}
