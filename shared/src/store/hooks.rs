//! Webhook subscriptions (docs/events.md, 2.8 and 2.9): the subscribe and unsubscribe writes,
//! and a deliverer's claims, renewals and fenced acknowledgements. Each write is one script in
//! the subscription's hook bucket.

use redis::AsyncCommands as _;

use super::keys::{HOOK_BUCKETS, hook_bucket};
use super::outcomes::{HookAck, HookClaim, HookRenewal, HookWrite, Upserted};
use super::scripts::{ack_hook, claim_hook, drop_hook, renew_hook, upsert_hook};
use super::{Store, StoreError};

/// A subscription as `events/subscribe` writes it.
#[derive(Debug, Clone)]
pub struct NewHook<'a> {
    pub tenant: &'a str,
    /// The subscriber, `tenant/principal` escaped (`Owner::key`).
    pub principal: &'a str,
    /// The subscriber's owner digest (hex).
    pub owner: &'a str,
    pub id: &'a str,
    /// The digest naming the verified `(principal, url)`.
    pub verified: &'a str,
    pub url: &'a str,
    pub name: &'a str,
    /// Canonical JSON.
    pub args: &'a str,
    /// The sealed secret (JSON).
    pub secret: &'a str,
    /// 0: no expiry.
    pub ttl_ms: u64,
    /// Where a new subscription starts ('' = none known).
    pub position: &'a str,
    pub max_per_principal: u64,
    pub max_per_tenant: u64,
    /// 0: the URL was not verified by this subscribe (nothing recorded).
    pub verified_ttl_ms: u64,
    pub rotation_grace_ms: u64,
}

impl Store {
    /// Creates or refreshes a subscription, within its principal's and tenant's caps.
    pub async fn upsert_hook(&self, hook: &NewHook<'_>) -> Result<Upserted, StoreError> {
        let keys = self.keys().hook(hook.tenant, hook.owner, hook.id, hook.verified);
        let args = upsert_hook::Args {
            id: hook.id,
            principal: hook.principal,
            owner: hook.owner,
            url: hook.url,
            name: hook.name,
            args: hook.args,
            secret: hook.secret,
            ttl_ms: hook.ttl_ms,
            pos: hook.position,
            max_principal: hook.max_per_principal,
            max_tenant: hook.max_per_tenant,
            verified_ttl_ms: hook.verified_ttl_ms,
            grace_ms: hook.rotation_grace_ms,
        };
        let keys = upsert_hook::Keys {
            record: &keys.record,
            index: &keys.index,
            tenant: &keys.tenant,
            principal: &keys.principal,
            verified: &keys.verified,
            dead: &keys.dead,
        };
        upsert_hook::call(&mut self.conn(), keys, args).await
    }

    /// Whether `(principal, url)` (the digest `verified`) was verified within its TTL.
    pub async fn hook_verified(&self, tenant: &str, verified: &str) -> Result<bool, StoreError> {
        let key = self.keys().hook(tenant, "", "", verified).verified;
        Ok(self.conn().exists::<_, bool>(key).await?)
    }

    /// Ends subscription `id`; false when there was none.
    pub async fn drop_hook(&self, tenant: &str, owner: &str, id: &str) -> Result<bool, StoreError> {
        let keys = self.keys().hook(tenant, owner, id, "");
        let keys = drop_hook::Keys {
            record: &keys.record,
            dead: &keys.dead,
            index: &keys.index,
            tenant: &keys.tenant,
            principal: &keys.principal,
        };
        drop_hook::call(&mut self.conn(), keys, drop_hook::Args { id }).await
    }

    /// The bucket a tenant's subscriptions are in.
    pub fn hook_bucket_of(tenant: &str) -> u8 {
        hook_bucket(tenant)
    }

    /// Every hook bucket.
    pub fn hook_buckets() -> std::ops::Range<u8> {
        0..HOOK_BUCKETS
    }

    /// Up to `max` ids of `bucket` whose lease ran out by `now_ms` (this process's clock: the
    /// claim checks again with Redis's).
    pub async fn hook_candidates(&self, bucket: u8, now_ms: u64, max: usize) -> Result<Vec<String>, StoreError> {
        let index = self.keys().hook_index(bucket);
        let ids: Vec<String> = redis::cmd("ZRANGE")
            .arg(&index)
            .arg("-inf")
            .arg(now_ms)
            .arg("BYSCORE")
            .arg("LIMIT")
            .arg(0)
            .arg(max)
            .query_async(&mut self.conn())
            .await?;
        Ok(ids)
    }

    /// Claims subscription `id` of `bucket` for `holder`, if its lease ran out.
    pub async fn claim_hook(
        &self,
        bucket: u8,
        id: &str,
        holder: &str,
        lease_ms: u64,
    ) -> Result<Option<HookClaim>, StoreError> {
        let (record, _) = self.keys().hook_in(bucket, id);
        let index = self.keys().hook_index(bucket);
        let keys = claim_hook::Keys { record: &record, index: &index };
        claim_hook::call(&mut self.conn(), keys, claim_hook::Args { id, holder, lease_ms }).await
    }

    /// Extends `holder`'s lease on `id`, while its fence is the record's.
    pub async fn renew_hook(
        &self,
        bucket: u8,
        id: &str,
        holder: &str,
        fence: u64,
        lease_ms: u64,
    ) -> Result<HookRenewal, StoreError> {
        let (record, _) = self.keys().hook_in(bucket, id);
        let index = self.keys().hook_index(bucket);
        let keys = renew_hook::Keys { record: &record, index: &index };
        renew_hook::call(&mut self.conn(), keys, renew_hook::Args { id, holder, fence, lease_ms }).await
    }

    /// `holder`'s fenced write to `id`.
    pub async fn ack_hook(
        &self,
        bucket: u8,
        id: &str,
        holder: &str,
        fence: u64,
        write: &HookWrite<'_>,
        suspend_after: u64,
    ) -> Result<HookAck, StoreError> {
        let (record, dead) = self.keys().hook_in(bucket, id);
        let index = self.keys().hook_index(bucket);
        let keys = ack_hook::Keys { record: &record, dead: &dead, index: &index };
        let args = ack_hook::Args {
            id,
            holder,
            fence,
            pos: write.position.unwrap_or(""),
            ok: u64::from(write.ok),
            error: write.error.unwrap_or(""),
            letter: write.dead_letter.map_or("", |(letter, _)| letter),
            counts: u64::from(write.dead_letter.is_some_and(|(_, counts)| counts)),
            suspend_after,
            release: u64::from(write.release),
        };
        ack_hook::call(&mut self.conn(), keys, args).await
    }
}
