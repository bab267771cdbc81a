//! `events/poll` (docs/events.md, 2.6): the caller's own task status changes after a cursor,
//! read from its principal's outboxes (one `read_outbox` script per shard, one round trip).
//! Ownership is structural: a caller reads only its own streams, so `taskIds` naming another's
//! tasks simply never match, and the answer is the one a made-up id gets.
//!
//! An early poll (sooner than `--poll-tolerance` of `nextPollMs` after this replica answered
//! the same owner's poll of the same name and arguments with `hasMore` false, and from the
//! cursor that answer returned) is held, with `--poll-limit hold`, until a change of one of the
//! owner's tasks is heard or `nextPollMs` since that answer passes (at most half the
//! retention, so a cursor never ages into a false gap), then read: a tight loop costs one read
//! per interval, and an event reaches a held poller within a pub/sub hop. A poll from any other
//! cursor (a replay) is read at once, and so is one beyond the held-poll bounds.

use std::time::Duration;

use serde_json::{Map, Value};
use taskgate_shared::protocol::{RpcError, result};
use taskgate_shared::store::{ReadRequest, owner_digest};

use crate::config::PollLimit;
use crate::error::GatewayError;
use crate::mcp::Call;
use crate::mcp::occurrences::{Subscription, cursor, enabled, occurrence, whole};
use crate::metrics::METRICS;

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
    let pacing = call.state.config.polls.limit == PollLimit::Hold;
    let family = pacing_family(call);
    if pacing && let Some(cursor) = &cursor {
        let longest = Duration::from_millis(settings.outbox.retention_ms / 2);
        hold_if_early(call, &owner, &format!("{family}{}", cursor.encode()), longest).await;
    }
    let request = ReadRequest {
        owner: &owner,
        shards: call.state.config.redis.queue_shards,
        cursor: cursor.as_ref(),
        max_age_ms,
        max_events,
        retention_ms: settings.outbox.retention_ms,
        only: None,
    };
    let ticket = call.state.polls.reading_for(&owner);
    let read = call.state.store.read_outbox(request, |entry| subscription.matches(entry)).await?;
    if pacing && !read.has_more {
        let key = format!("{family}{}", read.cursor.encode());
        call.state.polls.answered_replacing(&key, &family, ticket, Duration::from_millis(settings.poll_interval_ms));
    }
    let mut fields = Map::with_capacity(5);
    fields.insert("events".into(), Value::Array(read.entries.iter().map(occurrence).collect()));
    fields.insert("cursor".into(), read.cursor.encode().into());
    fields.insert("truncated".into(), read.truncated.into());
    fields.insert("hasMore".into(), read.has_more.into());
    fields.insert("nextPollMs".into(), settings.poll_interval_ms.into());
    Ok(result::complete(fields))
}

/// What makes two polls of one owner one subscription for pacing: the name and the arguments
/// as sent (arguments written differently are simply not held), as a fixed-size digest so
/// that what the pacer remembers does not grow with what a caller sends. The pacer's key is
/// this followed by the cursor.
fn pacing_family(call: &Call<'_>) -> String {
    use sha2::Digest as _;
    fn text(raw: Option<&serde_json::value::RawValue>) -> &str {
        raw.map_or("null", serde_json::value::RawValue::get)
    }
    let mut digest = sha2::Sha256::new();
    for part in ["events", text(call.params.name), text(call.params.arguments)] {
        digest.update(part.len().to_le_bytes());
        digest.update(part.as_bytes());
    }
    let hex: String = digest.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("events:{hex}:")
}

/// Waits while the poll is early: until a change of the owner's tasks is heard, the interval
/// since the last answer passes, or the gateway shuts down (then it is answered at once).
async fn hold_if_early(call: &Call<'_>, owner: &str, key: &str, longest: Duration) {
    let state = call.state;
    let pacer = &state.polls;
    let tolerance = state.config.polls.tolerance;
    if pacer.early_for(key, owner, tolerance).is_none() {
        return;
    }
    // Watch first, then look again: a change heard before the watch made the pacer forget the
    // owner; one heard after wakes the watch.
    let mut watch = state.events.watch_owner(owner, 1);
    let Some(deadline) = pacer.early_for(key, owner, tolerance) else { return };
    let deadline = deadline.min(tokio::time::Instant::now() + crate::polls::MAX_HOLD.min(longest));
    let Some(_slot) = pacer.hold(&call.principal.owner().key()) else { return };
    METRICS.held_polls.with_label_values(&["held"]).inc();
    tokio::select! {
        _ = watch.recv() => METRICS.held_polls.with_label_values(&["woken"]).inc(),
        () = tokio::time::sleep_until(deadline) => {}
        () = state.shutdown.cancelled() => {}
    }
}
