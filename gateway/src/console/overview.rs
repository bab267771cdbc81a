//! The overview: counts by tenant, tool and state, and the pools with their workers.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Extension;
use axum::extract::State;
use axum::response::Response;
use taskgate_shared::store::{DEFAULT_POOL, Filter};

use super::cache::ConsoleState;
use super::model::{Overview, PoolView, Reach, RedisView, Tally, Viewer, WorkerView};
use super::views;
use super::{ConsoleError, OVERVIEW_SAMPLE, html, now_ms, shards};
use crate::state::AppState;

/// The overview for this viewer: from memory when one was read within two seconds, else read
/// afresh. The tools come from Redis, not from this replica's periodically refreshed
/// catalogue, so a gateway that started before its workers does not show an empty fleet.
pub(super) async fn read_overview(
    state: &AppState,
    console: &ConsoleState,
    viewer: &Viewer,
) -> Result<Arc<Overview>, ConsoleError> {
    if let Some(overview) = console.overview(&viewer.reach) {
        return Ok(overview);
    }
    let Tallies { by_tool: tallies, sampled, held } = tally(state, viewer).await?;
    let published = state.store.read_catalogue().await?;
    let tools: Vec<String> = published.tools.into_keys().collect();
    let workers: Vec<WorkerView> = state
        .store
        .live_workers()
        .await?
        .into_iter()
        .map(|(id, status, _)| WorkerView { running: held.get(&id).copied(), id, status })
        .collect();
    let pools = match viewer.reach {
        Reach::Everything => Some(pools(state, &published.routes, &workers, &state.store.known_pools().await?).await?),
        Reach::Tenant(_) => None,
    };
    let redis = match viewer.reach {
        Reach::Everything => state.store.sentinel_primary().map(|(master, primary)| RedisView {
            master,
            primary,
            failovers: taskgate_shared::telemetry::metrics::REDIS.failovers_seen(),
        }),
        Reach::Tenant(_) => None,
    };
    let overview = Arc::new(Overview { tallies, sampled, workers, tools, pools, redis, read_ms: now_ms() });
    console.keep(viewer.reach.clone(), overview.clone());
    Ok(overview)
}

pub(super) async fn overview(
    State(state): State<AppState>,
    Extension(console): Extension<Arc<ConsoleState>>,
    viewer: Viewer,
) -> Result<Response, ConsoleError> {
    let o = read_overview(&state, &console, &viewer).await?;
    Ok(html(views::overview(&viewer, &o)))
}

pub(super) async fn overview_fragment(
    State(state): State<AppState>,
    Extension(console): Extension<Arc<ConsoleState>>,
    viewer: Viewer,
) -> Result<Response, ConsoleError> {
    let o = read_overview(&state, &console, &viewer).await?;
    Ok(html(views::overview_live(&o.tallies, o.sampled, o.read_ms)))
}

/// Each pool that a worker has ever sent a heartbeat for, a live worker is in, or a tool is
/// routed to, with its live workers and its backlog (one round trip per shard and pool, the
/// shards concurrently). A pool whose workers are all gone stays listed, with what waits for it.
pub(super) async fn pools(
    state: &AppState,
    routes: &BTreeMap<String, String>,
    workers: &[WorkerView],
    known: &[(String, i64)],
) -> Result<Vec<PoolView>, ConsoleError> {
    let mut pools: BTreeMap<String, PoolView> = BTreeMap::new();
    for pool in routes.values().chain(known.iter().map(|(pool, _)| pool)) {
        pools.entry(pool.clone()).or_insert_with(|| PoolView::new(pool));
    }
    for worker in workers {
        // A worker from before pools publishes none: it was `default`.
        let pool = worker.status["pool"].as_str().unwrap_or(DEFAULT_POOL);
        let view = pools.entry(pool.to_owned()).or_insert_with(|| PoolView::new(pool));
        view.workers += 1;
        view.busy += worker.status["busy"].as_u64().unwrap_or(0);
        view.slots += worker.status["slots"].as_u64().unwrap_or(0);
    }
    let names: Vec<String> = pools.keys().cloned().collect();
    let backlogs = futures::future::join_all(names.iter().map(|pool| state.store.backlog(shards(state), pool))).await;
    for (view, backlog) in pools.values_mut().zip(backlogs) {
        view.backlog = backlog?;
    }
    Ok(pools.into_values().collect())
}

/// Counts by (tenant, tool) and state over the newest tasks this viewer may see, and the
/// runs each worker holds among them.
pub(super) async fn tally(state: &AppState, viewer: &Viewer) -> Result<Tallies, ConsoleError> {
    let filter = Filter { tenant: viewer.confine(None), ..Filter::default() };
    let page = state.store.list_tasks(shards(state), &filter, None, OVERVIEW_SAMPLE, now_ms()).await?;
    let mut tallies: BTreeMap<(String, String), Tally> = BTreeMap::new();
    let mut held: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for row in &page.rows {
        if let (Some(holder), "working") = (&row.holder, row.status.as_str()) {
            *held.entry(holder.clone()).or_default() += 1;
        }
        let tally = tallies.entry((row.tenant.clone(), row.tool.clone())).or_default();
        match row.status.as_str() {
            "working" if row.queued() => {
                tally.queued += 1;
                tally.oldest_queued_ms = Some(tally.oldest_queued_ms.map_or(row.created_ms, |t| t.min(row.created_ms)));
            }
            "working" => tally.running += 1,
            "input_required" => tally.input_required += 1,
            "completed" => tally.completed += 1,
            "failed" => tally.failed += 1,
            _ => tally.cancelled += 1,
        }
    }
    Ok(Tallies { by_tool: tallies, sampled: page.rows.len(), held })
}

pub(super) struct Tallies {
    pub(super) by_tool: BTreeMap<(String, String), Tally>,
    pub(super) sampled: usize,
    /// Runs under way by worker id, read from the task records with the page.
    pub(super) held: std::collections::HashMap<String, usize>,
}
