//! RFC 8693 token exchange for servers configured `grant = "token_exchange"`: the caller's own
//! JWT, which the gateway sealed beside the task, is opened here and exchanged at the server's
//! token endpoint for an access token to that server. The exchanged token is kept in memory
//! only, per (server, tenant, principal), until shortly before it runs out; then the refresh
//! token the endpoint issued with it (if any) renews it, else the caller's token of the latest
//! call is exchanged again. Neither token is ever stored in Redis by the worker, logged or put
//! in an error; the caller's token goes to the token endpoint only, never to the server.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use taskgate_shared::credentials::{Credential, EXPIRES_AT_MS, Holder, REFRESH_TOKEN, SUBJECT_TOKEN, Sealed};
use taskgate_shared::task::TaskId;

use super::{Credentials, Found, IdentityError, describe, now_ms, oauth};
use crate::metrics::METRICS;
use crate::upstream::config::{OAuthConfig, UpstreamConfig};

/// When an exchanged token is renewed (unix ms): before it runs out by the configured margin,
/// or by half its lifetime when that is shorter, so a short-lived token is not renewed on
/// every request.
pub(super) const REFRESH_AT_MS: &str = "refresh_at_ms";

/// Exchanged tokens kept at most: one per (server, tenant, principal) in use.
const MAX_CACHED: usize = 10_000;

/// (server, tenant, principal).
type CacheKey = (String, String, String);

/// The exchanged tokens of one worker, in memory.
#[derive(Default)]
pub(super) struct Exchanged {
    tokens: Mutex<HashMap<CacheKey, Credential>>,
}

impl Exchanged {
    fn key(holder: &Holder) -> CacheKey {
        (holder.upstream.clone(), holder.tenant.clone(), holder.principal.clone().unwrap_or_default())
    }

    fn get(&self, holder: &Holder) -> Option<Credential> {
        self.lock().get(&Self::key(holder)).cloned()
    }

    fn put(&self, holder: &Holder, credential: Credential) {
        let mut tokens = self.lock();
        if tokens.len() >= MAX_CACHED {
            let now = now_ms();
            tokens.retain(|_, c| expires_at(c).is_some_and(|at| at > now));
            if tokens.len() >= MAX_CACHED {
                // Still full of live tokens: start over rather than grow without bound.
                tokens.clear();
            }
        }
        tokens.insert(Self::key(holder), credential);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CacheKey, Credential>> {
        self.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn expires_at(credential: &Credential) -> Option<u64> {
    credential.get(EXPIRES_AT_MS).and_then(|v| v.parse().ok())
}

/// Whether the exchanged token is missing or due for renewal.
fn due(credential: &Credential) -> bool {
    let refresh_at = credential.get(REFRESH_AT_MS).and_then(|v| v.parse::<u64>().ok());
    match (credential.get(taskgate_shared::credentials::ACCESS_TOKEN), refresh_at) {
        (Some(_), Some(at)) => now_ms() >= at,
        _ => true,
    }
}

/// Sets when a newly issued token is renewed: `margin` before it runs out, or half its
/// lifetime before, whichever is sooner to run out.
fn schedule(credential: &mut Credential, margin: Duration) {
    let now = now_ms();
    let expires = expires_at(credential).unwrap_or(now);
    let lifetime = expires.saturating_sub(now);
    let margin = u64::try_from(margin.as_millis()).unwrap_or(u64::MAX).min(lifetime / 2);
    credential.set(REFRESH_AT_MS, expires.saturating_sub(margin).to_string());
}

impl Credentials {
    /// For a token-exchange server: the caller's own token that task `task_id` brought, and the
    /// token exchanged for the caller before (if any, in memory). A task without one (its
    /// caller was not authenticated by a JWT, or the token has run out) is refused with the
    /// typed error that asks for a new call.
    pub(crate) async fn subject(
        &self,
        config: &UpstreamConfig,
        tenant: &str,
        principal: &str,
        task_id: &str,
    ) -> Result<Found, IdentityError> {
        let holder =
            Holder { tenant: tenant.to_owned(), principal: Some(principal.to_owned()), upstream: config.name.clone() };
        let record = match TaskId::parse(task_id) {
            Some(id) => self
                .store
                .subject_token(&id)
                .await
                .map_err(|source| IdentityError::Store { upstream: config.name.clone(), source })?,
            None => None,
        };
        let Some(record) = record else {
            METRICS.upstream_credential_misses.with_label_values(&[&config.name]).inc();
            tracing::info!(
                target: "taskgate::audit",
                action = "credential.missing",
                upstream = %config.name,
                tenant,
                principal,
                needs = SUBJECT_TOKEN,
                "no token of the caller to exchange: call refused"
            );
            return Err(IdentityError::NoSubjectToken {
                upstream: config.name.clone(),
                holder: describe(&holder),
                tenant: tenant.to_owned(),
                principal: principal.to_owned(),
            });
        };
        let keys = self.keys.as_ref().ok_or_else(|| IdentityError::NoKeys { upstream: config.name.clone() })?;
        let sealed_for = Holder::subject_token(tenant, principal, task_id);
        let subject =
            Sealed::from_json(&record).and_then(|sealed| keys.open(&sealed_for, &sealed)).map_err(|source| {
                tracing::warn!(
                    target: "taskgate::audit",
                    action = "credential.unusable",
                    upstream = %config.name,
                    tenant,
                    error = %source,
                    "the caller's token handed over with the task does not open: call refused"
                );
                IdentityError::Unusable { upstream: config.name.clone(), holder: describe(&holder), source }
            })?;
        let credential = self.exchanged.get(&holder).unwrap_or_default();
        Ok(Found { holder, credential, record: String::new(), subject: Some(subject) })
    }

    /// `found` with a valid exchanged token: the one it holds while it is not due, else one
    /// another call renewed meanwhile, else renewed with the endpoint's refresh token, else
    /// exchanged anew from the caller's token.
    pub(crate) async fn fresh_exchanged(&self, oauth: &OAuthConfig, found: Found) -> Result<Found, IdentityError> {
        if !due(&found.credential) {
            return Ok(found);
        }
        if let Some(cached) = self.exchanged.get(&found.holder).filter(|c| !due(c)) {
            return Ok(Found { credential: cached, ..found });
        }
        let upstream = found.holder.upstream.clone();
        if found.credential.get(REFRESH_TOKEN).is_some() {
            match oauth::refresh(&self.http, oauth, &found.credential).await {
                Ok(mut refreshed) => {
                    METRICS.upstream_credential_refreshes.with_label_values(&[&upstream, "refreshed"]).inc();
                    schedule(&mut refreshed, oauth.refresh_before);
                    self.exchanged.put(&found.holder, refreshed.clone());
                    return Ok(Found { credential: refreshed, ..found });
                }
                Err(reason) => {
                    // The caller's token may still be exchanged: a failed refresh only costs that.
                    METRICS.upstream_credential_refreshes.with_label_values(&[&upstream, "failed"]).inc();
                    self.audit_failure(&found.holder, "credential.refresh_failed", &reason);
                }
            }
        }
        let Some(subject) = found.subject.as_ref().and_then(|s| s.get(SUBJECT_TOKEN)) else {
            return Err(IdentityError::NoSubjectToken {
                upstream,
                holder: describe(&found.holder),
                tenant: found.holder.tenant.clone(),
                principal: found.holder.principal.clone().unwrap_or_default(),
            });
        };
        match oauth::exchange(&self.http, oauth, subject).await {
            Ok(mut exchanged) => {
                METRICS.upstream_credential_refreshes.with_label_values(&[&upstream, "exchanged"]).inc();
                tracing::info!(upstream = %upstream, tenant = %found.holder.tenant, "caller's token exchanged for the upstream");
                schedule(&mut exchanged, oauth.refresh_before);
                self.exchanged.put(&found.holder, exchanged.clone());
                Ok(Found { credential: exchanged, ..found })
            }
            Err(reason) => {
                METRICS.upstream_credential_refreshes.with_label_values(&[&upstream, "exchange_failed"]).inc();
                self.audit_failure(&found.holder, "credential.exchange_failed", &reason);
                Err(IdentityError::Exchange { upstream, holder: describe(&found.holder), reason })
            }
        }
    }

    /// A failed renewal, in the audit log: whose, where, and the endpoint's reason (an error
    /// code or a transport failure, never a token).
    fn audit_failure(&self, holder: &Holder, action: &'static str, reason: &str) {
        tracing::warn!(
            target: "taskgate::audit",
            action,
            upstream = %holder.upstream,
            tenant = %holder.tenant,
            principal = holder.principal.as_deref().unwrap_or(""),
            reason,
            "could not get a token for the caller"
        );
    }
}

#[cfg(test)]
mod tests {
    use taskgate_shared::credentials::ACCESS_TOKEN;

    use super::*;

    fn token(lifetime_ms: u64, margin: Duration) -> Credential {
        let mut credential = Credential::default();
        credential.set(ACCESS_TOKEN, "at".into());
        credential.set(EXPIRES_AT_MS, (now_ms() + lifetime_ms).to_string());
        schedule(&mut credential, margin);
        credential
    }

    #[test]
    fn an_exchanged_token_is_renewed_before_it_runs_out_but_not_on_every_request() {
        assert!(due(&Credential::default()), "nothing exchanged yet");
        assert!(!due(&token(3_600_000, Duration::from_secs(60))));
        assert!(!due(&token(30_000, Duration::from_secs(60))), "half of a short lifetime is left to use");
        assert!(due(&token(0, Duration::from_secs(60))));
        let at: u64 = token(10_000, Duration::from_secs(60)).get(REFRESH_AT_MS).unwrap().parse().unwrap();
        assert!(at >= now_ms() + 4_000 && at <= now_ms() + 5_500, "renewed halfway: {at}");
    }

    #[test]
    fn the_cache_is_per_server_tenant_and_principal() {
        let cache = Exchanged::default();
        let alice = Holder { tenant: "acme".into(), principal: Some("alice".into()), upstream: "fx".into() };
        let bob = Holder { principal: Some("bob".into()), ..alice.clone() };
        cache.put(&alice, token(60_000, Duration::from_secs(1)));
        assert!(cache.get(&alice).is_some());
        assert!(cache.get(&bob).is_none());
        assert!(cache.get(&Holder { upstream: "other".into(), ..alice }).is_none());
    }
}
