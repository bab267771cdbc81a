//! The credentials page: per tenant, which upstreams have a credential (the tenant's own or
//! a principal's), never a value. Operators see every tenant, tenant admins their own.

use axum::extract::State;
use axum::response::Response;

use super::model::{Reach, Viewer};
use super::{ConsoleError, html, views};
use crate::state::AppState;

pub(super) async fn page(State(state): State<AppState>, viewer: Viewer) -> Result<Response, ConsoleError> {
    let tenant = match &viewer.reach {
        Reach::Everything => None,
        Reach::Tenant(own) => Some(own.as_str()),
    };
    let entries = crate::admin::list_credentials(&state.store, tenant).await?;
    Ok(html(views::credentials(&viewer, &entries)))
}
