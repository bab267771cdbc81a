//! The admin API under `/admin/`: JSON for operators and tenant admins, always served (every
//! request is authenticated, as `/mcp` is). Today it manages per-tenant upstream credentials
//! (`credentials`); who may call it and how far they reach is `access`, its refusals `error`.
//! The listing it serves is `listing`, which the console's credentials page reads too.

mod access;
mod credentials;
mod error;
mod listing;

use axum::Router;
use axum::routing::{get, post, put};

use crate::state::AppState;
pub(crate) use error::pipeline_error;
pub(crate) use listing::{CredentialEntry, list as list_credentials};

/// The largest request body the admin API takes: a credential is a few tokens (the values'
/// own bounds are the credentials module's).
const MAX_BODY_BYTES: usize = 64 * 1024;

/// Every admin route.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/admin/credentials", get(credentials::list))
        .route("/admin/credentials/rewrap", post(credentials::rewrap))
        .route("/admin/credentials/{tenant}/{upstream}", put(credentials::set).delete(credentials::delete))
}
