//! An operator's cancel and fail: the checks every action passes, then the store's write.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use taskgate_shared::store::{CancelOutcome, OperatorFail};

use super::access::Viewer;
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

pub(super) async fn cancel(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    request: axum::extract::Request,
) -> Result<Response, ConsoleError> {
    let (parts, body) = request.into_parts();
    let headers = parts.headers.clone();
    let form: ActionForm = edge::read_form(&state, parts, body).await?;
    let reason = check_action(&viewer, &headers, &form)?;
    let (id, inspection) = inspect(&state, &viewer, &id).await?;
    let by = viewer.name();
    let message = format!("Cancelled by an operator: {reason}");
    let outcome = state.store.cancel_task_as_operator(&id, &message, &by, &reason).await?;
    tracing::info!(target: "taskgate::audit", action = "cancel", task_id = %id, by = %by, reason = %reason, outcome = ?outcome, "console: task cancelled");
    if matches!(outcome, CancelOutcome::Cancelled { .. }) {
        if let Some(tenant) = inspection.record.get("tenant") {
            crate::mcp::release_active(&state, &id, tenant).await;
        }
        state.polls.changed(id.as_str());
    }
    Ok(Redirect::to(&format!("/console/tasks/{}", id.as_str())).into_response())
}

pub(super) async fn fail(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    request: axum::extract::Request,
) -> Result<Response, ConsoleError> {
    let (parts, body) = request.into_parts();
    let headers = parts.headers.clone();
    let form: ActionForm = edge::read_form(&state, parts, body).await?;
    let reason = check_action(&viewer, &headers, &form)?;
    let (id, _) = inspect(&state, &viewer, &id).await?;
    let by = viewer.name();
    let message = format!("Failed by an operator: {reason}");
    let error = serde_json::json!({ "code": -32603, "message": message }).to_string();
    let outcome = state.store.fail_task_as_operator(&id, &error, &message, &by, &reason).await?;
    tracing::info!(target: "taskgate::audit", action = "fail", task_id = %id, by = %by, reason = %reason, outcome = ?outcome, "console: task failed");
    if let OperatorFail::Failed { counted_tenant, .. } = outcome {
        if let Some(tenant) = counted_tenant {
            crate::mcp::release_active(&state, &id, &tenant).await;
        }
        state.polls.changed(id.as_str());
    }
    Ok(Redirect::to(&format!("/console/tasks/{}", id.as_str())).into_response())
}
