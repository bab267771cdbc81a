//! Webhook subscriptions (docs/events.md, 2.8 and 2.9): the subscribe and unsubscribe writes,
//! and a deliverer's claims, renewals and fenced acknowledgements. Each write is one script in
//! the subscription's hook bucket.

use redis::AsyncCommands as _;

use super::keys::{HOOK_BUCKETS, hook_bucket};
use super::outcomes::{HookAck, HookClaim, HookRenewal, HookSecrets, HookWrite, Upserted};
use super::scripts::{ack_hook, claim_hook, drop_hook, renew_hook, upsert_hook};
use super::{Store, StoreError};

/// A subscription as the operator console lists it: never its secret, nor its URL's path or
/// query (they often carry tokens).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedHook {
    pub tenant: String,
    /// The subscriber within its tenant.
    pub principal: String,
    pub id: String,
    /// The event type.
    pub name: String,
    /// The URL's scheme, host and port only.
    pub origin: String,
    /// False once dead letters in a row suspended it.
    pub active: bool,
    pub expires_ms: Option<u64>,
    pub last_delivery_ms: Option<u64>,
    /// The last failure's category.
    pub last_error: Option<String>,
    pub failed_since_ms: Option<u64>,
    /// Dead letters kept (at most 100).
    pub dead_letters: u64,
    /// The newest dead letters, newest first.
    pub newest_dead: Vec<DeadLetter>,
}

/// One event a subscription gave up on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    pub event_id: String,
    pub at_ms: u64,
    pub reason: String,
    pub attempts: u64,
}

/// The record fields the listing reads, in `HMGET` order (never `secret`).
const LISTED: [&str; 8] = ["principal", "url", "name", "active", "exp", "last_ok", "last_err", "failed_since"];

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

    /// The sealed secrets of `id` as its record holds them now (empty when it is gone). A
    /// deliverer reads them beside each outbox read, so that a refresh's new secret signs
    /// from the next read on rather than from the next lease renewal.
    pub async fn hook_secrets(&self, bucket: u8, id: &str) -> Result<HookSecrets, StoreError> {
        let (record, _) = self.keys().hook_in(bucket, id);
        let (secret, secret_old, old_until): (Option<String>, Option<String>, Option<u64>) = redis::cmd("HMGET")
            .arg(&record)
            .arg("secret")
            .arg("secret_old")
            .arg("old_until")
            .query_async(&mut self.conn())
            .await?;
        Ok(HookSecrets {
            secret: secret.unwrap_or_default(),
            secret_old: secret_old.unwrap_or_default(),
            old_until_ms: old_until.unwrap_or(0),
        })
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
            park_ms: write.park_ms,
        };
        ack_hook::call(&mut self.conn(), keys, args).await
    }

    /// Up to `max` subscriptions (of `tenant`, or of every tenant), each with its newest
    /// `letters` dead letters, sorted by tenant and id. Two round trips: the ids (one command
    /// per bucket read, sent together), then one pipeline per bucket for the records and
    /// dead letters (a bucket is one Cluster slot).
    pub async fn list_hooks(
        &self,
        tenant: Option<&str>,
        max: usize,
        letters: usize,
    ) -> Result<Vec<ListedHook>, StoreError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let now = crate::task::now_ms();
        let buckets: Vec<u8> = match tenant {
            Some(tenant) => vec![hook_bucket(tenant)],
            None => Self::hook_buckets().collect(),
        };
        let reads = buckets.iter().map(|&bucket| {
            let key = match tenant {
                // The tenant's set is scored by expiry: a lapsed id is not read.
                Some(tenant) => self.keys().hook(tenant, "", "", "").tenant,
                None => self.keys().hook_index(bucket),
            };
            let (from, to) = if tenant.is_some() {
                (now.to_string(), "+inf".to_owned())
            } else {
                ("-inf".to_owned(), "+inf".to_owned())
            };
            let mut conn = self.conn();
            async move {
                let ids: Vec<String> = redis::cmd("ZRANGE")
                    .arg(&key)
                    .arg(from)
                    .arg(to)
                    .arg("BYSCORE")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(max)
                    .query_async(&mut conn)
                    .await?;
                Ok::<_, StoreError>((bucket, ids))
            }
        });
        let mut left = max;
        let mut wanted: Vec<(u8, Vec<String>)> = Vec::new();
        for (bucket, mut ids) in futures::future::try_join_all(reads).await? {
            ids.truncate(left);
            left -= ids.len();
            if !ids.is_empty() {
                wanted.push((bucket, ids));
            }
        }
        let last = isize::try_from(letters).unwrap_or(isize::MAX) - 1;
        let records = wanted.into_iter().map(|(bucket, ids)| {
            let mut pipe = redis::pipe();
            for id in &ids {
                let (record, dead) = self.keys().hook_in(bucket, id);
                pipe.cmd("HMGET").arg(&record).arg(&LISTED[..]);
                pipe.cmd("LLEN").arg(&dead);
                pipe.cmd("LRANGE").arg(&dead).arg(0).arg(last);
            }
            let mut conn = self.conn();
            async move {
                let replies: Vec<redis::Value> = pipe.query_async(&mut conn).await?;
                Ok::<_, StoreError>((ids, replies))
            }
        });
        let mut listed = Vec::new();
        for (ids, replies) in futures::future::try_join_all(records).await? {
            let mut replies = replies.into_iter();
            for id in ids {
                let (Some(fields), Some(count), Some(dead)) = (replies.next(), replies.next(), replies.next()) else {
                    return Err(StoreError::UnexpectedReply("hook listing".into()));
                };
                let fields: Vec<Option<String>> = decode(fields)?;
                let (count, dead): (u64, Vec<String>) = (decode(count)?, decode(dead)?);
                if let Some(hook) = listed_hook(id, &fields, count, &dead, letters)
                    && tenant.is_none_or(|t| t == hook.tenant)
                {
                    listed.push(hook);
                }
            }
        }
        listed.sort_by(|a, b| (&a.tenant, &a.id).cmp(&(&b.tenant, &b.id)));
        Ok(listed)
    }

    /// Ends subscription `id` of `tenant` whoever made it (the console's end action); false
    /// when there was none, or when the record is another tenant's (the bucket is a hash of the
    /// tenant, so another tenant's id can share it: a tenant admin ends only its own). The owner
    /// comes from the record: an id names one owner for good.
    pub async fn drop_hook_of_tenant(&self, tenant: &str, id: &str) -> Result<bool, StoreError> {
        let record = self.keys().hook(tenant, "", id, "").record;
        let (owner, subscriber): (Option<String>, Option<String>) =
            redis::cmd("HMGET").arg(&record).arg("owner").arg("principal").query_async(&mut self.conn()).await?;
        match (owner, subscriber) {
            (Some(owner), Some(subscriber)) if split_owner(&subscriber).0 == tenant => {
                self.drop_hook(tenant, &owner, id).await
            }
            _ => Ok(false),
        }
    }
}

fn decode<T: redis::FromRedisValue>(value: redis::Value) -> Result<T, StoreError> {
    redis::from_redis_value(value).map_err(|e| StoreError::UnexpectedReply(e.to_string()))
}

/// A listing row from a record's fields (`LISTED`); `None` when the record is gone.
fn listed_hook(
    id: String,
    fields: &[Option<String>],
    count: u64,
    dead: &[String],
    letters: usize,
) -> Option<ListedHook> {
    let field = |i: usize| fields.get(i).cloned().flatten().filter(|v| !v.is_empty());
    let number = |i: usize| field(i).and_then(|v| v.parse::<u64>().ok());
    let (tenant, principal) = split_owner(&field(0)?);
    Some(ListedHook {
        tenant,
        principal,
        id,
        name: field(2).unwrap_or_default(),
        origin: field(1).map(|url| url_origin(&url)).unwrap_or_default(),
        active: field(3).as_deref() != Some("0"),
        expires_ms: number(4).filter(|&exp| exp > 0),
        last_delivery_ms: number(5),
        last_error: field(6),
        failed_since_ms: number(7),
        dead_letters: count,
        newest_dead: dead.iter().take(letters).filter_map(|letter| dead_letter(letter)).collect(),
    })
}

fn dead_letter(json: &str) -> Option<DeadLetter> {
    let value: serde_json::Value = serde_json::from_str(json).ok()?;
    Some(DeadLetter {
        event_id: value.get("eventId")?.as_str()?.to_owned(),
        at_ms: value.get("at").and_then(serde_json::Value::as_u64).unwrap_or(0),
        reason: value.get("reason").and_then(serde_json::Value::as_str).unwrap_or("").to_owned(),
        attempts: value.get("attempts").and_then(serde_json::Value::as_u64).unwrap_or(0),
    })
}

/// `Owner::key` back into its tenant and principal.
fn split_owner(key: &str) -> (String, String) {
    let unescape = |part: &str| part.replace("%2F", "/").replace("%25", "%");
    match key.split_once('/') {
        Some((tenant, principal)) => (unescape(tenant), unescape(principal)),
        None => (unescape(key), String::new()),
    }
}

/// A URL's scheme, host and port: everything before the path, the query or the fragment,
/// less any user info (the path and query often carry tokens).
fn url_origin(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    if scheme.is_empty() { host.to_owned() } else { format!("{scheme}://{host}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_keeps_scheme_host_and_port_only() {
        assert_eq!(url_origin("https://hooks.example:8443/p/tok?key=s3cret#x"), "https://hooks.example:8443");
        assert_eq!(url_origin("https://u:pw@h.example?t=1"), "https://h.example");
        assert_eq!(url_origin("https://[::1]:9/a"), "https://[::1]:9");
    }

    #[test]
    fn an_owner_key_splits_and_unescapes() {
        assert_eq!(split_owner("a%2Fb/c%25d%2Fe"), ("a/b".to_owned(), "c%d/e".to_owned()));
    }
}
