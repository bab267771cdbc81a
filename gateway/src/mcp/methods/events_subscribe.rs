//! `events/subscribe` (Events extension, webhook mode): creates or refreshes a subscription
//! keyed by `(principal, url, name, arguments)` (docs/events.md, 1.6 and 2.8).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use taskgate_shared::credentials::{Credential, Holder};
use taskgate_shared::protocol::{ErrorKind, RpcError, params, result};
use taskgate_shared::store::{NewHook, Upserted};
use taskgate_shared::task::{iso8601_ms, now_ms};

use crate::egress::WebhookSecret;
use crate::error::GatewayError;
use crate::mcp::Call;
use crate::mcp::hooks::{self, EVENT_NAME};

/// How long a replaced secret still signs, beside the new one (ms).
const ROTATION_GRACE_MS: u64 = 5 * 60 * 1000;

pub(crate) async fn run(call: &Call<'_>) -> Result<Value, GatewayError> {
    let state = call.state;
    if state.config.webhooks.is_none() {
        return Err(RpcError::method_not_found().into());
    }
    // The extension forbids webhooks without an authenticated principal, whatever else is set.
    let principal = hooks::subscriber(call)?;
    // Webhooks deliver the outbox: without `--events` there is none, and `events/*` is unknown.
    let (Some(settings), Some(egress), Some(keyring), Some(_)) = (
        state.config.webhooks.as_ref(),
        state.egress.as_ref(),
        state.credential_keys.as_ref(),
        state.config.events.as_ref(),
    ) else {
        return Err(RpcError::method_not_found().into());
    };
    let key = hooks::key(call.params, egress)?;
    let secret =
        match params::value(call.params.delivery).as_ref().and_then(|d| d.get("secret")).and_then(Value::as_str) {
            Some(text) => WebhookSecret::parse(text).ok_or_else(|| {
                RpcError::invalid_params("delivery.secret must be whsec_ and the base64 of 24 to 64 bytes")
            })?,
            None => return Err(RpcError::invalid_params("delivery.secret is required").into()),
        };
    let ttl_ms = match call.params.ttl_ms.map(|raw| raw.get()) {
        None => settings.max_ttl.as_millis() as u64,
        Some("null") if settings.no_expiry => 0,
        Some("null") => settings.max_ttl.as_millis() as u64,
        Some(raw) => match raw.parse::<f64>() {
            Ok(ms) if ms.is_finite() && ms >= 0.0 => {
                (ms as u64).clamp(settings.min_ttl.as_millis() as u64, settings.max_ttl.as_millis() as u64)
            }
            _ => return Err(RpcError::invalid_params("ttlMs must be a non-negative number or null").into()),
        },
    };
    let position = match call.params.cursor.map(|raw| raw.get()) {
        None | Some("null") => None,
        Some(_) => match params::text(call.params.cursor) {
            // A cursor that does not decode would quietly start delivery at "now" and skip
            // events with no gap reported: refused, as a poll refuses it.
            Some(cursor) if taskgate_shared::store::EventCursor::decode(&cursor).is_ok() => Some(cursor.into_owned()),
            Some(_) => return Err(RpcError::invalid_params("invalid cursor").into()),
            None => return Err(RpcError::invalid_params("cursor must be a string or null").into()),
        },
    };
    let id = hooks::subscription_id(call, &principal, &key).await?;
    let verified = hooks::verified_digest(call, &principal, &key.url).await?;
    let tenant = principal.tenant.as_str();
    let known = egress.allow_listed(&key.url).is_some() || state.store.hook_verified(tenant, &verified).await?;
    if !known {
        egress.verify(&key.url, &id, &secret).await.map_err(|failure| {
            tracing::info!(subscription = %id, host = key.url.host_str().unwrap_or_default(), reason = failure.category(), "webhook verification failed");
            hooks::endpoint_error(failure.category())
        })?;
    }
    let owner_key = principal.owner().key();
    let holder = Holder { tenant: owner_key.clone(), principal: None, upstream: format!("webhook:{id}") };
    let credential = Credential::new(BTreeMap::from([("secret".to_owned(), secret.expose())]))
        .map_err(|_| GatewayError::from(RpcError::internal()))?;
    let sealed = keyring.seal(&holder, &credential, now_ms(), &owner_key).map_err(|err| {
        tracing::error!(error = %err, "sealing a webhook secret failed");
        GatewayError::from(RpcError::internal())
    })?;
    let owner = hooks::owner_digest(&principal);
    let start = match position {
        Some(cursor) => cursor,
        None => hooks::now_position(state, &owner).await?,
    };
    let upserted = state
        .store
        .upsert_hook(&NewHook {
            tenant,
            principal: &owner_key,
            owner: &owner,
            id: &id,
            verified: &verified,
            url: key.url.as_str(),
            name: EVENT_NAME,
            args: &key.args,
            secret: &sealed.to_json(),
            ttl_ms,
            position: &start,
            max_per_principal: settings.max_per_principal,
            max_per_tenant: settings.max_per_tenant,
            verified_ttl_ms: if known { 0 } else { settings.verified_ttl.as_millis() as u64 },
            rotation_grace_ms: ROTATION_GRACE_MS,
        })
        .await?;
    let Upserted::Written { created, expires_at_ms, position, was_active, last_ok_ms, last_error, failed_since_ms } =
        upserted
    else {
        let Upserted::Exhausted { max, .. } = upserted else { unreachable!() };
        return Err(RpcError::new(ErrorKind::ResourceExhausted, "too many webhook subscriptions")
            .with_data(json!({ "limit": "subscriptions", "max": max }))
            .into());
    };
    tracing::info!(subscription = %id, host = key.url.host_str().unwrap_or_default(), created, "webhook subscription written");
    let mut fields = Map::new();
    fields.insert("id".into(), id.into());
    fields.insert("refreshBefore".into(), expires_at_ms.map_or(Value::Null, |ms| iso8601_ms(ms as i64).into()));
    fields.insert("cursor".into(), if position.is_empty() { Value::Null } else { position.into() });
    fields.insert("truncated".into(), false.into());
    if !created {
        let at = |ms: Option<u64>| ms.map_or(Value::Null, |ms| iso8601_ms(ms as i64).into());
        fields.insert(
            "deliveryStatus".into(),
            json!({
                "active": was_active,
                "lastDeliveryAt": at(last_ok_ms),
                "lastError": last_error,
                "failedSince": at(failed_since_ms),
            }),
        );
    }
    Ok(result::complete(fields))
}
