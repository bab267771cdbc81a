//! Tool packs, selected with `--tools`.

mod conformance;
mod demo;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::provide::Provider;
use crate::tool::Tool;

/// The tools a worker serves, by name.
pub type Registry = BTreeMap<String, Arc<dyn Tool>>;

/// An unknown pack name.
#[derive(Debug, thiserror::Error)]
#[error("unknown tool pack {0:?} (available: demo, conformance)")]
pub struct UnknownPack(pub String);

/// What packs may need from the worker's configuration.
#[derive(Debug, Clone, Default)]
pub struct PackOptions {
    /// Where the demo `ledger` tool appends its lines (it refuses to run without one).
    pub ledger_dir: Option<std::path::PathBuf>,
}

/// Builds the registry of the named packs.
pub fn registry(packs: &[String], options: &PackOptions) -> Result<Registry, UnknownPack> {
    let mut tools: Registry = BTreeMap::new();
    for pack in packs {
        let pack_tools = match pack.trim() {
            "demo" => demo::tools(options),
            "conformance" => conformance::tools(),
            "" => continue,
            other => return Err(UnknownPack(other.to_owned())),
        };
        for tool in pack_tools {
            tools.insert(tool.spec().descriptor.name.clone(), tool);
        }
    }
    Ok(tools)
}

/// The prompts, resources and completions of the named packs (only `conformance` has any).
pub fn providers(packs: &[String]) -> Vec<Arc<dyn Provider>> {
    packs.iter().filter(|p| p.trim() == "conformance").map(|_| conformance::provider()).take(1).collect()
}
