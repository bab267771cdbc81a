//! Per-tenant upstream credentials in Redis: one HASH per tenant, in the tenant's own hash tag
//! (beside its limit keys), field `<upstream>` for the tenant's credential and
//! `<upstream>|<principal>` for one principal's, value the sealed record's JSON. Upstream names
//! have no `|`, so the field splits unambiguously. A SET names the tenants that have any, for
//! the console; it may name a tenant whose last credential was deleted (the listing is then
//! empty), never miss one.
//!
//! Round trips: a call's lookup is one `HMGET` (the principal's field and the tenant's); a set
//! is one pipeline (`HSET`, `SADD`); a refresh's write is one compare-and-set script.

use std::sync::LazyLock;

use crate::credentials::Holder;

use super::{Store, StoreError};

/// The tenant's and the principal's records for one upstream, as stored (sealed JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredCredentials {
    pub principal: Option<String>,
    pub tenant: Option<String>,
}

/// One record of a tenant's listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedCredential {
    pub upstream: String,
    pub principal: Option<String>,
    pub record: String,
}

/// Writes the new record only over the one the refresh started from: an operator's set (or
/// another worker's refresh) in between wins, and the caller reads again.
static REPLACE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        "if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then \
           redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]) return 1 end return 0",
    )
});

fn field(holder: &Holder) -> String {
    match &holder.principal {
        Some(principal) => format!("{}|{principal}", holder.upstream),
        None => holder.upstream.clone(),
    }
}

impl Store {
    /// The records that may serve `holder`'s call: its principal's (when it names one) and
    /// its tenant's, in one `HMGET`.
    pub async fn credential_records(&self, holder: &Holder) -> Result<StoredCredentials, StoreError> {
        let key = self.keys().credentials(&holder.tenant);
        let tenant_field = holder.upstream.as_str();
        match &holder.principal {
            None => {
                let tenant: Option<String> =
                    redis::cmd("HGET").arg(&key).arg(tenant_field).query_async(&mut self.conn()).await?;
                Ok(StoredCredentials { principal: None, tenant })
            }
            Some(_) => {
                let (principal, tenant): (Option<String>, Option<String>) = redis::cmd("HMGET")
                    .arg(&key)
                    .arg(field(holder))
                    .arg(tenant_field)
                    .query_async(&mut self.conn())
                    .await?;
                Ok(StoredCredentials { principal, tenant })
            }
        }
    }

    /// Stores `record` for `holder`, replacing any.
    pub async fn put_credential(&self, holder: &Holder, record: &str) -> Result<(), StoreError> {
        let key = self.keys().credentials(&holder.tenant);
        redis::cmd("HSET").arg(&key).arg(field(holder)).arg(record).exec_async(&mut self.conn()).await?;
        redis::cmd("SADD")
            .arg(self.keys().credential_tenants())
            .arg(&holder.tenant)
            .exec_async(&mut self.conn())
            .await?;
        Ok(())
    }

    /// Replaces `old` with `new` for `holder` when `old` is still the record stored; false
    /// when it is not (the caller reads again).
    pub async fn replace_credential(&self, holder: &Holder, old: &str, new: &str) -> Result<bool, StoreError> {
        let key = self.keys().credentials(&holder.tenant);
        let mut call = REPLACE.prepare_invoke();
        call.key(&key).arg(field(holder)).arg(old).arg(new);
        let replaced: i64 = call.invoke_async(&mut self.conn()).await?;
        Ok(replaced == 1)
    }

    /// Deletes `holder`'s record; false when there was none.
    pub async fn delete_credential(&self, holder: &Holder) -> Result<bool, StoreError> {
        let key = self.keys().credentials(&holder.tenant);
        let removed: i64 = redis::cmd("HDEL").arg(&key).arg(field(holder)).query_async(&mut self.conn()).await?;
        Ok(removed == 1)
    }

    /// Every record of `tenant`, sorted by upstream then principal.
    pub async fn list_credentials(&self, tenant: &str) -> Result<Vec<ListedCredential>, StoreError> {
        let key = self.keys().credentials(tenant);
        let all: Vec<(String, String)> = redis::cmd("HGETALL").arg(&key).query_async(&mut self.conn()).await?;
        let mut listed: Vec<ListedCredential> = all
            .into_iter()
            .map(|(field, record)| match field.split_once('|') {
                Some((upstream, principal)) => {
                    ListedCredential { upstream: upstream.into(), principal: Some(principal.into()), record }
                }
                None => ListedCredential { upstream: field, principal: None, record },
            })
            .collect();
        listed.sort_by(|a, b| (&a.upstream, &a.principal).cmp(&(&b.upstream, &b.principal)));
        Ok(listed)
    }

    /// Stores the caller's own token (sealed) beside task `id`, for `ttl_ms`: written before
    /// the task is created, so a worker that claims it finds the token; if the create fails,
    /// it just expires.
    pub async fn put_subject_token(
        &self,
        id: &crate::task::TaskId,
        sealed: &str,
        ttl_ms: u64,
    ) -> Result<(), StoreError> {
        let key = self.keys().task(id).subject;
        redis::cmd("SET").arg(&key).arg(sealed).arg("PX").arg(ttl_ms.max(1)).exec_async(&mut self.conn()).await?;
        Ok(())
    }

    /// The sealed token stored beside task `id`, if it is there and has not expired.
    pub async fn subject_token(&self, id: &crate::task::TaskId) -> Result<Option<String>, StoreError> {
        let key = self.keys().task(id).subject;
        Ok(redis::cmd("GET").arg(&key).query_async(&mut self.conn()).await?)
    }

    /// The tenants that have (or had) a credential, sorted.
    pub async fn credential_tenants(&self) -> Result<Vec<String>, StoreError> {
        let mut tenants: Vec<String> =
            redis::cmd("SMEMBERS").arg(self.keys().credential_tenants()).query_async(&mut self.conn()).await?;
        tenants.sort();
        Ok(tenants)
    }
}
