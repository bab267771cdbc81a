//! `/admin/credentials`: list, set, delete and re-seal per-tenant upstream credentials.
//!
//! A value goes in (a `PUT` body) and is sealed at once; it never comes back out, in a reply,
//! an error or a log line. Every set, delete, re-seal and refusal is written to the audit log
//! (`taskgate::audit`) with the names of the values, never the values.

use std::collections::BTreeMap;

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use serde_json::{Value, json};
use taskgate_shared::credentials::{Credential, Holder, KeyRing, Sealed};
use taskgate_shared::task::now_ms;

use super::MAX_BODY_BYTES;
use super::access::{Admin, Reach};
use super::error::AdminError;
use super::listing::{CredentialEntry, list as list_entries};
use crate::state::AppState;

/// The longest tenant or principal name taken.
const MAX_HOLDER_LEN: usize = 256;
/// The longest upstream name, as upstream entries name their servers.
const MAX_UPSTREAM_LEN: usize = 64;

#[derive(Debug, Deserialize)]
pub(super) struct ListQuery {
    tenant: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct PrincipalQuery {
    principal: Option<String>,
}

/// A `PUT`'s body. No `Debug`: it holds the values.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetBody {
    #[serde(default)]
    principal: Option<String>,
    values: BTreeMap<String, String>,
}

/// `GET /admin/credentials[?tenant=T]`: an operator's listing covers every tenant unless one
/// is asked for; a tenant admin's covers its own.
pub(super) async fn list(
    State(state): State<AppState>,
    admin: Admin,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Value>, AdminError> {
    let Query(query) = query.map_err(|_| AdminError::BadRequest("the query must be ?tenant=T".into()))?;
    let tenant = match (query.tenant, &admin.reach) {
        (Some(tenant), _) => {
            check_holder("tenant", &tenant)?;
            admin.check("credential.list", &tenant, "")?;
            Some(tenant)
        }
        (None, Reach::Everything) => None,
        (None, Reach::Tenant(own)) => Some(own.clone()),
    };
    let entries = list_entries(&state.store, tenant.as_deref()).await?;
    Ok(Json(json!({ "credentials": entries })))
}

/// `PUT /admin/credentials/{tenant}/{upstream}`: seals the values under the current key and
/// stores them, replacing any; answers the listing entry.
pub(super) async fn set(
    State(state): State<AppState>,
    admin: Admin,
    path: Result<Path<(String, String)>, PathRejection>,
    body: Body,
) -> Result<Json<CredentialEntry>, AdminError> {
    let (tenant, upstream) = holder_path(path)?;
    admin.check("credential.set", &tenant, &upstream)?;
    let keys = keys(&state)?;
    let body = read_body(&state, body).await?;
    let body: SetBody = serde_json::from_slice(&body).map_err(|err| {
        // serde's message can quote the input (a value): say where, never what.
        AdminError::BadRequest(format!(
            "the body must be JSON {{\"principal\": optional string, \"values\": {{\"name\": \"value\", …}}}} \
             ({:?} error at line {} column {})",
            err.classify(),
            err.line(),
            err.column()
        ))
    })?;
    if let Some(principal) = &body.principal {
        check_holder("principal", principal)?;
    }
    let credential = Credential::new(body.values).map_err(|err| AdminError::BadRequest(err.to_string()))?;
    let holder = Holder { tenant, principal: body.principal, upstream };
    let by = admin.name();
    let sealed = keys.seal(&holder, &credential, now_ms(), &by).map_err(|err| {
        tracing::error!(error = %err, "admin: sealing a credential failed");
        AdminError::Unavailable(None)
    })?;
    state.store.put_credential(&holder, &sealed.to_json()).await?;
    tracing::info!(
        target: "taskgate::audit", action = "credential.set", tenant = %holder.tenant,
        principal = holder.principal.as_deref().unwrap_or(""), upstream = %holder.upstream,
        names = %sealed.names.join(","), key_id = %sealed.key_id, by = %by, "credential set"
    );
    Ok(Json(CredentialEntry::new(&holder.tenant, holder.principal, holder.upstream, &sealed)))
}

/// `DELETE /admin/credentials/{tenant}/{upstream}[?principal=P]`.
pub(super) async fn delete(
    State(state): State<AppState>,
    admin: Admin,
    path: Result<Path<(String, String)>, PathRejection>,
    query: Result<Query<PrincipalQuery>, QueryRejection>,
) -> Result<Json<Value>, AdminError> {
    let (tenant, upstream) = holder_path(path)?;
    let Query(query) = query.map_err(|_| AdminError::BadRequest("the query must be ?principal=P".into()))?;
    admin.check("credential.delete", &tenant, &upstream)?;
    if let Some(principal) = &query.principal {
        check_holder("principal", principal)?;
    }
    let holder = Holder { tenant, principal: query.principal, upstream };
    let deleted = state.store.delete_credential(&holder).await?;
    tracing::info!(
        target: "taskgate::audit", action = "credential.delete", tenant = %holder.tenant,
        principal = holder.principal.as_deref().unwrap_or(""), upstream = %holder.upstream, deleted,
        by = %admin.name(), "credential deleted"
    );
    Ok(Json(json!({ "deleted": deleted })))
}

/// `POST /admin/credentials/rewrap`: every record in reach sealed under a key other than the
/// current one is opened and sealed again under the current one. The write is a
/// compare-and-set on the record read, so a set (or a refresh) made meanwhile wins and is
/// left as it is. A record that does not open is left untouched and reported.
pub(super) async fn rewrap(State(state): State<AppState>, admin: Admin) -> Result<Json<Value>, AdminError> {
    let keys = keys(&state)?;
    let tenants = match &admin.reach {
        Reach::Everything => state.store.credential_tenants().await?,
        Reach::Tenant(own) => vec![own.clone()],
    };
    let by = admin.name();
    let (mut rewrapped, mut failed) = (0u64, Vec::new());
    for tenant in tenants {
        for listed in state.store.list_credentials(&tenant).await? {
            let holder = Holder { tenant: tenant.clone(), principal: listed.principal, upstream: listed.upstream };
            match rewrap_one(&state, keys, &holder, &listed.record).await? {
                Rewrap::Current | Rewrap::ChangedMeanwhile => {}
                Rewrap::Done { from } => {
                    rewrapped += 1;
                    tracing::info!(
                        target: "taskgate::audit", action = "credential.rewrap", tenant = %holder.tenant,
                        principal = holder.principal.as_deref().unwrap_or(""), upstream = %holder.upstream,
                        from_key = %from, to_key = %keys.current(), by = %by, "credential sealed again"
                    );
                }
                Rewrap::Failed(error) => {
                    tracing::warn!(
                        target: "taskgate::audit", action = "credential.rewrap", tenant = %holder.tenant,
                        principal = holder.principal.as_deref().unwrap_or(""), upstream = %holder.upstream,
                        error = %error, by = %by, "credential not sealed again"
                    );
                    failed.push(json!({
                        "tenant": holder.tenant,
                        "upstream": holder.upstream,
                        "principal": holder.principal,
                        "error": error,
                    }));
                }
            }
        }
    }
    Ok(Json(json!({ "rewrapped": rewrapped, "failed": failed })))
}

enum Rewrap {
    /// Already under the current key.
    Current,
    /// A set or refresh replaced the record after it was read: that one stands.
    ChangedMeanwhile,
    Done {
        from: String,
    },
    /// The record does not open (or is malformed): the reason, which names no value.
    Failed(String),
}

async fn rewrap_one(state: &AppState, keys: &KeyRing, holder: &Holder, stored: &str) -> Result<Rewrap, AdminError> {
    let record = match Sealed::from_json(stored) {
        Ok(record) => record,
        Err(err) => return Ok(Rewrap::Failed(err.to_string())),
    };
    if !keys.is_stale(&record) {
        return Ok(Rewrap::Current);
    }
    let credential = match keys.open(holder, &record) {
        Ok(credential) => credential,
        Err(err) => return Ok(Rewrap::Failed(err.to_string())),
    };
    // Who set it and when stay as they were: the values did not change.
    let sealed = match keys.seal(holder, &credential, record.set_at_ms, &record.set_by) {
        Ok(sealed) => sealed,
        Err(err) => return Ok(Rewrap::Failed(err.to_string())),
    };
    Ok(match state.store.replace_credential(holder, stored, &sealed.to_json()).await? {
        true => Rewrap::Done { from: record.key_id },
        false => Rewrap::ChangedMeanwhile,
    })
}

fn keys(state: &AppState) -> Result<&KeyRing, AdminError> {
    state.credential_keys.as_deref().ok_or(AdminError::NoKeys)
}

fn holder_path(path: Result<Path<(String, String)>, PathRejection>) -> Result<(String, String), AdminError> {
    let Path((tenant, upstream)) =
        path.map_err(|_| AdminError::BadRequest("the path must be /admin/credentials/{tenant}/{upstream}".into()))?;
    check_holder("tenant", &tenant)?;
    check_upstream(&upstream)?;
    Ok((tenant, upstream))
}

/// A tenant or principal name: not empty, bounded, no control characters (it reaches logs).
fn check_holder(what: &str, name: &str) -> Result<(), AdminError> {
    if name.is_empty() || name.len() > MAX_HOLDER_LEN || name.chars().any(char::is_control) {
        return Err(AdminError::BadRequest(format!(
            "the {what} must be 1 to {MAX_HOLDER_LEN} bytes without control characters"
        )));
    }
    Ok(())
}

/// An upstream name as upstream entries have them: `[a-z0-9-]`, 1 to 64.
fn check_upstream(name: &str) -> Result<(), AdminError> {
    let fits = (1..=MAX_UPSTREAM_LEN).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !fits {
        return Err(AdminError::BadRequest(format!(
            "the upstream must be 1 to {MAX_UPSTREAM_LEN} characters of a-z, 0-9 and -"
        )));
    }
    Ok(())
}

/// The body, whole, within `--body-timeout-ms` and [`MAX_BODY_BYTES`].
async fn read_body(state: &AppState, body: Body) -> Result<axum::body::Bytes, AdminError> {
    let read = axum::body::to_bytes(body, MAX_BODY_BYTES);
    match tokio::time::timeout(state.config.requests.body_timeout, read).await {
        Err(_) => Err(AdminError::SlowBody),
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(err)) => {
            let too_large =
                std::error::Error::source(&err).is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
            Err(if too_large {
                AdminError::TooLarge
            } else {
                AdminError::BadRequest("the body could not be read".into())
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_and_holder_names_are_bounded() {
        assert!(check_upstream("github-1").is_ok());
        for bad in ["", "GitHub", "a|b", "a b", &"a".repeat(65)] {
            assert!(check_upstream(bad).is_err(), "{bad:?}");
        }
        assert!(check_holder("tenant", "acme/ops").is_ok());
        for bad in ["", "a\nb", &"a".repeat(257)] {
            assert!(check_holder("tenant", bad).is_err(), "{bad:?}");
        }
    }
}
