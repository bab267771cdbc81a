//! Who may call the admin API, and how far they reach.
//!
//! The credential is the one `/mcp` takes, `Authorization: Bearer …` only (no cookie: a
//! browser could then be made to send it from another site), authenticated on every request.
//! The scopes are the console's: the operator scope (`--console-scope`) reaches every tenant,
//! the tenant-admin scope (`--console-tenant-scope`) its own tenant, any principal in it.
//! Under `--auth none` the listener is loopback (the configuration refuses anything else) and
//! the `Host`/`Origin` rules of `/mcp` apply, so only this machine's own callers get in, as in
//! the console. Every request is admitted through the caller's tenant request rate.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::error::AdminError;
use crate::auth::{AuthError, Authenticator, Principal};
use crate::state::AppState;

/// What an admin caller reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Reach {
    Everything,
    Tenant(String),
}

/// An authenticated, admitted admin caller.
#[derive(Debug, Clone)]
pub(super) struct Admin {
    pub(super) principal: Principal,
    pub(super) reach: Reach,
}

impl Admin {
    /// `"tenant/principal"`, as the audit trail names the caller.
    pub(super) fn name(&self) -> String {
        format!("{}/{}", self.principal.tenant, self.principal.subject)
    }

    /// Whether this caller may act on `tenant`'s credentials.
    pub(super) fn reaches(&self, tenant: &str) -> bool {
        match &self.reach {
            Reach::Everything => true,
            Reach::Tenant(own) => own == tenant,
        }
    }

    /// Refuses (and audits) an act on a tenant out of reach.
    pub(super) fn check(&self, action: &str, tenant: &str, upstream: &str) -> Result<(), AdminError> {
        if self.reaches(tenant) {
            return Ok(());
        }
        tracing::info!(
            target: "taskgate::audit", action = "credential.denied", attempted = action, tenant, upstream,
            by = %self.name(), reason = "another tenant", "admin: refused"
        );
        Err(AdminError::Forbidden("the tenant-admin scope reaches its own tenant only".into()))
    }
}

impl FromRequestParts<AppState> for Admin {
    type Rejection = AdminError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let authority = parts.uri.authority().map(|a| a.as_str());
        if state.origin_policy.check(&parts.headers, authority).is_err() {
            return Err(AdminError::Forbidden("this host name or origin is not allowed here".into()));
        }
        if matches!(*state.auth, Authenticator::Anonymous) {
            // The configuration refuses --auth none off loopback; this keeps it so here too.
            if !state.origin_policy.loopback() {
                return Err(AdminError::Forbidden("without authentication, loopback callers only".into()));
            }
            let principal = Principal::anonymous();
            admit(state, &principal).await?;
            return Ok(Self { principal, reach: Reach::Everything });
        }
        let principal = match state.auth.authenticate(&parts.headers).await {
            Ok(principal) => principal,
            Err(err) => {
                tracing::info!(reason = err.label(), "admin request refused by authentication");
                let challenge = state.challenge.as_deref().map(|c| match err {
                    AuthError::InsufficientScope => c.insufficient_scope(),
                    AuthError::Missing | AuthError::Invalid(_) => c.invalid_token(),
                });
                if err == AuthError::InsufficientScope {
                    return Err(AdminError::Forbidden("the token lacks a required scope".into()));
                }
                return Err(AdminError::Unauthenticated(challenge));
            }
        };
        admit(state, &principal).await?;
        let has = |scope: &str| principal.scopes.iter().any(|s| s == scope);
        let reach = if has(&state.config.admin.operator_scope) {
            Reach::Everything
        } else if has(&state.config.admin.tenant_scope) {
            Reach::Tenant(principal.tenant.clone())
        } else {
            tracing::info!(
                target: "taskgate::audit", action = "credential.denied", tenant = %principal.tenant,
                by = %format!("{}/{}", principal.tenant, principal.subject), path = %parts.uri.path(),
                reason = "no admin scope", "admin: refused"
            );
            return Err(AdminError::Forbidden(
                "this token has neither the operator scope nor the tenant-admin scope".into(),
            ));
        };
        Ok(Self { principal, reach })
    }
}

/// The tenant's request rate, as `/mcp` and the console apply it.
async fn admit(state: &AppState, principal: &Principal) -> Result<(), AdminError> {
    match crate::limits::admit_request(state, principal).await {
        Ok(()) => Ok(()),
        Err(crate::error::GatewayError::RateLimited { retry_after_ms, .. }) => {
            Err(AdminError::RateLimited { retry_after_ms })
        }
        Err(crate::error::GatewayError::Storage(err)) => Err(AdminError::Unavailable(Some(err))),
        Err(err) => {
            tracing::error!(outcome = ?err.outcome(), "admin: the request-rate check failed");
            Err(AdminError::Unavailable(None))
        }
    }
}
