//! Whose identity an upstream call carries, for servers configured `per = "tenant"` or
//! `"principal"`: the caller's stored credential, found (one `HMGET`), opened with the worker's
//! credentials keys, and kept valid by an OAuth refresh where the server needs it; or, for a
//! server that exchanges the caller's own token (RFC 8693), the exchanged token (`exchange.rs`).
//!
//! A credential is never logged and never put in a task or an error: errors name the server,
//! the holder and the value names, nothing else.

mod exchange;
mod oauth;

use std::sync::Arc;
use std::time::Duration;

use sha2::Digest as _;
use taskgate_shared::credentials::{
    ACCESS_TOKEN, Credential, CredentialError, EXPIRES_AT_MS, Holder, KeyRing, REFRESH_TOKEN, Sealed,
};
use taskgate_shared::store::{Store, StoreError};

use super::config::{OAuthConfig, Per, UpstreamConfig};
use crate::metrics::METRICS;

/// Why a caller's credential could not be had.
#[derive(Debug, thiserror::Error)]
pub(crate) enum IdentityError {
    /// Nothing stored for the caller at this server: the caller can be told what to configure.
    #[error("no credential is stored for {holder} at upstream server {upstream:?}")]
    Missing { upstream: String, holder: String, tenant: String, principal: Option<String> },
    #[error(
        "upstream server {upstream:?} takes the caller's credential, and this worker has no --credentials-key to open it"
    )]
    NoKeys { upstream: String },
    #[error("the credential stored for {holder} at upstream server {upstream:?} cannot be used: {source}")]
    Unusable { upstream: String, holder: String, source: CredentialError },
    #[error("could not read the credential of upstream server {upstream:?}: {source}")]
    Store { upstream: String, source: StoreError },
    #[error("could not refresh the OAuth token of {holder} at upstream server {upstream:?}: {reason}")]
    Refresh { upstream: String, holder: String, reason: String },
    /// A server that exchanges the caller's own token, and the call carried none that is still
    /// there: only a new call, authenticated by a JWT, brings one.
    #[error("upstream server {upstream:?} exchanges the caller's own token, and this call by {holder} carried none")]
    NoSubjectToken { upstream: String, holder: String, tenant: String, principal: String },
    #[error("could not exchange the token of {holder} for upstream server {upstream:?}: {reason}")]
    Exchange { upstream: String, holder: String, reason: String },
}

/// What a worker finds credentials with: the store, the keys, and an HTTP client for OAuth.
pub(crate) struct Credentials {
    store: Store,
    keys: Option<Arc<KeyRing>>,
    http: reqwest::Client,
    /// Exchanged tokens, in memory only, per (server, tenant, principal).
    exchanged: exchange::Exchanged,
}

/// A credential found for a call: whose record it is, its values, and the record as stored
/// (what a refresh compares against); for a token exchange, the caller's own token the call
/// brought (its `Debug` shows names only).
#[derive(Debug, Clone)]
pub(crate) struct Found {
    pub(crate) holder: Holder,
    pub(crate) credential: Credential,
    record: String,
    subject: Option<Credential>,
}

impl Credentials {
    pub(crate) fn new(store: Store, keys: Option<Arc<KeyRing>>) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(30))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Self { store, keys, http, exchanged: exchange::Exchanged::default() }
    }

    /// The credential a call by `tenant`/`principal` runs with at `config`'s server: the
    /// principal's own (for `per = "principal"`), else the tenant's.
    pub(crate) async fn find(
        &self,
        config: &UpstreamConfig,
        tenant: &str,
        principal: &str,
    ) -> Result<Found, IdentityError> {
        let upstream = config.name.as_str();
        let wanted = Holder {
            tenant: tenant.to_owned(),
            principal: (config.per == Per::Principal).then(|| principal.to_owned()),
            upstream: upstream.to_owned(),
        };
        let stored = self
            .store
            .credential_records(&wanted)
            .await
            .map_err(|source| IdentityError::Store { upstream: upstream.into(), source })?;
        let (holder, record) = match (stored.principal, stored.tenant) {
            (Some(record), _) => (wanted, record),
            (None, Some(record)) => (Holder { principal: None, ..wanted }, record),
            (None, None) => {
                METRICS.upstream_credential_misses.with_label_values(&[upstream]).inc();
                tracing::info!(
                    target: "taskgate::audit",
                    action = "credential.missing",
                    upstream,
                    tenant,
                    principal = wanted.principal.as_deref().unwrap_or(""),
                    "no credential for the caller: call refused"
                );
                return Err(IdentityError::Missing {
                    upstream: upstream.into(),
                    holder: describe(&wanted),
                    tenant: tenant.into(),
                    principal: wanted.principal,
                });
            }
        };
        let credential = self.open(&holder, &record)?;
        Ok(Found { holder, credential, record, subject: None })
    }

    fn open(&self, holder: &Holder, record: &str) -> Result<Credential, IdentityError> {
        let keys = self.keys.as_ref().ok_or_else(|| IdentityError::NoKeys { upstream: holder.upstream.clone() })?;
        let unusable = |source| {
            tracing::warn!(
                target: "taskgate::audit",
                action = "credential.unusable",
                upstream = %holder.upstream,
                tenant = %holder.tenant,
                error = %source,
                "a stored credential does not open: call refused"
            );
            IdentityError::Unusable { upstream: holder.upstream.clone(), holder: describe(holder), source }
        };
        let sealed = Sealed::from_json(record).map_err(unusable)?;
        keys.open(holder, &sealed).map_err(unusable)
    }

    /// `found` with a valid access token: refreshed (and stored) when it runs out within the
    /// configured margin. A refresh another worker (or an operator) stored meanwhile wins: the
    /// record is read again and used if it is fresh.
    pub(crate) async fn fresh(&self, oauth: &OAuthConfig, found: Found) -> Result<Found, IdentityError> {
        let mut found = found;
        for _ in 0..3 {
            if !needs_refresh(&found.credential, oauth.refresh_before) {
                return Ok(found);
            }
            let fail = |reason: String| {
                METRICS.upstream_credential_refreshes.with_label_values(&[&found.holder.upstream, "failed"]).inc();
                IdentityError::Refresh {
                    upstream: found.holder.upstream.clone(),
                    holder: describe(&found.holder),
                    reason,
                }
            };
            let refreshed = oauth::refresh(&self.http, oauth, &found.credential).await.map_err(fail)?;
            let keys =
                self.keys.as_ref().ok_or_else(|| IdentityError::NoKeys { upstream: found.holder.upstream.clone() })?;
            let sealed = keys
                .seal(&found.holder, &refreshed, now_ms(), "oauth-refresh")
                .map_err(|source| IdentityError::Unusable {
                    upstream: found.holder.upstream.clone(),
                    holder: describe(&found.holder),
                    source,
                })?
                .to_json();
            let stored = self
                .store
                .replace_credential(&found.holder, &found.record, &sealed)
                .await
                .map_err(|source| IdentityError::Store { upstream: found.holder.upstream.clone(), source })?;
            if stored {
                METRICS.upstream_credential_refreshes.with_label_values(&[&found.holder.upstream, "refreshed"]).inc();
                tracing::info!(upstream = %found.holder.upstream, tenant = %found.holder.tenant, "upstream OAuth token refreshed");
                return Ok(Found { holder: found.holder, credential: refreshed, record: sealed, subject: None });
            }
            // Someone else wrote the record since it was read: take theirs.
            let latest = self
                .store
                .credential_records(&found.holder)
                .await
                .map_err(|source| IdentityError::Store { upstream: found.holder.upstream.clone(), source })?;
            let record = if found.holder.principal.is_some() { latest.principal } else { latest.tenant };
            let Some(record) = record else {
                return Err(IdentityError::Missing {
                    upstream: found.holder.upstream.clone(),
                    holder: describe(&found.holder),
                    tenant: found.holder.tenant.clone(),
                    principal: found.holder.principal.clone(),
                });
            };
            let credential = self.open(&found.holder, &record)?;
            found = Found { holder: found.holder, credential, record, subject: None };
        }
        Ok(found)
    }
}

/// Whether the access token is missing or runs out within `margin`.
fn needs_refresh(credential: &Credential, margin: Duration) -> bool {
    let expires = credential.get(EXPIRES_AT_MS).and_then(|v| v.parse::<u64>().ok());
    match (credential.get(ACCESS_TOKEN), expires) {
        (None, _) => credential.get(REFRESH_TOKEN).is_some(),
        (Some(_), None) => false,
        (Some(_), Some(at)) => now_ms() + u64::try_from(margin.as_millis()).unwrap_or(u64::MAX) >= at,
    }
}

/// The values an instance is started with, hashed: a change (an operator's new credential)
/// starts a new instance; an OAuth refresh, which HTTP requests pick up by themselves, does not.
pub(crate) fn fingerprint(found: &Found, refreshed_per_request: bool) -> [u8; 32] {
    let mut hash = sha2::Sha256::new();
    hash.update(describe(&found.holder).as_bytes());
    for name in found.credential.names() {
        if refreshed_per_request
            && [ACCESS_TOKEN, REFRESH_TOKEN, EXPIRES_AT_MS, exchange::REFRESH_AT_MS].contains(&name.as_str())
        {
            continue;
        }
        hash.update((name.len() as u64).to_be_bytes());
        hash.update(name.as_bytes());
        let value = found.credential.get(&name).unwrap_or_default();
        hash.update((value.len() as u64).to_be_bytes());
        hash.update(value.as_bytes());
    }
    hash.finalize().into()
}

/// `tenant "a"` or `principal "p" of tenant "a"`, for errors and logs.
pub(crate) fn describe(holder: &Holder) -> String {
    match &holder.principal {
        Some(principal) => format!("principal {principal:?} of tenant {:?}", holder.tenant),
        None => format!("tenant {:?}", holder.tenant),
    }
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The identity one instance runs with: its credential as last found, kept fresh.
pub(crate) struct Live {
    credentials: Arc<Credentials>,
    oauth: Option<OAuthConfig>,
    found: tokio::sync::Mutex<Found>,
}

impl Live {
    pub(crate) fn new(credentials: Arc<Credentials>, oauth: Option<OAuthConfig>, found: Found) -> Arc<Self> {
        Arc::new(Self { credentials, oauth, found: tokio::sync::Mutex::new(found) })
    }

    /// The credential's values now, refreshed first where the server's OAuth needs it.
    pub(crate) async fn current(&self) -> Result<Credential, IdentityError> {
        let mut found = self.found.lock().await;
        if let Some(oauth) = &self.oauth {
            let fresh = if oauth.exchanges() {
                self.credentials.fresh_exchanged(oauth, found.clone()).await?
            } else {
                self.credentials.fresh(oauth, found.clone()).await?
            };
            *found = fresh;
        }
        Ok(found.credential.clone())
    }

    /// A call found the record again (same values): keep the newer one, whose tokens may be
    /// fresher than this instance's.
    pub(crate) async fn saw(&self, found: Found) {
        *self.found.lock().await = found;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn credential(values: &[(&str, &str)]) -> Credential {
        Credential::new(values.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<BTreeMap<_, _>>())
            .unwrap()
    }

    #[test]
    fn a_token_is_refreshed_when_missing_or_about_to_run_out() {
        let margin = Duration::from_secs(60);
        assert!(needs_refresh(&credential(&[("refresh_token", "r")]), margin));
        assert!(!needs_refresh(&credential(&[("token", "t")]), margin), "no OAuth values: nothing to refresh");
        let soon = (now_ms() + 30_000).to_string();
        assert!(needs_refresh(&credential(&[("access_token", "a"), ("expires_at_ms", &soon)]), margin));
        let later = (now_ms() + 3_600_000).to_string();
        assert!(!needs_refresh(&credential(&[("access_token", "a"), ("expires_at_ms", &later)]), margin));
    }

    #[test]
    fn a_refresh_keeps_an_http_instance_and_a_new_value_does_not() {
        let holder = Holder { tenant: "a".into(), principal: None, upstream: "s".into() };
        let found = |values: &[(&str, &str)]| Found {
            holder: holder.clone(),
            credential: credential(values),
            record: String::new(),
            subject: None,
        };
        let before = found(&[("refresh_token", "r"), ("access_token", "a1"), ("root", "/x")]);
        let refreshed = found(&[("refresh_token", "r2"), ("access_token", "a2"), ("root", "/x")]);
        let changed = found(&[("refresh_token", "r"), ("access_token", "a1"), ("root", "/y")]);
        assert_eq!(fingerprint(&before, true), fingerprint(&refreshed, true));
        assert_ne!(fingerprint(&before, false), fingerprint(&refreshed, false));
        assert_ne!(fingerprint(&before, true), fingerprint(&changed, true));
    }
}
