//! What a listing of credentials shows: who holds one for which upstream, the names of its
//! values, the key it is sealed under, and who set it when. Never a value: only the record's
//! clear part is read, nothing is opened.

use serde::Serialize;
use taskgate_shared::credentials::Sealed;
use taskgate_shared::store::{ListedCredential, Store, StoreError};
use taskgate_shared::task::iso8601_ms;

/// One credential as a listing shows it (the admin API's JSON, the console's rows).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CredentialEntry {
    pub(crate) tenant: String,
    /// `None`: the tenant's own, used by every principal of it without one of their own.
    pub(crate) principal: Option<String>,
    pub(crate) upstream: String,
    pub(crate) names: Vec<String>,
    pub(crate) key_id: String,
    /// RFC 3339.
    pub(crate) set_at: String,
    pub(crate) set_by: String,
}

impl CredentialEntry {
    pub(crate) fn new(tenant: &str, principal: Option<String>, upstream: String, record: &Sealed) -> Self {
        Self {
            tenant: tenant.to_owned(),
            principal,
            upstream,
            names: record.names.clone(),
            key_id: record.key_id.clone(),
            set_at: iso8601_ms(i64::try_from(record.set_at_ms).unwrap_or(i64::MAX)),
            set_by: record.set_by.clone(),
        }
    }

    fn from_listed(tenant: &str, listed: ListedCredential) -> Option<Self> {
        match Sealed::from_json(&listed.record) {
            Ok(record) => Some(Self::new(tenant, listed.principal, listed.upstream, &record)),
            Err(_) => {
                // The record's text is not logged: it may be anything.
                tracing::warn!(tenant, upstream = %listed.upstream, "a stored credential record is malformed; not listed");
                None
            }
        }
    }
}

/// The credentials of `tenant`, or of every tenant that has any when `None`, sorted by
/// tenant, upstream and principal.
pub(crate) async fn list(store: &Store, tenant: Option<&str>) -> Result<Vec<CredentialEntry>, StoreError> {
    let tenants = match tenant {
        Some(tenant) => vec![tenant.to_owned()],
        None => store.credential_tenants().await?,
    };
    let mut entries = Vec::new();
    for tenant in &tenants {
        let listed = store.list_credentials(tenant).await?;
        entries.extend(listed.into_iter().filter_map(|l| CredentialEntry::from_listed(tenant, l)));
    }
    Ok(entries)
}
