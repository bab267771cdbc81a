//! The tool catalogue: workers publish their tools' specs as a heartbeat; gateways read the
//! specs some live worker still serves.
//!
//! Each worker belongs to one pool; the catalogue also keeps, per tool, the pool its new tasks
//! are queued on (the route: the live pool that most recently started serving it; see
//! `scripts/publish_tools.lua` and docs/design.md, "Worker pools").
//!
//! A spec is data, so publishing is idempotent; during a rolling deploy that changes a tool,
//! `tools/list` changes once, when the first new worker publishes. Every entry carries an expiry
//! that each heartbeat pushes out, so a tool leaves the listing once no live worker serves it.

use std::collections::BTreeMap;
use std::time::Duration;

use super::scripts::{publish_tools, read_tools};
use super::{Store, StoreError};
use crate::tools::ToolSpec;
use crate::tools::offerings::Offering;

/// Everything live workers publish.
#[derive(Debug, Default)]
pub struct Published {
    /// Tool specs by name.
    pub tools: BTreeMap<String, ToolSpec>,
    /// The pool each tool's new tasks are queued on, by tool name.
    pub routes: BTreeMap<String, String>,
    /// The pool that serves each prompt, resource and template, by catalogue key: where the
    /// hidden tasks that make their content are queued.
    pub offering_routes: BTreeMap<String, String>,
    /// Prompts, resources and templates by catalogue key.
    pub offerings: BTreeMap<String, Offering>,
    /// Entries that did not parse (or whose key did not match), by name.
    pub bad: Vec<String>,
}

impl Store {
    /// Publishes these specs, offerings and hidden task names (see `tools::offerings`), live for
    /// `ttl`, with this worker's configuration digest (empty: none), its status (`worker`: its
    /// id and status JSON, for the operator console) and its pool, and removes specs and
    /// workers no heartbeat renewed. Returns the digests of every live worker (one round trip).
    #[allow(clippy::too_many_arguments)]
    pub async fn publish_tools(
        &self,
        specs: &[ToolSpec],
        offerings: &[Offering],
        hidden: &[&str],
        digest: &str,
        worker: (&str, &str),
        pool: &str,
        ttl: Duration,
    ) -> Result<Vec<String>, StoreError> {
        let mut entries = Vec::with_capacity(specs.len() + offerings.len() + hidden.len());
        for spec in specs {
            let json = serde_json::to_string(spec).map_err(|e| StoreError::UnexpectedReply(e.to_string()))?;
            entries.push((spec.descriptor.name.as_str(), json));
        }
        let keyed: Vec<(String, &Offering)> =
            offerings.iter().filter_map(|offering| Some((offering.key()?, offering))).collect();
        for (key, offering) in &keyed {
            let json = serde_json::to_string(offering).map_err(|e| StoreError::UnexpectedReply(e.to_string()))?;
            entries.push((key.as_str(), json));
        }
        // Live without a spec: never listed, but a worker that claims one it cannot run learns
        // from this that another can, and hands it back.
        entries.extend(hidden.iter().map(|name| (*name, String::new())));
        let args = publish_tools::Args {
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1),
            digest,
            worker: worker.0,
            status: worker.1,
            pool,
            entries: &entries,
        };
        publish_tools::call(&mut self.conn(), &self.keys().catalogue(), args).await
    }

    /// The live workers' statuses as they last published them, by worker id, with when each
    /// runs out (ms).
    pub async fn live_workers(&self) -> Result<Vec<(String, serde_json::Value, i64)>, StoreError> {
        let keys = self.keys().catalogue();
        let now = i64::try_from(crate::task::now_ms()).unwrap_or(i64::MAX);
        let mut pipe = redis::pipe();
        pipe.cmd("ZRANGEBYSCORE").arg(&keys.workers_live).arg(now).arg("+inf").arg("WITHSCORES");
        pipe.cmd("HGETALL").arg(&keys.workers);
        let (live, statuses): (Vec<(String, i64)>, std::collections::HashMap<String, String>) =
            pipe.query_async(&mut self.conn()).await?;
        Ok(live
            .into_iter()
            .map(|(id, expires)| {
                let status = statuses.get(&id).and_then(|s| serde_json::from_str(s).ok()).unwrap_or_default();
                (id, status, expires)
            })
            .collect())
    }

    /// Every pool a worker has sent a heartbeat for, with when the last one came (ms), its live
    /// workers gone or not: the pools the console lists. Names that are not pool names (the
    /// hash is written by workers only) are left out.
    pub async fn known_pools(&self) -> Result<Vec<(String, i64)>, StoreError> {
        let pools: Vec<(String, i64)> =
            redis::cmd("HGETALL").arg(self.keys().catalogue().pools).query_async(&mut self.conn()).await?;
        Ok(pools.into_iter().filter(|(name, _)| super::is_pool_name(name)).collect())
    }

    /// Whether some live worker of `pool` serves `tool` (its catalogue entry has not run out
    /// by this host's clock; the TTL dwarfs any sane skew). A tool no pool has a route for was
    /// published only by workers from before pools, which were all `default` ones.
    pub async fn tool_is_live(&self, tool: &str, pool: &str) -> Result<bool, StoreError> {
        let keys = self.keys().catalogue();
        let (in_pool, anywhere, route): (Option<f64>, Option<f64>, Option<String>) = redis::pipe()
            .cmd("ZSCORE")
            .arg(&keys.serving)
            .arg(format!("{pool} {tool}"))
            .cmd("ZSCORE")
            .arg(&keys.live)
            .arg(tool)
            .cmd("HGET")
            .arg(&keys.routes)
            .arg(tool)
            .query_async(&mut self.conn())
            .await?;
        let live = |expiry: Option<f64>| expiry.is_some_and(|ms| ms > crate::task::now_ms() as f64);
        Ok(live(in_pool) || (pool == super::DEFAULT_POOL && route.is_none() && live(anywhere)))
    }

    /// Reads everything a live worker publishes, tools sorted by name. Entries that do not parse
    /// are skipped and reported by name, so one bad publisher cannot hide the rest. A name with a
    /// `/` is a prompt, resource or template (tool names have none).
    pub async fn read_catalogue(&self) -> Result<Published, StoreError> {
        let live = read_tools::call(&mut self.conn(), &self.keys().catalogue()).await?;
        let (raw, mut routes): (_, BTreeMap<String, String>) = (live.specs, live.routes.into_iter().collect());
        let mut published = Published::default();
        for (name, json) in raw {
            if name.contains('/') {
                match serde_json::from_str::<Offering>(&json) {
                    Ok(offering) if offering.key().as_deref() == Some(name.as_str()) => {
                        let pool = routes.remove(&name).filter(|p| super::is_pool_name(p));
                        published
                            .offering_routes
                            .insert(name.clone(), pool.unwrap_or_else(|| super::DEFAULT_POOL.to_owned()));
                        published.offerings.insert(name, offering);
                    }
                    _ => published.bad.push(name),
                }
                continue;
            }
            match serde_json::from_str::<ToolSpec>(&json) {
                Ok(spec) if spec.descriptor.name == name => {
                    // A route that could not name a pool is ignored rather than made into a key.
                    let pool = routes.remove(&name).filter(|p| super::is_pool_name(p));
                    published.routes.insert(name.clone(), pool.unwrap_or_else(|| super::DEFAULT_POOL.to_owned()));
                    published.tools.insert(name, spec);
                }
                _ => published.bad.push(name),
            }
        }
        Ok(published)
    }
}
