//! `events/poll` (docs/events.md, 2.6): the caller's own task status changes after a cursor,
//! read from its principal's outboxes (one `read_outbox` script per shard, one round trip).
//! Ownership is structural: a caller reads only its own streams, so `taskIds` naming another's
//! tasks simply never match, and the answer is the one a made-up id gets.

use serde_json::{Map, Value};
use taskgate_shared::protocol::{RpcError, params, result};
use taskgate_shared::store::{EventCursor, ReadRequest, owner_digest};

use crate::error::GatewayError;
use crate::mcp::Call;
use crate::mcp::occurrences::{Subscription, enabled, occurrence};

pub(crate) async fn run(call: &Call<'_>) -> Result<Value, GatewayError> {
    let settings = enabled(call)?;
    let subscription = Subscription::parse(call.params)?;
    let cursor = cursor(call)?;
    let max_age_ms = whole(call.params.max_age_ms, "maxAgeMs")?;
    let max_events = match whole(call.params.max_events, "maxEvents")? {
        None => settings.max_poll_events,
        Some(0) => return Err(RpcError::invalid_params("maxEvents must be at least 1").into()),
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX).min(settings.max_poll_events),
    };
    let owner = owner_digest(&call.principal.owner());
    let request = ReadRequest {
        owner: &owner,
        shards: call.state.config.redis.queue_shards,
        cursor: cursor.as_ref(),
        max_age_ms,
        max_events,
        retention_ms: settings.outbox.retention_ms,
    };
    let read = call.state.store.read_outbox(request, |entry| subscription.matches(entry)).await?;
    let mut fields = Map::with_capacity(5);
    fields.insert("events".into(), Value::Array(read.entries.iter().map(occurrence).collect()));
    fields.insert("cursor".into(), read.cursor.encode().into());
    fields.insert("truncated".into(), read.truncated.into());
    fields.insert("hasMore".into(), read.has_more.into());
    fields.insert("nextPollMs".into(), settings.poll_interval_ms.into());
    Ok(result::complete(fields))
}

/// `params.cursor`: absent or `null` is now; a string must be one of ours (else `-32602`).
fn cursor(call: &Call<'_>) -> Result<Option<EventCursor>, RpcError> {
    match call.params.cursor {
        None => Ok(None),
        Some(raw) if raw.get() == "null" => Ok(None),
        Some(raw) => {
            let text = params::text(Some(raw)).ok_or_else(|| RpcError::invalid_params("cursor must be a string"))?;
            EventCursor::decode(&text).map(Some).map_err(|_| RpcError::invalid_params("invalid cursor"))
        }
    }
}

/// An optional non-negative integer member (`null` reads as absent).
fn whole(member: Option<&serde_json::value::RawValue>, name: &str) -> Result<Option<u64>, RpcError> {
    match params::value(member) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => {
            value.as_u64().map(Some).ok_or_else(|| RpcError::invalid_params(format!("{name} must be a whole number")))
        }
    }
}
