//! The webhooks page: per tenant, the Events extension's webhook subscriptions and their dead
//! letters (never a secret, nor a URL's path or query), and an operator's end of one.
//! Operators see every tenant, tenant admins their own.

use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::actions::{ActionForm, check_action};
use super::model::{Reach, Viewer};
use super::{ConsoleError, edge, html, views};
use crate::state::AppState;

/// Subscriptions the page lists at most.
const LISTED_MAX: usize = 500;
/// Dead letters shown per subscription, the newest.
const LETTERS_SHOWN: usize = 10;

pub(super) async fn page(State(state): State<AppState>, viewer: Viewer) -> Result<Response, ConsoleError> {
    let tenant = match &viewer.reach {
        Reach::Everything => None,
        Reach::Tenant(own) => Some(own.as_str()),
    };
    let hooks = state.store.list_hooks(tenant, LISTED_MAX, LETTERS_SHOWN).await?;
    Ok(html(views::webhooks(&viewer, &hooks, LISTED_MAX)))
}

#[derive(Debug, Deserialize)]
pub(super) struct EndForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    tenant: String,
}

/// Ends a subscription, as `events/unsubscribe` would (its record and dead letters go; a
/// deliverer holding it finds it gone at its next write).
pub(super) async fn end(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ConsoleError> {
    let (parts, body) = request.into_parts();
    let headers = parts.headers.clone();
    let form: EndForm = edge::read_form(&state, parts, body).await?;
    let action = ActionForm { csrf: form.csrf, reason: form.reason };
    let reason = check_action(&viewer, &headers, &action)?;
    let well_formed = id.len() == 36 && id.starts_with("sub_") && id[4..].bytes().all(|b| b.is_ascii_hexdigit());
    if !well_formed || form.tenant.is_empty() || form.tenant.len() > 256 {
        return Err(ConsoleError::BadRequest("No such subscription."));
    }
    if !viewer.sees(&form.tenant) {
        return Err(ConsoleError::NotFound);
    }
    let by = viewer.name();
    let dropped = state.store.drop_hook_of_tenant(&form.tenant, &id).await?;
    tracing::info!(target: "taskgate::audit", action = "end_subscription", subscription = %id, tenant = %form.tenant, by = %by, reason = %reason, dropped, "console: webhook subscription ended");
    Ok(Redirect::to("/console/webhooks").into_response())
}
