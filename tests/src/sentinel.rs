//! Redis under Sentinel for tests: a primary, a replica and three sentinels (quorum 2), each a
//! process of its own with its own port and directory. Sentinels notice a dead primary after
//! one second here, so a failover takes a few seconds.

use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::{FaultProxy, RedisServer, eventually, free_port};

/// The master name the sentinels monitor.
pub const MASTER: &str = "taskgate";

/// One failover of [`SentinelSet::fail_over_timed`].
pub struct Failover {
    /// The index of the new primary.
    pub promoted: usize,
    /// The index of the node killed, down until [`SentinelSet::rejoin`].
    pub killed: usize,
    /// When the killed process was gone.
    pub killed_at: std::time::Instant,
}

pub struct SentinelSet {
    /// The data nodes: at first `[primary, replica…]`; [`Self::primary_index`] says which leads.
    pub nodes: Vec<RedisServer>,
    sentinels: Vec<Sentinel>,
    /// How many nodes are down (killed by [`Self::fail_over`], not restarted).
    down: usize,
}

struct Sentinel {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl SentinelSet {
    /// A primary with one replica in sync, and three sentinels that agree on the primary.
    pub async fn start() -> Self {
        Self::start_with(1).await
    }

    /// A primary with `replicas` replicas in sync (one failover each, without restarting any
    /// node), and three sentinels that agree on the primary.
    pub async fn start_with(replicas: usize) -> Self {
        let primary = RedisServer::start().await;
        let mut nodes = Vec::new();
        for _ in 0..replicas {
            nodes.push(RedisServer::start_replica_of(&primary).await);
        }
        nodes.insert(0, primary);
        Self::watch(nodes).await
    }

    /// A primary with `replicas` replicas that each replicate through a proxy of its own (a
    /// [`FaultProxy`] in front of the primary), so a test can hold the replication stream back:
    /// replicas that lag. The sentinels reach every node directly, and a replica they point at
    /// a new primary replicates from it directly.
    pub async fn start_behind_proxies(replicas: usize) -> (Self, Vec<FaultProxy>) {
        let primary = RedisServer::start().await;
        let mut nodes = vec![];
        let mut proxies = vec![];
        for _ in 0..replicas {
            let proxy = FaultProxy::start(([127, 0, 0, 1], primary.port()).into()).await;
            nodes.push(RedisServer::start_with(&["--replicaof", "127.0.0.1", &proxy.port().to_string()]).await);
            proxies.push(proxy);
        }
        eventually(Duration::from_secs(20), "the replicas to be in sync through the proxies", || {
            replicas_online(&primary, replicas)
        })
        .await;
        nodes.insert(0, primary);
        let set = Self::watch(nodes).await;
        // A sentinel "fixes" a replica whose primary address is not the one it monitors (here:
        // the proxy's) once failover-timeout has passed, pointing it past the proxy; the run
        // must call `allow_failover` before killing the primary.
        set.set_failover_timeout(3_600_000).await;
        (set, proxies)
    }

    /// Sets every sentinel's failover-timeout (ms) for the primary.
    async fn set_failover_timeout(&self, ms: u64) {
        for sentinel in &self.sentinels {
            let mut conn = sentinel.connection().await.expect("a sentinel connection");
            let mut set = redis::cmd("SENTINEL");
            set.arg("SET").arg(MASTER).arg("failover-timeout").arg(ms);
            let _: () = set.query_async(&mut conn).await.expect("configured");
        }
    }

    /// A set started behind proxies gets its usual failover-timeout back, just before the kill
    /// (a dead primary does not look sane, so no replica is re-pointed after it).
    pub async fn allow_failover(&self) {
        self.set_failover_timeout(5_000).await;
    }

    /// Three sentinels over `nodes` (the primary first, then its replicas, in sync), once every
    /// sentinel knows every replica and the other sentinels.
    async fn watch(nodes: Vec<RedisServer>) -> Self {
        let replicas = nodes.len() - 1;
        let mut sentinels = Vec::new();
        for _ in 0..3 {
            sentinels.push(Sentinel::start(nodes[0].port()).await);
        }
        let set = Self { nodes, sentinels, down: 0 };
        let expected = replicas.to_string();
        // Every sentinel knows the replica (and the others), so a failover can happen.
        eventually(Duration::from_secs(30), "the sentinels to see the replica and each other", || async {
            for sentinel in &set.sentinels {
                let info = sentinel.master_info().await?;
                let seen = field(&info, "num-slaves")?;
                let others = field(&info, "num-other-sentinels")?;
                if seen != expected || others != "2" {
                    return None;
                }
            }
            Some(())
        })
        .await;
        set
    }

    /// `redis+sentinel://…/<master>` over the three sentinels.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.sentinels.iter().map(|s| format!("127.0.0.1:{}", s.port)).collect();
        format!("redis+sentinel://{}/{MASTER}", hosts.join(","))
    }

    /// [`Self::url`] with `lone` listed first, before the set's own sentinels.
    pub fn url_with(&self, lone: &LoneSentinel) -> String {
        self.url().replacen("redis+sentinel://", &format!("redis+sentinel://127.0.0.1:{},", lone.0.port), 1)
    }

    /// The port of the primary as the first sentinel that answers names it.
    pub async fn primary_port(&self) -> Option<u16> {
        for sentinel in &self.sentinels {
            let Ok(mut conn) = sentinel.connection().await else { continue };
            let addr: Result<Vec<String>, _> =
                redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg(MASTER).query_async(&mut conn).await;
            if let Some(port) = addr.ok().and_then(|a| a.get(1).and_then(|p| p.parse().ok())) {
                return Some(port);
            }
        }
        None
    }

    /// Which of [`Self::nodes`] is the primary now.
    pub async fn primary_index(&self) -> usize {
        let port = self.primary_port().await.expect("a sentinel names the primary");
        self.nodes.iter().position(|n| n.port() == port).expect("the primary is one of the nodes")
    }

    /// `kill -9` of the primary; returns once the sentinels name another node, whose index it
    /// returns, and every replica left replicates from it in sync (so the next failover can
    /// lose only what the next primary has not sent yet). The old primary stays down (see
    /// [`Self::rejoin`]).
    pub async fn fail_over(&mut self) -> usize {
        self.fail_over_timed().await.promoted
    }

    /// [`Self::fail_over`], with which node was killed and when.
    pub async fn fail_over_timed(&mut self) -> Failover {
        let old = self.primary_index().await;
        let old_port = self.nodes[old].port();
        self.nodes[old].kill().await;
        let killed = std::time::Instant::now();
        self.down += 1;
        let set = &*self;
        eventually(Duration::from_secs(60), "the sentinels to promote a replica", || async {
            let port = set.primary_port().await?;
            if port == old_port {
                return None;
            }
            let index = set.nodes.iter().position(|n| n.port() == port)?;
            // Promoted, and answering as a primary.
            let mut conn = set.nodes[index].try_connection().await.ok()?;
            let role: Vec<redis::Value> = redis::cmd("ROLE").query_async(&mut conn).await.ok()?;
            matches!(role.first(), Some(redis::Value::BulkString(b)) if b == b"master").then_some(index)
        })
        .await;
        // Sentinel points the other replicas at the new primary one at a time, and a sentinel
        // starved of CPU (a loaded test machine) enters its 30 s TILT mode and pauses doing so.
        // After a while the harness points the stragglers itself, as Sentinel's own
        // failover-timeout would: the test is about taskgate, not Sentinel's pace.
        let promoted = self.await_replicas(Duration::from_secs(15)).await;
        self.await_seen_up(self.nodes[promoted].port()).await;
        Failover { promoted, killed: old, killed_at: killed }
    }

    /// Waits until a sentinel reports the primary on `port` up (`SENTINEL MASTER`: flags
    /// `master`, none of `s_down`, `o_down`, `disconnected`), which is what taskgate requires
    /// before it follows a primary. A sentinel starved of CPU (TILT mode) can name the new
    /// primary and still flag it down for a while; that pace is Sentinel's, not taskgate's.
    pub async fn await_seen_up(&self, port: u16) {
        let set = self;
        eventually(Duration::from_secs(60), "a sentinel to see the new primary up", || async {
            for sentinel in &set.sentinels {
                let Ok(mut conn) = sentinel.connection().await else { continue };
                let info: Result<std::collections::HashMap<String, String>, _> =
                    redis::cmd("SENTINEL").arg("MASTER").arg(MASTER).query_async(&mut conn).await;
                let Ok(info) = info else { continue };
                let flags = info.get("flags").map(String::as_str).unwrap_or_default();
                let up = flags.split(',').any(|f| f == "master")
                    && !flags.split(',').any(|f| matches!(f, "s_down" | "o_down" | "disconnected"));
                if up && info.get("port").and_then(|p| p.parse::<u16>().ok()) == Some(port) {
                    return Some(());
                }
            }
            None
        })
        .await;
    }

    /// Starts node `index` again (same port, empty: the tests' nodes keep no data) as a replica
    /// of the current primary, as a Kubernetes start script does, and returns once every live
    /// replica is in sync with the primary. It never comes back as a primary: an empty primary
    /// the sentinels took back would have its replicas drop their data.
    pub async fn rejoin(&mut self, index: usize) {
        self.nodes[index].restart().await;
        self.down -= 1;
        // The sentinels also point the returning node (they knew it as the old primary), closing
        // its connections as they do, and one starved of CPU may do so late: the harness points
        // it at once.
        self.await_replicas(Duration::ZERO).await;
    }

    /// Waits until the primary the sentinels name has every running node but itself as a
    /// replica online, pointing the nodes that replicate from elsewhere at it once `grace` has
    /// passed; returns the primary's index (another than the one promoted first, when the
    /// sentinels failed over again). The primary is asked on every try: a starved
    /// primary can be failed over again meanwhile, and a node pointed at the one before would
    /// hang below it. A node the harness has down is never taken for the primary (a sentinel
    /// that missed a failover may still name it).
    async fn await_replicas(&self, grace: Duration) -> usize {
        let replicas = self.nodes.len() - self.down - 1;
        let started = tokio::time::Instant::now();
        loop {
            let primary = self
                .primary_port()
                .await
                .and_then(|port| self.nodes.iter().position(|n| n.port() == port && n.is_running()));
            if let Some(primary) = primary {
                if replicas_online(&self.nodes[primary], replicas).await.is_some() {
                    return primary;
                }
                if started.elapsed() >= grace {
                    let port = self.nodes[primary].port().to_string();
                    for (_, node) in self.nodes.iter().enumerate().filter(|(i, n)| *i != primary && n.is_running()) {
                        point_at(node, &port).await;
                    }
                }
            }
            if started.elapsed() >= Duration::from_secs(180) {
                panic!("timed out after 180 s waiting for the replicas to be in sync:\n{}", self.describe().await);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A split built by hand: the sentinels follow node `index` as the primary from now on (it
    /// stops replicating and is monitored in the old primary's place), while the old primary
    /// keeps running as a primary that nobody demotes and whose clients nobody disconnects. A
    /// process that still reaches the old primary sees what one cut off together with it sees,
    /// once the other side has failed over. Returns once every sentinel names node `index`.
    pub async fn split_to(&mut self, index: usize) {
        let port = self.nodes[index].port().to_string();
        let mut promoted = self.nodes[index].connection().await;
        let _: () = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query_async(&mut promoted).await.expect("promoted");
        for sentinel in &self.sentinels {
            let mut conn = sentinel.connection().await.expect("a sentinel connection");
            let _: () = redis::cmd("SENTINEL").arg("REMOVE").arg(MASTER).query_async(&mut conn).await.expect("removed");
            let mut monitor = redis::cmd("SENTINEL");
            monitor.arg("MONITOR").arg(MASTER).arg("127.0.0.1").arg(&port).arg(2);
            let _: () = monitor.query_async(&mut conn).await.expect("monitored");
            let mut set = redis::cmd("SENTINEL");
            set.arg("SET").arg(MASTER).arg("down-after-milliseconds").arg(1000).arg("failover-timeout").arg(5000);
            let _: () = set.query_async(&mut conn).await.expect("configured");
        }
        let wanted = self.nodes[index].port();
        eventually(Duration::from_secs(30), "every sentinel to name the new primary", || async {
            for sentinel in &self.sentinels {
                let mut conn = sentinel.connection().await.ok()?;
                let addr: Vec<String> = redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(MASTER)
                    .query_async(&mut conn)
                    .await
                    .ok()?;
                (addr.get(1)?.parse::<u16>().ok()? == wanted).then_some(())?;
            }
            Some(())
        })
        .await;
    }

    /// `kill -9` of every sentinel: the data nodes run on, and nobody can be asked which is the
    /// primary.
    pub async fn kill_sentinels(&mut self) {
        for sentinel in &mut self.sentinels {
            let _ = sentinel.child.kill().await;
        }
    }

    /// Each node's replication role and links, and each sentinel's primary: for a failure
    /// message.
    async fn describe(&self) -> String {
        let mut lines = Vec::new();
        for node in &self.nodes {
            let info = match node.try_connection().await {
                Ok(mut conn) => redis::cmd("INFO").arg("replication").query_async::<String>(&mut conn).await.ok(),
                Err(_) => None,
            };
            let wanted = ["role:", "master_port:", "master_link_status:", "master_sync_in_progress:", "slave"];
            let summary = info.map_or("down".to_owned(), |info| {
                info.lines().filter(|l| wanted.iter().any(|w| l.starts_with(w))).collect::<Vec<_>>().join(" ")
            });
            lines.push(format!("node {}: {summary}", node.port()));
        }
        for sentinel in &self.sentinels {
            let view = sentinel.master_info().await.map(|info| {
                ["ip", "port", "flags", "num-slaves", "config-epoch"]
                    .iter()
                    .map(|f| format!("{f}={}", field(&info, f).unwrap_or("?")))
                    .collect::<Vec<_>>()
                    .join(" ")
            });
            lines.push(format!("sentinel {}: {}", sentinel.port, view.unwrap_or_else(|| "no answer".into())));
        }
        lines.join("\n")
    }
}

/// A sentinel of its own over one node, under [`MASTER`]: it knows no other sentinel and no
/// failover, so it names that node under configuration epoch 0, as a sentinel that missed the
/// set's failovers names the old primary (and sees it up once it is back, restarted empty).
pub struct LoneSentinel(Sentinel);

impl LoneSentinel {
    /// Returns once it sees `node` up as the primary.
    pub async fn watching(node: &RedisServer) -> Self {
        let lone = Self(Sentinel::start(node.port()).await);
        eventually(Duration::from_secs(30), "the lone sentinel to see its node up", || async {
            let info = lone.0.master_info().await?;
            let flags = field(&info, "flags")?;
            let up = flags.split(',').any(|f| f == "master")
                && !flags.split(',').any(|f| matches!(f, "s_down" | "o_down" | "disconnected"));
            (up && field(&info, "config-epoch")? == "0").then_some(())
        })
        .await;
        lone
    }
}

impl Sentinel {
    async fn start(primary_port: u16) -> Self {
        let dir = tempfile::Builder::new().prefix("taskgate-sentinel-").tempdir().expect("a temp dir");
        let port = free_port();
        let config = dir.path().join("sentinel.conf");
        std::fs::write(
            &config,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\nsentinel monitor {MASTER} 127.0.0.1 {primary_port} 2\n\
                 sentinel down-after-milliseconds {MASTER} 1000\nsentinel failover-timeout {MASTER} 5000\n\
                 sentinel parallel-syncs {MASTER} 1\n",
                dir = dir.path().display()
            ),
        )
        .expect("the sentinel's config");
        let log = std::fs::File::create(dir.path().join("sentinel.log")).expect("a log file");
        let child = Command::new("redis-server")
            .arg(&config)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server --sentinel starts");
        let sentinel = Self { child, port, _dir: dir };
        eventually(Duration::from_secs(10), "the sentinel to answer", || async {
            sentinel.master_info().await.map(drop)
        })
        .await;
        sentinel
    }

    async fn connection(&self) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
        redis::Client::open(format!("redis://127.0.0.1:{}", self.port))?.get_multiplexed_async_connection().await
    }

    /// `SENTINEL MASTER <name>` as a flat list of field, value.
    async fn master_info(&self) -> Option<Vec<String>> {
        let mut conn = self.connection().await.ok()?;
        redis::cmd("SENTINEL").arg("MASTER").arg(MASTER).query_async(&mut conn).await.ok()
    }
}

/// Points `node` at the primary on `port` unless it already replicates from it; a node that
/// does not answer now is pointed on a later try.
async fn point_at(node: &RedisServer, port: &str) {
    let Ok(mut conn) = node.try_connection().await else { return };
    let Ok(info) = redis::cmd("INFO").arg("replication").query_async::<String>(&mut conn).await else { return };
    if !info.contains(&format!("master_port:{port}\r\n")) {
        let _ = redis::cmd("REPLICAOF").arg("127.0.0.1").arg(port).query_async::<()>(&mut conn).await;
    }
}

/// `Some` once `primary` has `replicas` replicas online (in sync and streaming).
async fn replicas_online(primary: &RedisServer, replicas: usize) -> Option<()> {
    let mut conn = primary.try_connection().await.ok()?;
    let info: String = redis::cmd("INFO").arg("replication").query_async(&mut conn).await.ok()?;
    (info.matches("state=online").count() == replicas).then_some(())
}

fn field<'a>(info: &'a [String], name: &str) -> Option<&'a str> {
    info.chunks_exact(2).find(|kv| kv[0] == name).map(|kv| kv[1].as_str())
}

/// `node`'s replication role as `ROLE` names it (`master`, `slave`).
pub async fn role(node: &RedisServer) -> String {
    let mut conn = node.connection().await;
    let role: Vec<redis::Value> = redis::cmd("ROLE").query_async(&mut conn).await.expect("ROLE");
    match role.first() {
        Some(redis::Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
        other => panic!("ROLE answered {other:?}"),
    }
}
