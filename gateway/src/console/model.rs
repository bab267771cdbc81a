//! What the console's handlers, its cache and its templates share: who is looking (and how far
//! they reach), and what the overview shows. Plain data, below all of them: the templates read
//! it without knowing the handlers, and the cache keeps it without knowing the overview's
//! handler.

use std::collections::BTreeMap;

use crate::auth::Principal;

/// What a viewer may see.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Reach {
    /// Every tenant (the operator scope, or `--auth none`).
    Everything,
    /// One tenant (the tenant-admin scope).
    Tenant(String),
}

/// An authenticated console user.
#[derive(Debug, Clone)]
pub(crate) struct Viewer {
    pub(crate) principal: Principal,
    pub(crate) reach: Reach,
    /// Only operators act (cancel, fail).
    pub(crate) may_act: bool,
    /// No authentication is configured (`--auth none`): shown as a banner on every page.
    pub(crate) open: bool,
    /// The CSRF token actions must carry.
    pub(crate) csrf: String,
}

impl Viewer {
    /// `"tenant/principal"`, as the audit trail names the viewer.
    pub(crate) fn name(&self) -> String {
        format!("{}/{}", self.principal.tenant, self.principal.subject)
    }

    /// Whether a task of `tenant` is visible to this viewer.
    pub(crate) fn sees(&self, tenant: &str) -> bool {
        match &self.reach {
            Reach::Everything => true,
            Reach::Tenant(own) => own == tenant,
        }
    }

    /// The tenant a listing is confined to (`None`: every tenant, or the one asked for).
    pub(crate) fn confine(&self, asked: Option<String>) -> Option<String> {
        match &self.reach {
            Reach::Everything => asked,
            Reach::Tenant(own) => Some(own.clone()),
        }
    }
}

/// What the overview shows, as read at `read_ms`; kept briefly per reach
/// ([`OVERVIEW_FRESH`](super::cache::OVERVIEW_FRESH)).
pub(crate) struct Overview {
    pub(super) tallies: BTreeMap<(String, String), Tally>,
    pub(super) sampled: usize,
    pub(super) workers: Vec<WorkerView>,
    pub(super) tools: Vec<String>,
    /// Every pool's backlog: for those who see every tenant only (a backlog counts them all).
    pub(super) pools: Option<Vec<PoolView>>,
    /// Behind Sentinel, for operators: the master's name, the primary as this replica last
    /// found it, and the failovers this replica has seen.
    pub(super) redis: Option<RedisView>,
    pub(super) read_ms: i64,
}

/// One (tenant, tool)'s tasks by state, over the newest tasks of the index.
#[derive(Debug, Default)]
pub(super) struct Tally {
    pub(super) queued: usize,
    pub(super) running: usize,
    pub(super) input_required: usize,
    pub(super) completed: usize,
    pub(super) failed: usize,
    pub(super) cancelled: usize,
    pub(super) oldest_queued_ms: Option<i64>,
}

/// Redis behind Sentinel, as this replica follows it.
pub(super) struct RedisView {
    pub(super) master: String,
    pub(super) primary: Option<String>,
    pub(super) failovers: u64,
}

/// A worker pool: its live workers (and their slots, as of their heartbeats) and its backlog.
pub(super) struct PoolView {
    pub(super) name: String,
    pub(super) workers: usize,
    pub(super) busy: u64,
    pub(super) slots: u64,
    pub(super) backlog: taskgate_shared::store::Backlog,
}

impl PoolView {
    pub(super) fn new(name: &str) -> Self {
        Self { name: name.to_owned(), workers: 0, busy: 0, slots: 0, backlog: Default::default() }
    }
}

/// A live worker as its last heartbeat described it.
pub(super) struct WorkerView {
    pub(super) id: String,
    pub(super) status: serde_json::Value,
    /// Runs it holds among the tasks the overview read (a tenant admin sees its tenant's).
    pub(super) running: Option<usize>,
}
