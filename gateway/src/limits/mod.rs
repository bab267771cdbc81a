//! Fleet-wide limits (kept in Redis, see `shared::store::limits`) as the gateway applies them,
//! and the error a refused request gets.
//!
//! A refusal is HTTP 429 with `Retry-After` and the JSON-RPC error `-31429` ("rate limit
//! exceeded"), with `data: {"limit": "requests" | "creations" | "active_tasks" | "poll",
//! "retryAfterMs": n}`. The code is taskgate's own, outside every range the JSON-RPC and MCP
//! specifications reserve.

use taskgate_shared::store::{Admission, Limit, Rate, StoreError, TaskAdmission};
use taskgate_shared::task::TaskId;

use crate::auth::Principal;
use crate::error::GatewayError;
use crate::state::AppState;

/// The error for a refused request.
pub(crate) fn refused(limit: Limit, retry_after_ms: u64) -> GatewayError {
    GatewayError::RateLimited { limit, retry_after_ms }
}

fn requests(state: &AppState) -> Rate {
    state.config.tenants.requests
}

fn outcome(admission: Result<Admission, StoreError>) -> Result<(), GatewayError> {
    match admission? {
        Admission::Admitted => Ok(()),
        Admission::Refused { limit, retry_after_ms } => Err(refused(limit, retry_after_ms)),
    }
}

/// One request against the caller's tenant request rate, from this replica's slice of it
/// ([`crate::slices`]). Fails open when Redis cannot be reached: a request that needs Redis fails on
/// its own, and one that does not (discovery, listing) keeps working through an outage.
pub(crate) async fn admit_request(state: &AppState, principal: &Principal) -> Result<(), GatewayError> {
    let rate = requests(state);
    if !rate.is_limited() {
        return Ok(());
    }
    match state.request_slices.admit(&state.store, &principal.tenant, rate).await {
        Err(err) => {
            tracing::warn!(error = %err, "request rate not checked: storage unavailable");
            Ok(())
        }
        admission => outcome(admission),
    }
}

/// A request that creates a task: request rate, creation rate and the active-task cap.
pub(crate) async fn admit_task(
    state: &AppState,
    principal: &Principal,
    task_id: &TaskId,
    ttl_ms: u64,
) -> Result<(), GatewayError> {
    let config = &state.config;
    let task = TaskAdmission {
        task_id,
        ttl_ms,
        creations: config.tenants.creations,
        max_active: config.tenants.max_active_tasks.map_or(0, std::num::NonZeroU64::get),
    };
    outcome(state.store.admit_task(&principal.tenant, requests(state), task).await)
}
