//! One upstream server: its supervised connections (stdio children or one Streamable HTTP
//! client), and the tools it lists.
//!
//! Each connection is owned by a supervisor task that connects, lists the tools, waits for the
//! connection to end, and connects again with backoff. Callers only ever borrow the current
//! peer, so a crash is seen as "down" (and reported as such) rather than as a hang.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rmcp::model::{PaginatedRequestParams, ProtocolVersion, Tool};
use rmcp::service::{
    ClientInitializeError, ClientLifecycleMode, ClientServiceExt as _, Peer, RoleClient, RunningService, ServiceError,
};
use rmcp::transport::TokioChildProcess;
use rmcp::transport::streamable_http_client::{StreamableHttpClientTransport, StreamableHttpClientTransportConfig};
use taskgate_shared::backoff::Backoff;
use tokio::sync::{Notify, Semaphore, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::bounds::MAX_LIST_PAGES;
use super::config::{Transport, UpstreamConfig};
use super::handler::Bridge;
use super::http::{HttpClient, error_chain, without_urls};
use super::identity::Live;
use crate::metrics::METRICS;

/// The environment a stdio child gets from the worker besides what its entry configures: enough
/// to find programs and a home, and nothing of the worker's own (no Redis URL, no tokens).
/// The shortest time between two listings of a server (see [`keep_listing`]).
const RELIST_EVERY: Duration = Duration::from_secs(1);

const PASSED_ENV: &[&str] = &["PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LC_ALL", "TMPDIR", "TZ"];

/// State of one connection.
#[derive(Clone)]
pub(super) enum Link {
    Up { peer: Peer<RoleClient>, bridge: Bridge },
    Down { reason: String },
}

/// A configured upstream server and its live connections.
pub(crate) struct Upstream {
    pub(super) config: Arc<UpstreamConfig>,
    links: Vec<watch::Receiver<Link>>,
    /// Asks the supervisor of connection `i` to kill it (it stopped answering).
    kills: Vec<Arc<Notify>>,
    next: AtomicUsize,
    pub(super) in_flight: Semaphore,
    /// The server's tools as last listed (the upstream's own names).
    pub(super) tools: watch::Receiver<Option<Arc<Vec<Tool>>>>,
    /// The server's prompts, resources and templates as last listed (its own names and URIs).
    pub(super) offered: watch::Receiver<Arc<Offered>>,
    /// The caller's identity this instance runs with (per-identity servers), or none: the
    /// worker's own, or the listing connection of a per-identity server.
    pub(super) identity: Option<Arc<Live>>,
    /// The supervisors: done once every connection has ended after the stop (a child has
    /// exited, or been killed, and been reaped).
    supervisors: TaskTracker,
}

/// What a server lists besides tools, as its wire descriptors.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Offered {
    pub(super) prompts: Vec<serde_json::Value>,
    pub(super) resources: Vec<serde_json::Value>,
    pub(super) templates: Vec<serde_json::Value>,
}

impl Upstream {
    /// Starts the supervisors; `changed` is told whenever the tool list changes.
    pub(crate) fn start(config: UpstreamConfig, changed: Arc<Notify>, shutdown: CancellationToken) -> Arc<Self> {
        Self::start_with(Arc::new(config), Some(changed), None, shutdown)
    }

    /// One per-identity instance: a single connection with `identity`'s values, which does not
    /// list (the server's listing connection does).
    pub(super) fn start_instance(
        config: Arc<UpstreamConfig>,
        identity: Arc<Live>,
        stop: CancellationToken,
    ) -> Arc<Self> {
        Self::start_with(config, None, Some(identity), stop)
    }

    fn start_with(
        config: Arc<UpstreamConfig>,
        changed: Option<Arc<Notify>>,
        identity: Option<Arc<Live>>,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let (tools_tx, tools) = watch::channel(None);
        let tools_tx = Arc::new(tools_tx);
        let (offered_tx, offered) = watch::channel(Arc::new(Offered::default()));
        let offered_tx = Arc::new(offered_tx);
        let mut links = Vec::new();
        let mut kills = Vec::new();
        let supervisors = TaskTracker::new();
        for index in 0..config.instances {
            let (tx, rx) = watch::channel(Link::Down { reason: "not connected yet".into() });
            let kill = Arc::new(Notify::new());
            // Every connection lists (they serve the same tools); only the first publishes,
            // so N children cost one catalogue update.
            let lists = changed.clone().filter(|_| index == 0).map(|changed| Listing {
                tools: tools_tx.clone(),
                offered: offered_tx.clone(),
                changed,
                wants: (config.prompts, config.resources),
            });
            let link = Supervised { config: config.clone(), index, identity: identity.clone() };
            supervisors.spawn(supervise(link, tx, kill.clone(), lists, shutdown.clone()));
            links.push(rx);
            kills.push(kill);
        }
        Arc::new(Self {
            in_flight: Semaphore::new(config.max_in_flight as usize),
            config,
            links,
            kills,
            next: AtomicUsize::new(0),
            tools,
            offered,
            identity,
            supervisors: {
                supervisors.close();
                supervisors
            },
        })
    }

    /// Once the stop token given at start has been cancelled: waits until every connection
    /// has ended (a child has exited and been reaped).
    pub(super) async fn stopped(&self) {
        self.supervisors.wait().await;
    }

    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    /// Connections up, of those configured.
    pub(crate) fn links_up(&self) -> (usize, usize) {
        let up = self.links.iter().filter(|link| matches!(*link.borrow(), Link::Up { .. })).count();
        (up, self.links.len())
    }

    pub(super) fn is_http(&self) -> bool {
        matches!(self.config.transport, Transport::Http { .. })
    }

    /// A live connection, round robin, waiting up to the connect timeout for one to come up.
    pub(super) async fn connection(&self) -> Result<(usize, Peer<RoleClient>, Bridge), String> {
        let deadline = tokio::time::Instant::now() + self.config.connect_timeout;
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        // Own receivers, marked seen on every look, so waiting for a change never spins on one
        // that was already looked at.
        let mut links = self.links.clone();
        loop {
            let mut last = String::new();
            for offset in 0..links.len() {
                let index = (start + offset) % links.len();
                match &*links[index].borrow_and_update() {
                    Link::Up { peer, bridge } if !peer.is_transport_closed() => {
                        return Ok((index, peer.clone(), bridge.clone()));
                    }
                    Link::Up { .. } => last = "the connection closed".into(),
                    Link::Down { reason } => last.clone_from(reason),
                }
            }
            let changed = futures::future::select_all(links.iter_mut().map(|rx| Box::pin(rx.changed())));
            match tokio::time::timeout_at(deadline, changed).await {
                Err(_) => {
                    return Err(format!(
                        "upstream server {:?} is unavailable ({last}); waited {} ms for it",
                        self.config.name,
                        self.config.connect_timeout.as_millis()
                    ));
                }
                // The supervisor is gone: the worker is shutting down.
                Ok((Err(_), ..)) => return Err(format!("upstream server {:?} is shutting down", self.config.name)),
                Ok(_) => {}
            }
        }
    }

    /// Kills connection `index` so its supervisor starts it again.
    pub(super) fn kill(&self, index: usize) {
        if let Some(kill) = self.kills.get(index) {
            kill.notify_one();
        }
    }

    /// Waits until the first listing, or `timeout`.
    pub(crate) async fn listed(&self, timeout: Duration) -> bool {
        let mut tools = self.tools.clone();
        tokio::time::timeout(timeout, tools.wait_for(Option::is_some)).await.is_ok_and(|r| r.is_ok())
    }
}

/// Where the connection that lists publishes what it listed, and whom it tells.
#[derive(Clone)]
struct Listing {
    tools: Arc<watch::Sender<Option<Arc<Vec<Tool>>>>>,
    offered: Arc<watch::Sender<Arc<Offered>>>,
    changed: Arc<Notify>,
    /// Whether the configuration serves the server's (prompts, resources).
    wants: (bool, bool),
}

type Lists = Option<Listing>;

/// What one supervised connection is: its server, its index, and whose identity it carries.
struct Supervised {
    config: Arc<UpstreamConfig>,
    index: u16,
    identity: Option<Arc<Live>>,
}

async fn supervise(
    supervised: Supervised,
    link: watch::Sender<Link>,
    kill: Arc<Notify>,
    lists: Lists,
    shutdown: CancellationToken,
) {
    let Supervised { config, index, identity } = supervised;
    let name: Arc<str> = config.name.as_str().into();
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(30));
    let mut first = true;
    let mut legacy = false;
    loop {
        let list_changed = Arc::new(Notify::new());
        let bridge = Bridge::new(name.clone(), list_changed.clone(), config.elicitation);
        let started = Instant::now();
        let outcome = tokio::select! {
            connected = connect(&config, index, identity.as_ref(), bridge.clone(), &mut legacy) => connected,
            () = shutdown.cancelled() => return,
        };
        let reason = match outcome {
            Ok(running) => {
                let version =
                    running.peer().peer_info().map(|info| info.protocol_version.to_string()).unwrap_or_default();
                tracing::info!(upstream = %name, instance = index, protocol = %version, "upstream connected");
                if !first {
                    METRICS.upstream_restarts.with_label_values(&[&name]).inc();
                }
                first = false;
                let peer = running.peer().clone();
                link.send_replace(Link::Up { peer: peer.clone(), bridge });
                let lister =
                    lists.clone().map(|listing| tokio::spawn(keep_listing(name.clone(), peer, list_changed, listing)));
                let stop = running.cancellation_token();
                let waiting = running.waiting();
                tokio::pin!(waiting);
                let reason = tokio::select! {
                    quit = &mut waiting => without_urls(&format!("the connection ended ({quit:?})")),
                    () = kill.notified() => {
                        tracing::warn!(upstream = %name, instance = index, "upstream stopped answering: restarting it");
                        stop.cancel();
                        let _ = waiting.await;
                        "it stopped answering and was restarted".to_owned()
                    }
                    () = shutdown.cancelled() => {
                        stop.cancel();
                        let _ = waiting.await;
                        return;
                    }
                };
                if let Some(lister) = lister {
                    lister.abort();
                }
                reason
            }
            Err(err) => err,
        };
        // A connection that held for a while starts the backoff over.
        if started.elapsed() > Duration::from_secs(30) {
            backoff.reset();
        }
        let retry_in = backoff.next_delay();
        tracing::warn!(upstream = %name, instance = index, reason = %reason, retry_in = ?retry_in, "upstream down");
        link.send_replace(Link::Down { reason: reason.clone() });
        tokio::select! {
            () = tokio::time::sleep(retry_in) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// Lists the tools now and again after `list_changed`, at most once per [`RELIST_EVERY`]: a
/// storm of changes costs one listing (and one catalogue update) a second, and a change that
/// arrives during a listing or the wait is kept for the next (a `Notify` holds one permit), so
/// the last one is never lost.
async fn keep_listing(name: Arc<str>, peer: Peer<RoleClient>, list_changed: Arc<Notify>, listing: Listing) {
    let Listing { tools, offered, changed, wants } = listing;
    let mut last: Option<tokio::time::Instant> = None;
    loop {
        if let Some(last) = last {
            list_changed.notified().await;
            tokio::time::sleep_until(last + RELIST_EVERY).await;
            METRICS.upstream_list_refreshes.with_label_values(&[&name]).inc();
        }
        last = Some(tokio::time::Instant::now());
        let peer = &peer;
        let listed = pages(&name, "tools", |params| async move {
            peer.list_tools(params).await.map(|page| (page.tools, page.next_cursor))
        });
        match listed.await {
            Ok(listed) => {
                tracing::info!(upstream = %name, tools = listed.len(), "upstream tools listed");
                let listed = Arc::new(listed);
                let same = tools.borrow().as_deref() == Some(&*listed);
                if !same {
                    tools.send_replace(Some(listed));
                    changed.notify_one();
                }
            }
            Err(err) => tracing::warn!(upstream = %name, error = %err, "could not list the upstream's tools"),
        }
        let previous = offered.borrow().clone();
        let listed = Arc::new(list_offered(&name, peer, wants, &previous).await);
        if **offered.borrow() != *listed {
            offered.send_replace(listed);
            changed.notify_one();
        }
    }
}

/// Every page of a listing, up to [`MAX_LIST_PAGES`]; past that the pages read are kept and the
/// cut is logged (once per listing).
async fn pages<T, F, Fut>(name: &str, kind: &str, mut page: F) -> Result<Vec<T>, ServiceError>
where
    F: FnMut(Option<PaginatedRequestParams>) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, Option<String>), ServiceError>>,
{
    let mut items = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_LIST_PAGES {
        let (listed, next) = page(Some(PaginatedRequestParams::default().with_cursor(cursor))).await?;
        items.extend(listed);
        match next {
            Some(next) => cursor = Some(next),
            None => return Ok(items),
        }
    }
    tracing::warn!(
        upstream = name,
        kind,
        pages = MAX_LIST_PAGES,
        "the upstream's listing goes on past the page limit; keeping the pages read"
    );
    Ok(items)
}

fn json<T: serde::Serialize>(items: &[T]) -> Vec<serde_json::Value> {
    items.iter().filter_map(|i| serde_json::to_value(i).ok()).collect()
}

/// The prompts, resources and templates of a server that advertises them and whose
/// configuration serves them (`wants`). A list that fails keeps what was listed before, so a
/// passing error does not take everything of a kind out of the catalogue.
async fn list_offered(name: &str, peer: &Peer<RoleClient>, wants: (bool, bool), previous: &Offered) -> Offered {
    let capabilities = peer.peer_info().map(|info| info.capabilities.clone()).unwrap_or_default();
    let mut offered = Offered {
        prompts: previous.prompts.clone(),
        resources: previous.resources.clone(),
        templates: previous.templates.clone(),
    };
    if !(wants.0 && capabilities.prompts.is_some()) {
        offered.prompts.clear();
    }
    if !(wants.1 && capabilities.resources.is_some()) {
        offered.resources.clear();
        offered.templates.clear();
    }
    if wants.0 && capabilities.prompts.is_some() {
        match pages(name, "prompts", |p| async move { peer.list_prompts(p).await.map(|l| (l.prompts, l.next_cursor)) })
            .await
        {
            Ok(prompts) => offered.prompts = json(&prompts),
            Err(err) => tracing::warn!(upstream = %name, error = %err, "could not list the upstream's prompts"),
        }
    }
    if wants.1 && capabilities.resources.is_some() {
        match pages(
            name,
            "resources",
            |p| async move { peer.list_resources(p).await.map(|l| (l.resources, l.next_cursor)) },
        )
        .await
        {
            Ok(resources) => offered.resources = json(&resources),
            Err(err) => tracing::warn!(upstream = %name, error = %err, "could not list the upstream's resources"),
        }
        match pages(name, "resource templates", |p| async move {
            peer.list_resource_templates(p).await.map(|l| (l.resource_templates, l.next_cursor))
        })
        .await
        {
            Ok(templates) => offered.templates = json(&templates),
            Err(err) => tracing::warn!(upstream = %name, error = %err, "could not list the upstream's templates"),
        }
    }
    offered
}

/// Connects with `server/discover` (2026-07-28) unless the server is known to be legacy, and
/// falls back to `initialize` when the server names only older revisions. `legacy` remembers
/// that across reconnections.
async fn connect(
    config: &UpstreamConfig,
    index: u16,
    identity: Option<&Arc<Live>>,
    bridge: Bridge,
    legacy: &mut bool,
) -> Result<RunningService<RoleClient, Bridge>, String> {
    let modern = ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    };
    if !*legacy {
        match open(config, index, identity, bridge.clone(), modern).await {
            Err(Opened::OlderOnly) => *legacy = true,
            other => return other.map_err(Opened::into_message),
        }
    }
    open(config, index, identity, bridge, ClientLifecycleMode::Initialize).await.map_err(Opened::into_message)
}

enum Opened {
    /// The server answered discovery with only revisions that still use `initialize`.
    OlderOnly,
    Failed(String),
}

impl Opened {
    fn into_message(self) -> String {
        match self {
            Self::OlderOnly => "the server supports no revision this worker speaks".into(),
            Self::Failed(message) => message,
        }
    }
}

fn handshake_failed(err: ClientInitializeError) -> Opened {
    match err {
        ClientInitializeError::NoCompatibleProtocolVersion { server_supported, .. }
            if server_supported.iter().any(|v| *v <= ProtocolVersion::V_2025_11_25) =>
        {
            Opened::OlderOnly
        }
        // Its transport error is no `source`: the cause is taken from the field.
        ClientInitializeError::TransportError { error, context } => {
            Opened::Failed(format!("handshake failed ({context}): {}", error_chain(&error)))
        }
        other => Opened::Failed(format!("handshake failed: {}", error_chain(&other))),
    }
}

async fn open(
    config: &UpstreamConfig,
    index: u16,
    identity: Option<&Arc<Live>>,
    bridge: Bridge,
    lifecycle: ClientLifecycleMode,
) -> Result<RunningService<RoleClient, Bridge>, Opened> {
    let connecting = async {
        // The caller's values, for an instance of theirs; the listing connection's otherwise.
        let credential = match identity {
            Some(identity) => Some(identity.current().await.map_err(|e| Opened::Failed(e.to_string()))?),
            None => None,
        };
        let render = |what: &str, value: &super::config::Secret| {
            value.render(credential.as_ref()).map_err(|e| Opened::Failed(format!("{what}: {e}")))
        };
        match &config.transport {
            Transport::Stdio { command, args, env, cwd } => {
                let mut cmd = tokio::process::Command::new(command);
                for (i, arg) in args.iter().enumerate() {
                    if let Some(arg) = render(&format!("args[{i}]"), arg)? {
                        cmd.arg(arg);
                    }
                }
                cmd.env_clear().kill_on_drop(true);
                for var in PASSED_ENV {
                    if let Ok(value) = std::env::var(var) {
                        cmd.env(var, value);
                    }
                }
                for (key, value) in env {
                    if let Some(value) = render(&format!("env {key}"), value)? {
                        cmd.env(key, value);
                    }
                }
                if let Some(cwd) = cwd
                    && let Some(cwd) = render("cwd", cwd)?
                {
                    cmd.current_dir(cwd);
                }
                let (child, stderr) = TokioChildProcess::builder(cmd)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|err| Opened::Failed(format!("cannot start {command:?}: {err}")))?;
                if let Some(stderr) = stderr {
                    tokio::spawn(super::stderr::forward(config.name.clone(), index, stderr));
                }
                bridge.serve_with_lifecycle(child, lifecycle).await.map_err(handshake_failed)
            }
            Transport::Http { url, headers, read_timeout } => {
                // Neither the URL nor its resolution error is ever repeated: it may carry a
                // credential.
                let url = render("url", url)?.ok_or_else(|| Opened::Failed("url: no catalogue value".into()))?;
                super::config::check_url(&url).map_err(|e| Opened::Failed(format!("url: {e}")))?;
                let mut custom = std::collections::HashMap::new();
                for (name, value) in headers {
                    // A caller's header is set on each request (its token may be refreshed
                    // while the session lasts); the rest once.
                    if identity.is_some() && value.is_credential() {
                        continue;
                    }
                    let Some(value) = render(&format!("header {name}"), value)? else { continue };
                    let (name, value) = super::http::header(name, value).map_err(Opened::Failed)?;
                    custom.insert(name, value);
                }
                let per_request = identity.map(|identity| {
                    let templates = headers.iter().filter(|(_, v)| v.is_credential());
                    (identity.clone(), templates.map(|(k, v)| (k.clone(), v.clone())).collect())
                });
                let client = HttpClient::new(config.connect_timeout, *read_timeout, per_request)
                    .map_err(|err| Opened::Failed(format!("cannot make its HTTP client: {}", error_chain(&err))))?;
                let transport = StreamableHttpClientTransport::with_client(
                    client,
                    StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom),
                );
                bridge.serve_with_lifecycle(transport, lifecycle).await.map_err(handshake_failed)
            }
        }
    };
    tokio::time::timeout(config.connect_timeout, connecting).await.unwrap_or_else(|_| {
        Err(Opened::Failed(format!("no handshake within {} ms", config.connect_timeout.as_millis())))
    })
}
