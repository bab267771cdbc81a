//! The task list, one task whole (page, live fragment, JSON), and what it waits for.

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use taskgate_shared::store::{Cursor, DEFAULT_POOL, Filter, Page};
use taskgate_shared::task::TaskId;

use super::model::Viewer;
use super::views::{self, ListQuery, TaskView};
use super::{ConsoleError, PAGE_ROWS, html, now_ms, shards};
use crate::state::AppState;

#[derive(Debug, Default, Deserialize)]
pub(super) struct ListParams {
    #[serde(flatten)]
    query: ListQuery,
    #[serde(default)]
    fragment: String,
}

pub(super) async fn task_list(
    State(state): State<AppState>,
    viewer: Viewer,
    Query(params): Query<ListParams>,
) -> Result<Response, ConsoleError> {
    let query = params.query;
    let seconds = |text: &str| -> Result<Option<i64>, ConsoleError> {
        match text.trim() {
            "" => Ok(None),
            text => text
                .parse::<i64>()
                .ok()
                .filter(|s| *s >= 0)
                .map(|s| Some(s.saturating_mul(1000)))
                .ok_or(ConsoleError::BadRequest("Ages are whole seconds.")),
        }
    };
    let some = |text: &str| Some(text.trim().to_owned()).filter(|t| !t.is_empty());
    if !query.status.is_empty() && !views::STATES.contains(&query.status.as_str()) {
        return Err(ConsoleError::BadRequest("No such state."));
    }
    let filter = Filter {
        tenant: viewer.confine(some(&query.tenant)),
        tool: some(&query.tool),
        status: some(&query.status),
        min_age_ms: seconds(&query.older)?,
        max_age_ms: seconds(&query.newer)?,
    };
    let after = match query.after.as_str() {
        "" => None,
        text => Some(Cursor::parse(text).ok_or(ConsoleError::BadRequest("That page link is not valid."))?),
    };
    let page: Page = state.store.list_tasks(shards(&state), &filter, after.as_ref(), PAGE_ROWS, now_ms()).await?;
    if params.fragment == "1" {
        return Ok(html(views::task_rows(&query, &page, now_ms())));
    }
    Ok(html(views::task_list(&viewer, &query, &page, now_ms())))
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct TaskParams {
    #[serde(default)]
    reveal: String,
}

/// The task, if it exists and this viewer may see it: unknown and foreign ids are one answer.
pub(super) async fn inspect(
    state: &AppState,
    viewer: &Viewer,
    id: &str,
) -> Result<(TaskId, taskgate_shared::store::Inspection), ConsoleError> {
    let id = TaskId::parse(id).ok_or(ConsoleError::NotFound)?;
    let inspection = state.store.inspect_task(&id).await?.ok_or(ConsoleError::NotFound)?;
    if !viewer.sees(inspection.record.get("tenant").map_or("", String::as_str)) {
        return Err(ConsoleError::NotFound);
    }
    Ok((id, inspection))
}

pub(super) fn trace_url(state: &AppState, inspection: &taskgate_shared::store::Inspection) -> Option<String> {
    let template = state.config.console.as_ref()?.trace_url.as_ref()?;
    // traceparent: version-traceid-spanid-flags; the trace id is 32 lowercase hex digits.
    let trace_id = inspection.record.get("tp")?.split('-').nth(1).filter(|t| t.len() == 32)?;
    trace_id.bytes().all(|b| b.is_ascii_hexdigit()).then(|| template.replace("{trace_id}", trace_id))
}

pub(super) async fn task(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    Query(params): Query<TaskParams>,
) -> Result<Response, ConsoleError> {
    let (id, mut inspection) = inspect(&state, &viewer, &id).await?;
    let reveal = params.reveal == "1";
    if reveal {
        // Recorded before anything is shown: a reveal that is not recorded (Redis failed, or
        // the task keeps no timeline) shows nothing. The page shows it too, as the timeline's
        // newest entry.
        let Some(entry) = state.store.record_reveal(&id, &viewer.name()).await? else {
            tracing::info!(target: "taskgate::audit", action = "reveal", task_id = %id, by = %viewer.name(), "console: reveal refused: the task keeps no timeline to record it in");
            return Err(ConsoleError::Unaudited);
        };
        inspection.timeline.push(entry);
        tracing::info!(target: "taskgate::audit", action = "reveal", task_id = %id, by = %viewer.name(), "console: sensitive fields shown");
    }
    let waiting_for = waiting_for_pool(&state, &inspection).await;
    let view = TaskView {
        id: id.as_str(),
        inspection: &inspection,
        reveal,
        trace_url: trace_url(&state, &inspection),
        waiting_for,
    };
    Ok(html(views::task(&viewer, &view)))
}

/// The pool a queued task waits for, when no live worker of that pool has sent a heartbeat
/// lately (one read of the live workers, with the page; the self-refreshing part never asks).
pub(super) async fn waiting_for_pool(
    state: &AppState,
    inspection: &taskgate_shared::store::Inspection,
) -> Option<String> {
    let record = &inspection.record;
    if record.get("status").map(String::as_str) != Some("working") || record.contains_key("holder") {
        return None;
    }
    // A record or a worker status from before pools is the default pool's.
    let pool = record.get("pool").map_or(DEFAULT_POOL, String::as_str);
    let workers = state.store.live_workers().await.ok()?;
    let served = workers.iter().any(|(_, status, _)| status["pool"].as_str().unwrap_or(DEFAULT_POOL) == pool);
    (!served).then(|| pool.to_owned())
}

pub(super) async fn task_fragment(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Result<Response, ConsoleError> {
    let (id, inspection) = inspect(&state, &viewer, &id).await?;
    // Never revealed: the fragment refreshes without a page load that could be logged.
    let view = TaskView { id: id.as_str(), inspection: &inspection, reveal: false, trace_url: None, waiting_for: None };
    Ok(html(views::task_live(&view)))
}

/// The timeline and summary as JSON, for scripts and the CLI: what the page shows, without the
/// sensitive fields.
pub(super) async fn task_json(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Result<Response, ConsoleError> {
    let (id, inspection) = inspect(&state, &viewer, &id).await?;
    let record = &inspection.record;
    let shown = [
        "tenant",
        "principal",
        "tool",
        "status",
        "msg",
        "created",
        "updated",
        "ttl",
        "poll",
        "ver",
        "fence",
        "holder",
        "reclaims",
    ];
    let mut fields: serde_json::Map<String, serde_json::Value> =
        shown.iter().filter_map(|f| record.get(*f).map(|v| ((*f).to_owned(), v.clone().into()))).collect();
    if views::message_is_a_question(record.get("status").map(String::as_str)) {
        fields.insert("msg".into(), views::REDACTED_QUESTION.into());
    }
    let body = serde_json::json!({
        "taskId": id.as_str(),
        "record": fields,
        "inputKeys": inspection.inputs.keys().collect::<Vec<_>>(),
        "answerKeys": inspection.answers.keys().collect::<Vec<_>>(),
        "timeline": inspection.timeline,
    });
    Ok(axum::Json(body).into_response())
}
