//! Tool packs, selected with `--tools`.

mod conformance;
mod demo;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::tool::Tool;

/// The tools a worker serves, by name.
pub type Registry = BTreeMap<String, Arc<dyn Tool>>;

/// An unknown pack name.
#[derive(Debug, thiserror::Error)]
#[error("unknown tool pack {0:?} (available: demo, conformance)")]
pub struct UnknownPack(pub String);

/// Builds the registry of the named packs.
pub fn registry(packs: &[String]) -> Result<Registry, UnknownPack> {
    let mut tools: Registry = BTreeMap::new();
    for pack in packs {
        let pack_tools = match pack.trim() {
            "demo" => demo::tools(),
            "conformance" => conformance::tools(),
            other => return Err(UnknownPack(other.to_owned())),
        };
        for tool in pack_tools {
            tools.insert(tool.spec().descriptor.name.clone(), tool);
        }
    }
    Ok(tools)
}
