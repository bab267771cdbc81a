//! The gateway's view of the tool catalogue that workers publish to Redis.
//!
//! Refreshed in the background, so `tools/list` costs no Redis round trip and returns the same
//! bytes on every call and every replica (sorted by name; JSON keys sorted). A `tools/call` for
//! a name not yet seen refreshes once (at most every [`MISS_REFRESH_GAP`]), so a freshly started
//! worker's tools are callable at once.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::Value;
use taskgate_shared::store::{Published, Store, StoreError};
use taskgate_shared::tools::offerings::Offering;
use taskgate_shared::tools::{Execution, ToolSpec};
use tokio::time::Instant;

const MISS_REFRESH_GAP: Duration = Duration::from_millis(250);

/// A callable tool: its spec and its compiled input schema.
pub(crate) struct Tool {
    pub(crate) spec: ToolSpec,
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
}

impl Default for Catalogue {
    fn default() -> Self {
        Self { tools: BTreeMap::new(), listing: Value::Array(Vec::new()), offerings: BTreeMap::new() }
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
    fn build(specs: BTreeMap<String, ToolSpec>, offerings: BTreeMap<String, Offering>) -> Self {
        let mut tools = BTreeMap::new();
        for (name, spec) in specs {
            match jsonschema::validator_for(&spec.descriptor.input_schema) {
                Ok(validator) if spec.descriptor.input_schema.get("type") == Some(&Value::from("object")) => {
                    tools.insert(name, Arc::new(Tool { spec, validator }));
                }
                _ => {
                    tracing::error!(tool = %name, "published tool has an invalid inputSchema; not listed")
                }
            }
        }
        let listing = tools.values().map(|t| listed(&t.spec)).collect::<Vec<_>>().into();
        Self { tools, listing, offerings }
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
    pub(crate) fn offering(&self, key: &str) -> Option<&Value> {
        self.offerings.get(key).map(Offering::descriptor)
    }

    /// Whether anything of `kind` is offered.
    pub(crate) fn offers(&self, kind: &str) -> bool {
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
}

/// The shared, refreshed catalogue.
pub(crate) struct CatalogueCache {
    store: Store,
    current: RwLock<Arc<Catalogue>>,
    /// When a miss last refreshed. An async lock held across that refresh, so misses that
    /// arrive while it runs wait for its result instead of answering from the stale catalogue
    /// ("unknown tool" to every concurrent first call of a fresh gateway).
    last_miss_refresh: tokio::sync::Mutex<Option<Instant>>,
}

impl CatalogueCache {
    pub(crate) fn new(store: Store) -> Self {
        Self {
            store,
            current: RwLock::new(Arc::new(Catalogue::default())),
            last_miss_refresh: tokio::sync::Mutex::new(None),
        }
    }

    pub(crate) fn current(&self) -> Arc<Catalogue> {
        self.current.read().map(|c| c.clone()).unwrap_or_default()
    }

    /// Re-reads Redis; rebuilds only when a spec changed.
    pub(crate) async fn refresh(&self) -> Result<(), StoreError> {
        let Published { tools: specs, offerings, bad } = self.store.read_catalogue().await?;
        for name in bad {
            tracing::error!(entry = %name, "unreadable entry in the catalogue");
        }
        let current = self.current();
        if current.specs().eq(specs.values()) && current.offerings == offerings {
            return Ok(());
        }
        let next = Arc::new(Catalogue::build(specs, offerings));
        *self.current.write().expect("lock poisoned: a holder panicked") = next;
        Ok(())
    }

    /// A tool by name, refreshing once on a miss.
    pub(crate) async fn lookup(&self, name: &str) -> Option<Arc<Tool>> {
        if let Some(tool) = self.current().get(name) {
            return Some(tool);
        }
        self.refresh_soon().await;
        self.current().get(name)
    }

    /// The catalogue, re-read first (as a miss is) when `found` does not hold for it: a prompt
    /// or resource a worker published since the last refresh is served at once.
    pub(crate) async fn fresh_unless(&self, found: impl Fn(&Catalogue) -> bool) -> Arc<Catalogue> {
        let current = self.current();
        if found(&current) {
            return current;
        }
        self.refresh_soon().await;
        self.current()
    }

    /// The catalogue to list. An empty one is most likely one read before any worker published
    /// (a fresh gateway), so it is re-read first, as a miss would be.
    pub(crate) async fn listing(&self) -> Arc<Catalogue> {
        let current = self.current();
        if !current.tools.is_empty() || !current.offerings.is_empty() {
            return current;
        }
        self.refresh_soon().await;
        self.current()
    }

    /// Refreshes now unless a miss-driven refresh ran within [`MISS_REFRESH_GAP`]; waits for
    /// one that is running.
    async fn refresh_soon(&self) {
        let mut last = self.last_miss_refresh.lock().await;
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
