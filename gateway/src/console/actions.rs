//! An operator's cancel and fail: the checks every action passes, then the store's write.

use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use taskgate_shared::store::{CancelOutcome, OperatorFail};
use taskgate_shared::task::TaskId;

use super::model::Viewer;
use super::tasks::inspect;
use super::{ConsoleError, access, edge};
use crate::state::AppState;

#[derive(Debug, Deserialize)]
pub(super) struct ActionForm {
    #[serde(default)]
    pub(super) csrf: String,
    #[serde(default)]
    pub(super) reason: String,
}

/// The checks every action passes: same origin, operator scope, CSRF token, a reason.
pub(super) fn check_action(viewer: &Viewer, headers: &HeaderMap, form: &ActionForm) -> Result<String, ConsoleError> {
    if !access::same_origin(headers) {
        return Err(ConsoleError::Forbidden("Actions must come from the console's own pages."));
    }
    viewer.check_action(&form.csrf)?;
    let reason = form.reason.trim();
    if reason.is_empty() || reason.len() > 500 {
        return Err(ConsoleError::BadRequest("Give a reason, at most 500 characters."));
    }
    Ok(reason.to_owned())
}

/// An action that passed its checks: on which task, by whom, why.
struct Action {
    id: TaskId,
    by: String,
    reason: String,
}

/// What every action does first: read the form within its bounds, pass the checks, and find
/// the task as this viewer may see it.
async fn begin(state: &AppState, viewer: &Viewer, id: &str, request: Request) -> Result<Action, ConsoleError> {
    let (parts, body) = request.into_parts();
    let headers = parts.headers.clone();
    let form: ActionForm = edge::read_form(state, parts, body).await?;
    let reason = check_action(viewer, &headers, &form)?;
    // Only a task this viewer may see is acted on.
    let (id, _) = inspect(state, viewer, id).await?;
    Ok(Action { id, by: viewer.name(), reason })
}

/// What every action does last: when it ended the task, answer held polls at once (the store
/// method that ended it freed its active-task slot); then back to the task's page.
fn finish(state: &AppState, id: &TaskId, ended: bool) -> Response {
    // Whatever the outcome: a write acknowledged here is read back at once on this replica.
    state.snapshots.changed(id.as_str());
    if ended {
        state.polls.changed(id.as_str());
    }
    Redirect::to(&format!("/console/tasks/{}", id.as_str())).into_response()
}

pub(super) async fn cancel(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ConsoleError> {
    let Action { id, by, reason } = begin(&state, &viewer, &id, request).await?;
    let message = format!("Cancelled by an operator: {reason}");
    let outcome = state.store.cancel_task_as_operator(&id, &message, &by, &reason).await?;
    tracing::info!(target: "taskgate::audit", action = "cancel", task_id = %id, by = %by, reason = %reason, outcome = ?outcome, "console: task cancelled");
    let ended = matches!(outcome, CancelOutcome::Cancelled { .. });
    Ok(finish(&state, &id, ended))
}

pub(super) async fn fail(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ConsoleError> {
    let Action { id, by, reason } = begin(&state, &viewer, &id, request).await?;
    let message = format!("Failed by an operator: {reason}");
    let error = serde_json::json!({ "code": -32603, "message": message }).to_string();
    let outcome = state.store.fail_task_as_operator(&id, &error, &message, &by, &reason).await?;
    tracing::info!(target: "taskgate::audit", action = "fail", task_id = %id, by = %by, reason = %reason, outcome = ?outcome, "console: task failed");
    Ok(match outcome {
        OperatorFail::Failed { .. } => finish(&state, &id, true),
        OperatorFail::AlreadyTerminal | OperatorFail::NotFound => finish(&state, &id, false),
    })
}
