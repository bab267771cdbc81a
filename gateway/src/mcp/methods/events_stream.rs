//! `events/stream` (docs/events.md, 1.5 and 2.7): push delivery of the caller's own task status
//! changes on a request-scoped SSE stream. An invalid subscription is refused at once with the
//! error a poll gives, and no stream; otherwise the stream takes a listen slot (it shares
//! `--listen-max-streams` and the per-principal share), never an in-flight request slot past
//! its head, as the extension asks.

use taskgate_shared::store::{Limit, ReadRequest, owner_digest};

use crate::error::GatewayError;
use crate::mcp::event_stream::{BATCH, EventStream, Opened, Reading};
use crate::mcp::occurrences::{Subscription, cursor, enabled, whole};
use crate::mcp::{Call, Stream};

/// Wake-ups queued per stream. They coalesce into a dirty set, and an overflow turns into a
/// re-read of every shard, so a small queue loses nothing.
const WAKE_CAPACITY: usize = 8;

pub(crate) async fn run(call: &Call<'_>) -> Result<Stream, GatewayError> {
    let state = call.state;
    let settings = enabled(call)?;
    let filter = Subscription::parse(call.params)?;
    let cursor = cursor(call.params)?;
    let max_age_ms = whole(call.params.max_age_ms, "maxAgeMs")?;
    let owner = call.principal.owner();
    // Over a bound is a matter of load, not a bad request: 429, try again later.
    let slot = state
        .listen_streams
        .acquire(owner.key(), state.config.streams.max_streams_per_principal, state.config.streams.max_streams)
        .ok_or_else(|| crate::limits::refused(Limit::ListenStreams, 1_000))?;
    let owner = owner_digest(&owner);
    // Watch before reading, so a change between the read and the watch is not missed.
    let watch = state.events.watch_owner(&owner, WAKE_CAPACITY);
    let request = ReadRequest {
        owner: &owner,
        shards: state.config.redis.queue_shards,
        cursor: cursor.as_ref(),
        max_age_ms,
        max_events: BATCH,
        retention_ms: settings.outbox.retention_ms,
        only: None,
    };
    let first = state.store.read_outbox(request, |entry| filter.matches(entry)).await?;
    let reading = Reading {
        store: state.store.clone(),
        shards: state.config.redis.queue_shards,
        retention_ms: settings.outbox.retention_ms,
        heartbeat: settings.heartbeat,
    };
    let opened = Opened { id: call.id.clone(), owner, filter, first };
    let stream = EventStream::new(opened, reading, watch, state.shutdown.clone(), slot);
    Ok(stream.into_stream(state.config.streams.keep_alive))
}
