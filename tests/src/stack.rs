//! A whole taskgate deployment for one test: Redis, N gateways, M workers, one namespace.

use taskgate_shared::store::{Endpoint, Store};

use crate::{Binary, McpClient, RedisCluster, RedisServer, Service, free_port, unique_namespace};

/// Builds a [`Stack`]. Defaults: one gateway, one worker serving `demo`.
pub struct StackBuilder {
    gateways: usize,
    workers: usize,
    gateway_args: Vec<String>,
    worker_args: Vec<String>,
    redis_args: Vec<String>,
    auth_args: Vec<String>,
    cluster_masters: usize,
    tls: bool,
    env: Vec<(String, String)>,
}

impl StackBuilder {
    /// Redis speaks TLS with mutual authentication (a Cluster's bus too): the binaries get a
    /// `rediss://` (or `rediss+cluster://`) URL and the CA and client certificate of a PKI made
    /// for the stack ([`Stack::pki`]); the harness's own checks use the servers' plain ports.
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// Sets an environment variable for every gateway and worker.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Runs on a local Redis Cluster of this many primaries instead of one server.
    pub fn cluster(mut self, masters: usize) -> Self {
        self.cluster_masters = masters;
        self
    }

    /// Replaces the default `--auth none` with these arguments.
    pub fn auth_args(mut self, args: &[&str]) -> Self {
        self.auth_args = args.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    pub fn gateways(mut self, n: usize) -> Self {
        self.gateways = n;
        self
    }

    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }

    /// Sets a gateway option, replacing the harness default if there is one.
    pub fn gateway_option(mut self, name: &str, value: &str) -> Self {
        match self.gateway_args.iter().position(|a| a == name) {
            Some(i) => self.gateway_args[i + 1] = value.to_owned(),
            None => self.gateway_args.extend([name.to_owned(), value.to_owned()]),
        }
        self
    }

    /// Drops a harness default gateway option, so the gateway's own default applies.
    pub fn without_gateway_option(mut self, name: &str) -> Self {
        if let Some(i) = self.gateway_args.iter().position(|a| a == name) {
            self.gateway_args.drain(i..i + 2);
        }
        self
    }

    pub fn gateway_args(mut self, args: &[&str]) -> Self {
        self.gateway_args.extend(args.iter().map(|s| (*s).to_owned()));
        self
    }

    pub fn worker_args(mut self, args: &[&str]) -> Self {
        self.worker_args.extend(args.iter().map(|s| (*s).to_owned()));
        self
    }

    pub fn redis_args(mut self, args: &[&str]) -> Self {
        self.redis_args.extend(args.iter().map(|s| (*s).to_owned()));
        self
    }

    pub async fn spawn(self) -> Stack {
        let redis_args: Vec<&str> = self.redis_args.iter().map(String::as_str).collect();
        let pki = self.tls.then(crate::tls::Pki::generate);
        let (redis, redis_url, cluster) = if self.cluster_masters > 0 {
            let cluster = match &pki {
                Some(pki) => RedisCluster::start_tls(self.cluster_masters, pki).await,
                None => RedisCluster::start(self.cluster_masters).await,
            };
            let url = cluster.url();
            let mut nodes = cluster.nodes;
            let first = nodes.remove(0);
            (first, url, nodes)
        } else if self.tls {
            let pki = pki.as_ref().expect("made above");
            let redis = RedisServer::start_tls(pki, true, &redis_args).await;
            let url = redis.tls_url();
            (redis, url, Vec::new())
        } else {
            let redis = RedisServer::start_with(&redis_args).await;
            let url = redis.url();
            (redis, url, Vec::new())
        };
        let redis_client_args = pki.as_ref().map(crate::tls::Pki::client_args).unwrap_or_default();
        let logs = tempfile::Builder::new().prefix("taskgate-logs-").tempdir().expect("a temp dir");
        let mut stack = Stack {
            redis,
            redis_url,
            cluster_nodes: cluster,
            namespace: unique_namespace(),
            gateways: Vec::new(),
            workers: Vec::new(),
            gateway_args: self.gateway_args,
            worker_args: self.worker_args,
            redis_client_args,
            auth_args: self.auth_args,
            env: self.env,
            logs,
            pki,
        };
        for _ in 0..self.gateways {
            stack.add_gateway(&[]).await;
        }
        for _ in 0..self.workers {
            stack.add_worker(&[]).await;
        }
        stack
    }
}

/// Where a suite runs, for suites that run on more than one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    Standalone,
    /// A 3-primary Redis Cluster.
    Cluster,
    /// A 3-primary Redis Cluster over mutual TLS.
    ClusterTls,
}

impl Topology {
    pub fn builder(self) -> StackBuilder {
        match self {
            Self::Standalone => Stack::builder(),
            Self::Cluster => Stack::builder().cluster(3),
            Self::ClusterTls => Stack::builder().cluster(3).tls(),
        }
    }
}

/// A running deployment. Everything is killed when it is dropped.
pub struct Stack {
    /// The Redis server; on a Cluster, its first node.
    pub redis: RedisServer,
    /// What the binaries are given as `--redis-url`.
    pub redis_url: String,
    /// A Cluster's other nodes.
    pub cluster_nodes: Vec<RedisServer>,
    pub namespace: String,
    pub gateways: Vec<Service>,
    pub workers: Vec<Service>,
    gateway_args: Vec<String>,
    worker_args: Vec<String>,
    auth_args: Vec<String>,
    env: Vec<(String, String)>,
    logs: tempfile::TempDir,
    /// The certificates of a [`StackBuilder::tls`] stack.
    pub pki: Option<crate::tls::Pki>,
    /// What every binary gets besides `--redis-url` to reach Redis (a TLS stack's CA and
    /// client certificate).
    redis_client_args: Vec<String>,
}

impl Stack {
    pub fn builder() -> StackBuilder {
        StackBuilder {
            gateways: 1,
            workers: 1,
            // Tests poll as fast as they like; the limit tests turn the poll limit back on. And
            // a call made as a task answers with its handle, whatever the tool: most suites are
            // about tasks; the completion budget's own tests (and interop, at the defaults) take
            // this back.
            gateway_args: vec!["--poll-tolerance".into(), "0".into(), "--complete-within-ms".into(), "0".into()],
            worker_args: Vec::new(),
            redis_args: Vec::new(),
            auth_args: vec!["--auth".into(), "none".into()],
            cluster_masters: 0,
            tls: false,
            env: Vec::new(),
        }
    }

    /// Starts another gateway and waits until it is ready. Returns its index.
    pub async fn add_gateway(&mut self, extra: &[&str]) -> usize {
        let auth = self.auth_args.clone();
        self.spawn_gateway(auth, extra).await
    }

    /// Starts a gateway with these authentication arguments instead of the stack's.
    pub async fn add_gateway_with_auth(&mut self, auth: &[&str]) -> usize {
        self.spawn_gateway(auth.iter().map(|s| (*s).to_owned()).collect(), &[]).await
    }

    /// Starts a gateway listening on `host` (say `0.0.0.0`: not loopback, which changes its
    /// defaults) with these authentication arguments; it is reached at 127.0.0.1.
    pub async fn add_gateway_listening(&mut self, host: &str, auth: &[&str]) -> usize {
        let auth = auth.iter().map(|s| (*s).to_owned()).collect();
        let (args, log, url) = self.gateway_command(auth, host, &self.redis_url, &self.redis_client_args, &[]);
        let service = Service::spawn(Binary::Gateway, args, self.env.clone(), log, url).await;
        self.gateways.push(service);
        self.gateways.len() - 1
    }

    /// Starts a gateway on `redis_url` with only `extra` for the rest of its Redis settings,
    /// without waiting for it to be ready (one that cannot be, say). Returns its index.
    pub async fn add_gateway_unready(&mut self, redis_url: &str, extra: &[&str]) -> usize {
        let auth = self.auth_args.clone();
        let (args, log, url) = self.gateway_command(auth, "127.0.0.1", redis_url, &[], extra);
        self.gateways.push(Service::spawn_unready(Binary::Gateway, args, self.env.clone(), log, url).await);
        self.gateways.len() - 1
    }

    async fn spawn_gateway(&mut self, auth: Vec<String>, extra: &[&str]) -> usize {
        let (args, log, url) = self.gateway_command(auth, "127.0.0.1", &self.redis_url, &self.redis_client_args, extra);
        let service = Service::spawn(Binary::Gateway, args, self.env.clone(), log, url).await;
        self.gateways.push(service);
        self.gateways.len() - 1
    }

    /// A new gateway's arguments, log file and base URL.
    fn gateway_command(
        &self,
        auth: Vec<String>,
        host: &str,
        redis_url: &str,
        redis_client_args: &[String],
        extra: &[&str],
    ) -> (Vec<String>, std::path::PathBuf, Option<String>) {
        let i = self.gateways.len();
        let port = free_port();
        let mut args = auth;
        args.extend([
            "--listen".into(),
            format!("{host}:{port}"),
            "--redis-url".into(),
            redis_url.to_owned(),
            "--namespace".into(),
            self.namespace.clone(),
            "--log-format".into(),
            "json".into(),
        ]);
        args.extend(redis_client_args.iter().cloned());
        args.extend(self.gateway_args.iter().cloned());
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let log = self.logs.path().join(format!("gateway-{i}.log"));
        (args, log, Some(format!("http://127.0.0.1:{port}")))
    }

    /// Starts another worker. Returns its index.
    pub async fn add_worker(&mut self, extra: &[&str]) -> usize {
        let url = self.redis_url.clone();
        self.add_worker_via(&url, extra).await
    }

    /// Starts another worker in worker pool `pool` (`--pool`). Returns its index; its worker
    /// id (and so its lease-holder and consumer name) starts with [`Stack::worker_prefix`].
    pub async fn add_worker_in_pool(&mut self, pool: &str, extra: &[&str]) -> usize {
        let mut args = vec!["--pool", pool];
        args.extend_from_slice(extra);
        self.add_worker(&args).await
    }

    /// What the id of worker `i` starts with (`--worker-id w<i>-<random>`).
    pub fn worker_prefix(i: usize) -> String {
        format!("w{i}-")
    }

    /// Starts a worker that reaches Redis at `redis_url` (a [`crate::FaultProxy`] in front of
    /// the stack's server, say). Returns its index.
    pub async fn add_worker_via(&mut self, redis_url: &str, extra: &[&str]) -> usize {
        self.add_worker_binary(Binary::Worker, redis_url, extra).await
    }

    /// Starts another worker from `binary` (a worker built on the library, say). Returns its
    /// index.
    pub async fn add_worker_binary(&mut self, binary: Binary, redis_url: &str, extra: &[&str]) -> usize {
        let i = self.workers.len();
        let mut args = vec![
            "--redis-url".into(),
            redis_url.to_owned(),
            "--namespace".into(),
            self.namespace.clone(),
            "--worker-id".into(),
            format!("w{i}-{:04x}", rand::random::<u16>()),
            "--log-format".into(),
            "json".into(),
        ];
        // Through a fault proxy (a plain URL), the stack's TLS settings do not apply.
        if redis_url == self.redis_url {
            args.extend(self.redis_client_args.iter().cloned());
        }
        args.extend(self.worker_args.iter().cloned());
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let log = self.logs.path().join(format!("worker-{i}.log"));
        self.workers.push(Service::spawn(binary, args, self.env.clone(), log, None).await);
        i
    }

    /// A client of gateway `i`.
    pub fn client(&self, i: usize) -> McpClient {
        McpClient::new(self.gateways[i].url.as_deref().expect("a gateway"))
    }

    /// A client of gateway `i` that sends this bearer token.
    pub fn client_as(&self, i: usize, token: &str) -> McpClient {
        self.client(i).with_bearer(token)
    }

    /// A directory for files a test writes (key files, secrets); removed with the stack.
    pub fn scratch_dir(&self) -> &std::path::Path {
        self.logs.path()
    }

    /// The shared crate's store on this stack's Redis and namespace, for white-box checks.
    pub fn store(&self) -> Store {
        // A TLS stack's store speaks TLS too, as the binaries do.
        let endpoint = match &self.pki {
            None => Endpoint::new(self.redis_url.clone()),
            Some(pki) => Endpoint { tls: pki.tls_pem(), ..Endpoint::new(self.redis_url.clone()) },
        };
        Store::connect_lazy(&endpoint, &self.namespace, std::time::Duration::from_secs(2)).expect("store")
    }

    /// Waits until a worker holds task `id` (it runs, rather than waits in the queue).
    pub async fn wait_until_held(&self, id: &str, patience: std::time::Duration) {
        let store = self.store();
        let id = taskgate_shared::task::TaskId::parse(id).expect("a task id");
        let record = store.keys().task(&id).record;
        crate::eventually(patience, "a worker to run the task", || {
            let (store, record) = (store.clone(), record.clone());
            async move {
                let holder: Option<String> =
                    redis::cmd("HGET").arg(&record).arg("holder").query_async(&mut store.conn()).await.ok().flatten();
                holder.map(drop)
            }
        })
        .await;
    }
}
