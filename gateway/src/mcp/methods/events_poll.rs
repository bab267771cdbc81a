//! `events/poll` (docs/events.md, 2.6): the caller's own task status changes after a cursor,
//! read from its principal's outboxes (one `read_outbox` script per shard, one round trip).
//! Ownership is structural: a caller reads only its own streams, so `taskIds` naming another's
//! tasks simply never match, and the answer is the one a made-up id gets.

use serde_json::{Map, Value};
use taskgate_shared::protocol::{RpcError, result};
use taskgate_shared::store::{ReadRequest, owner_digest};

use crate::error::GatewayError;
use crate::mcp::Call;
use crate::mcp::occurrences::{Subscription, cursor, enabled, occurrence, whole};

pub(crate) async fn run(call: &Call<'_>) -> Result<Value, GatewayError> {
    let settings = enabled(call)?;
    let subscription = Subscription::parse(call.params)?;
    let cursor = cursor(call.params)?;
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
        only: None,
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
