//! What `events/subscribe` and `events/unsubscribe` share: the subscription key's parts read
//! from params, the server-derived subscription id, and the refusals the extension names.

use hmac::{Hmac, Mac};
use serde_json::{Map, Value, json};
use sha2::Sha256;
use taskgate_shared::protocol::{ErrorKind, Params, RpcError, params};
use taskgate_shared::store::SharedSecret;

use crate::auth::Principal;
use crate::config::Auth;
use crate::egress::{Egress, UrlRefusal};
use crate::error::GatewayError;
use crate::mcp::Call;
use crate::metrics::METRICS;

/// The one event type taskgate offers (docs/events.md, 2.2).
pub(crate) const EVENT_NAME: &str = "taskgate.task.status";
/// The most task ids a subscription's filter may name.
const MAX_TASK_IDS: usize = 100;
const STATUSES: [&str; 5] = ["working", "input_required", "completed", "failed", "cancelled"];

/// A subscription's key, as the caller gave it (docs/events.md, 1.6): the principal comes from
/// authentication.
pub(crate) struct HookKey {
    pub(crate) url: reqwest::Url,
    /// The arguments in canonical JSON (keys sorted).
    pub(crate) args: String,
}

/// The extension's refusals, with their `data`.
pub(crate) fn forbidden(message: &'static str) -> GatewayError {
    RpcError::new(ErrorKind::EventsForbidden, message).into()
}

pub(crate) fn endpoint_error(reason: &str) -> GatewayError {
    RpcError::new(ErrorKind::CallbackEndpointError, "the callback endpoint failed verification")
        .with_data(json!({ "reason": reason }))
        .into()
}

/// The caller, if the extension lets it have webhooks: an authenticated principal.
pub(crate) fn subscriber(call: &Call<'_>) -> Result<Principal, GatewayError> {
    if matches!(call.state.config.auth, Auth::None) {
        return Err(forbidden("webhook subscriptions need an authenticated principal"));
    }
    Ok(call.principal.clone())
}

/// `name` (the one type), `arguments` (the type's schema, canonical) and `delivery.url`
/// (checked by the egress policy).
pub(crate) fn key(params: &Params<'_>, egress: &Egress) -> Result<HookKey, GatewayError> {
    match params::text(params.name).as_deref() {
        Some(EVENT_NAME) => {}
        Some(_) => {
            return Err(RpcError::new(ErrorKind::NotFound, "no such event type")
                .with_data(json!({ "kind": "event" }))
                .into());
        }
        None => return Err(RpcError::invalid_params("name must be a string").into()),
    }
    let args = canonical_arguments(params::value(params.arguments))?;
    let Some(Value::Object(delivery)) = params::value(params.delivery) else {
        return Err(RpcError::invalid_params("delivery must be an object").into());
    };
    if let Some(mode) = delivery.get("mode")
        && mode != "webhook"
    {
        return Err(RpcError::invalid_params("delivery.mode must be \"webhook\"").into());
    }
    let Some(url) = delivery.get("url").and_then(Value::as_str) else {
        return Err(RpcError::invalid_params("delivery.url must be a string").into());
    };
    let url = egress.check_url(url).map_err(|refusal| {
        METRICS.webhook_refused.with_label_values(&[refusal.label()]).inc();
        match refusal {
            UrlRefusal::NotAllowed => forbidden("the callback URL is outside the allowed prefixes"),
            other => GatewayError::from(RpcError::invalid_params(other.to_string())),
        }
    })?;
    Ok(HookKey { url, args })
}

/// `arguments` against the type's input schema, in canonical form (absent is `{}`).
fn canonical_arguments(arguments: Option<Value>) -> Result<String, RpcError> {
    let invalid = |message: &'static str| RpcError::invalid_params(message);
    let object = match arguments {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(object)) => object,
        Some(_) => return Err(invalid("arguments must be an object")),
    };
    for (name, value) in &object {
        let strings = value.as_array().filter(|items| items.iter().all(Value::is_string));
        match (name.as_str(), strings) {
            ("taskIds", Some(ids)) if ids.len() <= MAX_TASK_IDS => {}
            ("statuses", Some(statuses))
                if statuses.iter().all(|s| STATUSES.contains(&s.as_str().unwrap_or_default())) => {}
            ("taskIds" | "statuses", _) => {
                return Err(invalid("arguments.taskIds (at most 100) and arguments.statuses are arrays of strings"));
            }
            _ => return Err(invalid("arguments may hold only taskIds and statuses")),
        }
    }
    // serde_json's maps are sorted by key: this is the canonical form.
    Ok(Value::Object(object).to_string())
}

/// The subscription id for a key: `sub_` + 32 hex of HMAC-SHA256 under a key derived from the
/// replicas' shared secret, over the canonical `(tenant, principal, url, name, arguments)`, so
/// it is the same on every replica and across restarts, and tells a receiver nothing of who
/// subscribed.
pub(crate) async fn subscription_id(
    call: &Call<'_>,
    principal: &Principal,
    key: &HookKey,
) -> Result<String, GatewayError> {
    let mac = keyed(call, b"taskgate webhook subscription id v1").await?;
    let digest = over(mac, &[&principal.tenant, &principal.subject, key.url.as_str(), EVENT_NAME, &key.args]);
    Ok(format!("sub_{}", hex(&digest[..16])))
}

/// The digest naming a verified `(principal, url)`.
pub(crate) async fn verified_digest(
    call: &Call<'_>,
    principal: &Principal,
    url: &reqwest::Url,
) -> Result<String, GatewayError> {
    let mac = keyed(call, b"taskgate webhook verified v1").await?;
    Ok(hex(&over(mac, &[&principal.tenant, &principal.subject, url.as_str()])[..16]))
}

/// The position "now" of an owner's outboxes: where a new subscription without a cursor
/// starts (one `TIME`).
pub(crate) async fn now_position(state: &crate::state::AppState, owner: &str) -> Result<String, GatewayError> {
    let retention_ms = state.config.events.as_ref().map_or(3_600_000, |events| events.outbox.retention_ms);
    let request = taskgate_shared::store::ReadRequest {
        owner,
        shards: state.config.redis.queue_shards,
        cursor: None,
        max_age_ms: None,
        max_events: 1,
        retention_ms,
        only: None,
    };
    Ok(state.store.read_outbox(request, |_| true).await?.cursor.encode())
}

/// An owner's digest: the hex of the first 16 bytes of SHA-256 over `Owner::key()` (the name
/// of its outbox streams, docs/events.md 2.3).
pub(crate) fn owner_digest(principal: &Principal) -> String {
    taskgate_shared::store::owner_digest(&principal.owner())
}

async fn keyed(call: &Call<'_>, label: &[u8]) -> Result<Hmac<Sha256>, GatewayError> {
    let master = call.state.secrets.get(&call.state.store, SharedSecret::Idempotency).await?;
    // A key of its own, derived from the shared one: neither tells anything of the other.
    let mut derive = Hmac::<Sha256>::new_from_slice(&master).expect("HMAC takes a key of any length");
    derive.update(label);
    Ok(Hmac::<Sha256>::new_from_slice(&derive.finalize().into_bytes()).expect("HMAC takes a key of any length"))
}

/// The MAC over length-prefixed parts (no part can run into the next).
fn over(mut mac: Hmac<Sha256>, parts: &[&str]) -> Vec<u8> {
    for part in parts {
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part.as_bytes());
    }
    mac.finalize().into_bytes().to_vec()
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_checked_and_canonical() {
        let parsed = canonical_arguments(Some(json!({"statuses": ["completed"], "taskIds": ["a"]}))).unwrap();
        assert_eq!(parsed, r#"{"statuses":["completed"],"taskIds":["a"]}"#);
        assert_eq!(canonical_arguments(None).unwrap(), "{}");
        assert!(canonical_arguments(Some(json!({"other": 1}))).is_err());
        assert!(canonical_arguments(Some(json!({"statuses": ["done"]}))).is_err());
        assert!(canonical_arguments(Some(json!([1]))).is_err());
        let many: Vec<String> = (0..101).map(|i| i.to_string()).collect();
        assert!(canonical_arguments(Some(json!({ "taskIds": many }))).is_err());
    }
}
