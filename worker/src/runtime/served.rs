//! What this worker serves: the built-in packs' tools and the upstream servers' tools, rebuilt
//! when an upstream's list changes, and published into the catalogue as a heartbeat.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use taskgate_shared::tools::ToolSpec;
use taskgate_shared::tools::offerings::Offering;

use crate::provide::{self, Provider};

use crate::packs::Registry;
use crate::tool::Tool;
use crate::upstream::Upstreams;

/// One consistent set of tools and the specs published for them.
pub(crate) struct Current {
    pub(crate) tools: Registry,
    pub(crate) specs: Vec<ToolSpec>,
}

pub(crate) struct Served {
    builtins: Registry,
    /// The built-ins' specs with the command line's overrides applied.
    builtin_specs: BTreeMap<String, ToolSpec>,
    /// Who makes prompts, resources and completions (built-ins, then upstream servers).
    providers: Vec<Arc<dyn Provider>>,
    pub(crate) upstreams: Option<Upstreams>,
    current: RwLock<Arc<Current>>,
}

impl Served {
    pub(crate) fn new(
        builtins: Registry,
        builtin_specs: Vec<ToolSpec>,
        providers: Vec<Arc<dyn Provider>>,
        upstreams: Option<Upstreams>,
    ) -> Self {
        let builtin_specs = builtin_specs.into_iter().map(|s| (s.descriptor.name.clone(), s)).collect();
        let served = Self {
            builtins,
            builtin_specs,
            providers,
            upstreams,
            current: RwLock::new(Arc::new(Current { tools: Registry::new(), specs: Vec::new() })),
        };
        served.rebuild();
        served
    }

    /// Takes the upstreams' current listings; returns the names that collided (the first
    /// holder keeps a name: built-ins, then servers in file order).
    pub(crate) fn rebuild(&self) -> Vec<String> {
        let mut tools = self.builtins.clone();
        let mut specs = self.builtin_specs.clone();
        let mut collisions = Vec::new();
        for (name, tool) in self.upstreams.iter().flat_map(Upstreams::tools) {
            if tools.contains_key(&name) {
                tracing::error!(tool = %name, "two sources publish this tool name; only the first is served");
                collisions.push(name);
                continue;
            }
            specs.insert(name.clone(), tool.spec());
            tools.insert(name, tool);
        }
        let current = Arc::new(Current { tools, specs: specs.into_values().collect() });
        *self.current.write().expect("lock poisoned: a holder panicked") = current;
        collisions
    }

    pub(crate) fn current(&self) -> Arc<Current> {
        self.current.read().map(|c| c.clone()).unwrap_or_else(|e| e.into_inner().clone())
    }

    /// The hidden tasks this worker can run (none without providers).
    pub(crate) fn hidden(&self) -> &'static [&'static str] {
        use taskgate_shared::tools::offerings::{COMPLETE, PROMPTS_GET, RESOURCES_READ};
        if self.providers.is_empty() { &[] } else { &[PROMPTS_GET, RESOURCES_READ, COMPLETE] }
    }

    /// The prompts, resources and templates to publish, as the providers list them now.
    pub(crate) fn offerings(&self) -> Vec<Offering> {
        provide::offerings(&self.providers)
    }

    pub(crate) fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.current().tools.get(name).cloned()
    }

    /// The digest of the upstream configuration ("none" without one), so workers of a namespace
    /// can see that they serve different things.
    pub(crate) fn digest(&self) -> &str {
        self.upstreams.as_ref().map_or("none", Upstreams::digest)
    }
}
