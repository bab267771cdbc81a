//! The tool catalogue: workers publish their tools' specs; gateways read them.
//!
//! One hash, tool name -> ToolSpec JSON. A spec is data, so publishing is idempotent; during a
//! rolling deploy that changes a tool, `tools/list` changes once, when the first new worker
//! publishes.

use std::collections::BTreeMap;

use super::{Store, StoreError};
use crate::tools::ToolSpec;

impl Store {
    /// Publishes these specs (one round trip).
    pub async fn publish_tools(&self, specs: &[ToolSpec]) -> Result<(), StoreError> {
        if specs.is_empty() {
            return Ok(());
        }
        let mut cmd = redis::cmd("HSET");
        cmd.arg(self.keys().tools());
        for spec in specs {
            let json = serde_json::to_string(spec).map_err(|e| StoreError::UnexpectedReply(e.to_string()))?;
            cmd.arg(&spec.descriptor.name).arg(json);
        }
        cmd.query_async::<()>(&mut self.conn()).await?;
        Ok(())
    }

    /// Reads every published spec, sorted by name. Entries that do not parse are skipped and
    /// reported by name, so one bad publisher cannot hide every tool.
    pub async fn read_tools(&self) -> Result<(BTreeMap<String, ToolSpec>, Vec<String>), StoreError> {
        let raw: BTreeMap<String, String> =
            redis::cmd("HGETALL").arg(self.keys().tools()).query_async(&mut self.conn()).await?;
        let mut specs = BTreeMap::new();
        let mut bad = Vec::new();
        for (name, json) in raw {
            match serde_json::from_str::<ToolSpec>(&json) {
                Ok(spec) if spec.descriptor.name == name => {
                    specs.insert(name, spec);
                }
                _ => bad.push(name),
            }
        }
        Ok((specs, bad))
    }
}
