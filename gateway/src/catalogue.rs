//! The gateway's view of the tool catalogue that workers publish to Redis.
//!
//! Refreshed in the background, so `tools/list` costs no Redis round trip and returns the same
//! bytes on every call and every replica (sorted by name; JSON keys sorted). A `tools/call` for
//! a name not yet seen refreshes once (at most every [`MISS_REFRESH_GAP`]), so a freshly started
//! worker's tools are callable at once.
//!
//! Prompts, resources and completion follow one rule, [`Catalogue::capabilities`], read through
//! one path, [`CatalogueCache::offerings`]: `server/discover` and every method that serves them
//! answer from the same catalogue, re-read the same way, so they never disagree.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::Value;
use taskgate_shared::store::{DEFAULT_POOL, Published, Store, StoreError};
use taskgate_shared::tools::offerings::Offering;
use taskgate_shared::tools::{Execution, ToolSpec};
use tokio::time::Instant;

const MISS_REFRESH_GAP: Duration = Duration::from_millis(250);

/// The optional capabilities, as what workers publish makes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Capabilities {
    /// A prompt is published.
    pub(crate) prompts: bool,
    /// A resource or a resource template is.
    pub(crate) resources: bool,
    /// A prompt or a template is (what completion completes arguments of).
    pub(crate) completions: bool,
}

impl Capabilities {
    fn all(self) -> bool {
        self.prompts && self.resources && self.completions
    }
}

/// A callable tool: its spec, its compiled input schema and the pool its tasks are queued on.
pub(crate) struct Tool {
    pub(crate) spec: ToolSpec,
    /// The worker pool whose queue a new task of this tool goes on (the catalogue's route).
    pub(crate) pool: String,
    validator: jsonschema::Validator,
}

impl Tool {
    /// The first reason the arguments do not satisfy the tool's `inputSchema`.
    pub(crate) fn check_arguments(&self, arguments: &Value) -> Result<(), String> {
        self.validator.validate(arguments).map_err(|err| {
            let path = err.instance_path().to_string();
            if path.is_empty() { err.to_string() } else { format!("{path}: {err}") }
        })
    }
}

/// One consistent catalogue.
pub(crate) struct Catalogue {
    tools: BTreeMap<String, Arc<Tool>>,
    /// The `tools` array of `tools/list`, built once per change.
    listing: Value,
    /// Prompts, resources and templates by catalogue key (`prompt/<name>`, …), in key order.
    offerings: BTreeMap<String, Offering>,
    /// The pool that serves each offering, by the same key.
    offering_pools: BTreeMap<String, String>,
    /// When this replica first held this content.
    since: Instant,
}

impl Default for Catalogue {
    fn default() -> Self {
        Self {
            tools: BTreeMap::new(),
            listing: Value::Array(Vec::new()),
            offerings: BTreeMap::new(),
            offering_pools: BTreeMap::new(),
            since: Instant::now(),
        }
    }
}

/// A tool as `tools/list` shows it: its descriptor, with how a call runs in its `_meta` (beside
/// whatever `_meta` the tool brought).
fn listed(spec: &ToolSpec) -> Value {
    let mut tool = serde_json::to_value(&spec.descriptor).unwrap_or(Value::Null);
    if let Some(tool) = tool.as_object_mut() {
        let meta = tool.entry("_meta").or_insert_with(|| Value::Object(Default::default()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(Execution::META_KEY.to_owned(), Value::from(spec.execution.label()));
        }
    }
    tool
}

impl Catalogue {
    fn build(
        specs: BTreeMap<String, ToolSpec>,
        mut routes: BTreeMap<String, String>,
        offerings: BTreeMap<String, Offering>,
        offering_pools: BTreeMap<String, String>,
    ) -> Self {
        let mut tools = BTreeMap::new();
        for (name, spec) in specs {
            let pool = routes.remove(&name).unwrap_or_else(|| DEFAULT_POOL.to_owned());
            match jsonschema::validator_for(&spec.descriptor.input_schema) {
                Ok(validator) if spec.descriptor.input_schema.get("type") == Some(&Value::from("object")) => {
                    tools.insert(name, Arc::new(Tool { spec, pool, validator }));
                }
                _ => {
                    tracing::error!(tool = %name, "published tool has an invalid inputSchema; not listed")
                }
            }
        }
        let listing = tools.values().map(|t| listed(&t.spec)).collect::<Vec<_>>().into();
        Self { tools, listing, offerings, offering_pools, since: Instant::now() }
    }

    /// What `server/discover` declares besides tools, and what the methods serve: the one rule
    /// both follow.
    pub(crate) fn capabilities(&self) -> Capabilities {
        let (prompts, templates) = (self.offers("prompt"), self.offers("template"));
        Capabilities { prompts, resources: templates || self.offers("resource"), completions: prompts || templates }
    }

    /// Whether no worker has published anything (as far as this replica has read).
    pub(crate) fn is_empty(&self) -> bool {
        self.tools.is_empty() && self.offerings.is_empty()
    }

    /// How long this replica has held this content.
    pub(crate) fn age(&self) -> Duration {
        self.since.elapsed()
    }

    /// The prompts, resources or templates (`kind`: the key prefix), in key order.
    pub(crate) fn offered(&self, kind: &str) -> impl Iterator<Item = &Value> {
        let prefix = format!("{kind}/");
        self.offerings
            .range(prefix.clone()..)
            .take_while(move |(k, _)| k.starts_with(&prefix))
            .map(|(_, o)| o.descriptor())
    }

    /// One prompt, resource or template by its catalogue key.
    /// The pool whose workers make the content of the offering under `key` (`prompt/<name>`,
    /// `resource/<uri>`, `template/<uriTemplate>`): the one that serves it, else `default`.
    pub(crate) fn offering_pool(&self, key: &str) -> &str {
        self.offering_pools.get(key).map_or(DEFAULT_POOL, String::as_str)
    }

    pub(crate) fn offering(&self, key: &str) -> Option<&Value> {
        self.offerings.get(key).map(Offering::descriptor)
    }

    /// Whether anything of `kind` is offered.
    fn offers(&self, kind: &str) -> bool {
        self.offered(kind).next().is_some()
    }

    pub(crate) fn get(&self, name: &str) -> Option<Arc<Tool>> {
        self.tools.get(name).cloned()
    }

    pub(crate) fn listing(&self) -> &Value {
        &self.listing
    }

    fn specs(&self) -> impl Iterator<Item = &ToolSpec> {
        self.tools.values().map(|t| &t.spec)
    }

    /// Whether these routes are the ones this catalogue holds (a tool moved to another pool
    /// changes no spec, but must rebuild).
    fn routes_are(&self, routes: &BTreeMap<String, String>) -> bool {
        self.tools.len() == routes.len()
            && self.tools.iter().all(|(name, tool)| routes.get(name).is_some_and(|pool| *pool == tool.pool))
    }
}

/// The shared, refreshed catalogue.
pub(crate) struct CatalogueCache {
    store: Store,
    current: RwLock<Arc<Catalogue>>,
    /// When a miss of a tool last refreshed. An async lock held across that refresh, so misses
    /// that arrive while it runs wait for its result instead of answering from the stale
    /// catalogue ("unknown tool" to every concurrent first call of a fresh gateway).
    last_miss_refresh: Gate,
    /// The same for discovery and the prompt, resource and completion methods. Their own, so
    /// that a discovery does not use up the refresh that a `tools/call` right after it needs,
    /// and one for them all, so that they refresh alike and agree.
    last_offerings_refresh: Gate,
}

type Gate = tokio::sync::Mutex<Option<Instant>>;

impl CatalogueCache {
    pub(crate) fn new(store: Store) -> Self {
        Self {
            store,
            current: RwLock::new(Arc::new(Catalogue::default())),
            last_miss_refresh: Gate::default(),
            last_offerings_refresh: Gate::default(),
        }
    }

    pub(crate) fn current(&self) -> Arc<Catalogue> {
        self.current.read().map(|c| c.clone()).unwrap_or_default()
    }

    /// Re-reads Redis; rebuilds only when a spec changed.
    pub(crate) async fn refresh(&self) -> Result<(), StoreError> {
        let Published { tools: specs, routes, offerings, offering_routes, bad } = self.store.read_catalogue().await?;
        for name in bad {
            tracing::error!(entry = %name, "unreadable entry in the catalogue");
        }
        let current = self.current();
        if current.specs().eq(specs.values())
            && current.offerings == offerings
            && current.routes_are(&routes)
            && current.offering_pools == offering_routes
        {
            return Ok(());
        }
        let next = Arc::new(Catalogue::build(specs, routes, offerings, offering_routes));
        *self.current.write().expect("lock poisoned: a holder panicked") = next;
        Ok(())
    }

    /// A tool by name, refreshing once on a miss.
    pub(crate) async fn lookup(&self, name: &str) -> Option<Arc<Tool>> {
        if let Some(tool) = self.current().get(name) {
            return Some(tool);
        }
        self.refresh_soon(&self.last_miss_refresh).await;
        self.current().get(name)
    }

    /// The catalogue for discovery and the prompt, resource and completion methods, re-read
    /// first (as a miss is) when `found` does not hold for it: a prompt or resource a worker
    /// published since the last refresh is served at once, and discovery, which asks for every
    /// capability, declares it at once. Whatever a method then serves, a discovery at the same
    /// moment declares, and the other way round: both read the same catalogue, refreshed
    /// under the same gate, and judge it by [`Catalogue::capabilities`].
    pub(crate) async fn offerings(&self, found: impl Fn(&Catalogue) -> bool) -> Arc<Catalogue> {
        let current = self.current();
        if found(&current) {
            return current;
        }
        self.refresh_soon(&self.last_offerings_refresh).await;
        self.current()
    }

    /// The catalogue for `server/discover`: re-read unless it already offers every optional
    /// capability (a deployment without prompts re-reads at most once per
    /// [`MISS_REFRESH_GAP`], as its `prompts/list` does).
    pub(crate) async fn for_discovery(&self) -> Arc<Catalogue> {
        self.offerings(|c| c.capabilities().all()).await
    }

    /// The catalogue to list. An empty one is most likely one read before any worker published
    /// (a fresh gateway), so it is re-read first, as a miss would be.
    pub(crate) async fn listing(&self) -> Arc<Catalogue> {
        let current = self.current();
        if !current.tools.is_empty() || !current.offerings.is_empty() {
            return current;
        }
        self.refresh_soon(&self.last_miss_refresh).await;
        self.current()
    }

    /// Refreshes now unless a miss-driven refresh under `gate` ran within
    /// [`MISS_REFRESH_GAP`]; waits for one that is running.
    async fn refresh_soon(&self, gate: &Gate) {
        let mut last = gate.lock().await;
        if last.is_some_and(|t| t.elapsed() < MISS_REFRESH_GAP) {
            return;
        }
        *last = Some(Instant::now());
        if let Err(err) = self.refresh().await {
            tracing::warn!(error = %err, "catalogue refresh failed");
        }
    }

    /// Refreshes every `period` until the process ends.
    pub(crate) async fn refresh_forever(self: Arc<Self>, period: Duration) {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(err) = self.refresh().await {
                tracing::warn!(error = %err, "catalogue refresh failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_internal_marker_of_a_tool_is_read_from_the_catalogue_but_never_listed() {
        let mut spec =
            ToolSpec::new("fx__a", "A", serde_json::json!({ "type": "object" }), Execution::TaskOptional, 1, 1);
        spec.subject_token = true;
        let published = serde_json::to_string(&spec).unwrap();
        assert!(published.contains("\"subjectToken\":true"), "{published}");
        let read: ToolSpec = serde_json::from_str(&published).unwrap();
        assert!(read.subject_token);
        let listed = listed(&read).to_string();
        assert!(!listed.contains("subjectToken") && !listed.contains("subject"), "{listed}");
        // An entry without it (any other tool, or an older worker's) is unmarked.
        let plain = serde_json::to_string(&ToolSpec { subject_token: false, ..read }).unwrap();
        assert!(!plain.contains("subjectToken"), "{plain}");
        assert!(!serde_json::from_str::<ToolSpec>(&plain).unwrap().subject_token);
    }
}
