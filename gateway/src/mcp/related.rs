//! `_meta["io.modelcontextprotocol/relatedTaskIds"]` on `tools/call` (an Agents working group
//! draft extending the Tasks extension): which of the named tasks are the caller's own, and,
//! for a tool that opts in to step reuse, the durable steps of a failed or cancelled run of the
//! same call to start the new task from.
//!
//! Advisory throughout: foreign, unknown, expired and malformed ids are dropped without a trace,
//! so the reply is the same bytes whichever were sent (invariant 10), and nothing in any reply
//! says whether an id was used.

use std::collections::BTreeMap;

use serde_json::Value;
use taskgate_shared::protocol::ValidMeta;
use taskgate_shared::task::{Owner, TaskId};

use crate::error::GatewayError;
use crate::mrtr::Gathered;
use crate::state::AppState;

/// The related ids a call named (already de-duplicated and capped by `_meta` validation), as
/// task ids: a string that is not one names no task and is dropped here.
pub(crate) struct Named<'a> {
    ids: Vec<TaskId>,
    tool: &'a str,
    /// The call's arguments, when its tool reuses the steps of a failed run of the same call.
    reuse: Option<&'a Value>,
}

/// What the named ids came to.
#[derive(Debug, Default)]
pub(crate) struct Resolved {
    /// The caller's own ids, in the order sent: kept beside the task for its worker.
    pub(crate) owned: Vec<String>,
    /// The durable steps to start from (step name, result JSON), empty for none.
    pub(crate) steps: Vec<(String, String)>,
}

impl<'a> Named<'a> {
    pub(crate) fn new(meta: &ValidMeta, tool: &'a str, reuse_steps: bool, arguments: &'a Value) -> Self {
        let ids = meta.related_task_ids.iter().filter_map(|id| TaskId::parse(id)).collect();
        Self { ids, tool, reuse: reuse_steps.then_some(arguments) }
    }

    /// Checks each id as `tasks/get` would (one round trip for all, only when any were named);
    /// for a tool that reuses steps and a failed or cancelled task of the caller's with the
    /// same tool and arguments among them (the first such in the order sent), reads its
    /// arguments (one round trip, the caller's candidates only) and its steps (one more).
    pub(crate) async fn resolve(&self, state: &AppState, owner: &Owner) -> Result<Resolved, GatewayError> {
        if self.ids.is_empty() {
            return Ok(Resolved::default());
        }
        let store = &state.store;
        let owned = store.owned_tasks(&self.ids, owner).await?;
        let mut resolved =
            Resolved { owned: owned.iter().map(|t| t.id.as_str().to_owned()).collect(), steps: Vec::new() };
        let Some(arguments) = self.reuse else { return Ok(resolved) };
        // Terminal, so its steps are final: no run of it records another (invariant 4).
        let candidates: Vec<&TaskId> = owned
            .iter()
            .filter(|t| t.tool == self.tool && matches!(t.status.as_str(), "failed" | "cancelled"))
            .map(|t| &t.id)
            .collect();
        if candidates.is_empty() {
            return Ok(resolved);
        }
        let stored = store.task_arguments(&candidates).await?;
        // The same call: the same arguments as JSON values (key order and spacing aside).
        let same = candidates.iter().zip(stored).find(|(_, stored)| {
            stored.as_deref().and_then(|s| serde_json::from_str::<Value>(s).ok()).as_ref() == Some(arguments)
        });
        if let Some((from, _)) = same {
            resolved.steps = store.recorded_steps(from).await?;
            tracing::debug!(reused_from = %from, steps = resolved.steps.len(), "starting from a failed run's steps");
        }
        Ok(resolved)
    }
}

/// `gathered` with `steps` recorded too (those gathered already, from an earlier MRTR round,
/// win), or `None` when there are none to add.
pub(crate) fn with_steps(gathered: &Gathered, steps: &[(String, String)]) -> Option<Gathered> {
    if steps.is_empty() {
        return None;
    }
    let mut all: BTreeMap<String, String> = steps.iter().cloned().collect();
    all.extend(gathered.carried.steps.iter().map(|(k, v)| (k.clone(), v.clone())));
    let mut carried = gathered.carried.clone();
    carried.steps = all;
    Some(Gathered { answers: gathered.answers.clone(), carried })
}
