//! `tasks/get`: the full snapshot, in one Redis round trip for a poll that is not early
//! (ownership and the poll rate are checked in the same script; the tenant's request rate is
//! checked concurrently). Unknown, foreign and expired ids get the same error, byte for byte.
//!
//! An early poll (sooner than `--poll-tolerance` of the task's `pollIntervalMs` after the same
//! principal's previous one) is held by default and answered at the first change or once the
//! interval has passed (see `crate::polls`); `--poll-limit refuse` answers it 429 instead, and
//! `--poll-limit off` reads every poll.
//!
//! With `hold` and `off`, a poll whose answer this replica keeps for the caller (see
//! `crate::snapshots`) is answered without reading Redis; the tenant's request rate is still
//! admitted. Such an answer does not renew the fleet-wide "answered lately" marker that the
//! `poll_task` script keeps, so a principal spreading its polls over replicas is paced by each
//! replica it reaches, at no cost to Redis. `refuse` keeps its fleet-wide check on every poll
//! and reads Redis each time.

use std::time::Duration;

use taskgate_shared::protocol::result;
use taskgate_shared::store::{Limit, Polled};
use taskgate_shared::task::{Owner, Snapshot, TaskId};

use crate::config::PollLimit;
use crate::error::GatewayError;
use crate::events::{Wake, Watch};
use crate::limits;
use crate::mcp::{Call, Encoded, task_id, task_not_found};
use crate::metrics::METRICS;
use crate::snapshots::Hit;

/// A held poll re-checks with Redis at most this many times before it answers what it reads
/// (other replicas answering the same principal meanwhile could otherwise keep it waiting).
const MAX_HOLDS: usize = 3;

/// The GetTaskResult, encoded: written straight from the snapshot, its stored result spliced in.
pub(crate) async fn run(call: &Call<'_>) -> Result<Encoded, GatewayError> {
    // Writes acknowledged before this moment are seen by the answer, cached or not.
    let started = tokio::time::Instant::now();
    let id = task_id(call.params);
    let owner = call.principal.owner();
    let config = &call.state.config;
    let answer = match (config.polls.limit, id) {
        (_, Err(_)) => {
            limits::admit_request(call.state, &call.principal).await?;
            return Err(task_not_found().into());
        }
        (PollLimit::Off, Ok(id)) => {
            let (admitted, read) =
                tokio::join!(limits::admit_request(call.state, &call.principal), read(call, &id, &owner, started));
            admitted?;
            read?
        }
        (PollLimit::Refuse, Ok(id)) => match poll(call, &id, &owner, None).await? {
            Poll::Answer(answer) => answer,
            Poll::NotFound => return Err(task_not_found().into()),
            Poll::TooSoon { retry_after_ms, .. } => return Err(limits::refused(Limit::Poll, retry_after_ms)),
        },
        (PollLimit::Hold, Ok(id)) => held(call, &id, &owner, started).await?,
    };
    Ok(answer.body)
}

/// An encoded answer, and the interval the poll pacer remembers it with.
struct Answer {
    body: Encoded,
    poll_interval_ms: u64,
}

impl From<Hit> for Answer {
    fn from(hit: Hit) -> Self {
        Self { body: Encoded::Kept(hit.body), poll_interval_ms: hit.poll_interval_ms }
    }
}

/// What a poll-rate-checked read found.
enum Poll {
    Answer(Answer),
    NotFound,
    TooSoon { retry_after_ms: u64, interval_ms: u64 },
}

fn encode(snapshot: &Snapshot) -> Vec<u8> {
    result::encode_complete(snapshot.encoded_len_hint(), |out| snapshot.write_detailed(out))
}

/// Encodes what a read found, and keeps it for its owner if no change raced the read.
fn answer(call: &Call<'_>, ticket: Option<crate::snapshots::Ticket<'_>>, snapshot: &Snapshot) -> Answer {
    let body = encode(snapshot);
    if let Some(ticket) = ticket {
        call.state.snapshots.keep(ticket, snapshot, &body);
    }
    Answer { body: Encoded::Written(body), poll_interval_ms: snapshot.poll_interval_ms }
}

/// The poll-rate-checked read, admitted against the tenant's request rate alongside. With
/// `started`, the snapshot cache answers first when it can (the rate check is then this
/// replica's pacer alone).
async fn poll(
    call: &Call<'_>,
    id: &TaskId,
    owner: &Owner,
    started: Option<tokio::time::Instant>,
) -> Result<Poll, GatewayError> {
    let tolerance = call.state.config.polls.tolerance;
    let snapshots = &call.state.snapshots;
    let lookup = async {
        if let Some(started) = started
            && let Some(hit) = snapshots.get(id.as_str(), owner, started).await
        {
            return Ok(Poll::Answer(hit.into()));
        }
        let ticket = started.and_then(|_| snapshots.ticket(id.as_str()));
        Ok::<_, GatewayError>(match call.state.store.poll_task(id, owner, tolerance).await? {
            Polled::Found(snapshot) => Poll::Answer(answer(call, ticket, &snapshot)),
            Polled::NotFound => Poll::NotFound,
            Polled::TooSoon { retry_after_ms, interval_ms } => Poll::TooSoon { retry_after_ms, interval_ms },
        })
    };
    let (admitted, polled) = tokio::join!(limits::admit_request(call.state, &call.principal), lookup);
    admitted?;
    polled
}

/// A read with no poll-rate check: ownership only (checked in the script, before the record is
/// read). From the snapshot cache when it has the caller's task.
async fn read(
    call: &Call<'_>,
    id: &TaskId,
    owner: &Owner,
    started: tokio::time::Instant,
) -> Result<Answer, GatewayError> {
    let snapshots = &call.state.snapshots;
    if let Some(hit) = snapshots.get(id.as_str(), owner, started).await {
        return Ok(hit.into());
    }
    let ticket = snapshots.ticket(id.as_str());
    match call.state.store.get_owned_task(id, owner).await? {
        Some(snapshot) => Ok(answer(call, ticket, &snapshot)),
        None => Err(task_not_found().into()),
    }
}

/// Why a poll is held, and until when.
enum Hold {
    /// This replica answered the principal lately (the task has not changed since): the
    /// deadline is looked up again once the poll watches the task.
    Local,
    /// Another replica did: Redis said "too soon", which it says only while the task is
    /// unchanged since. (A change in the moment between that answer and the watch is seen at
    /// the end of the hold: late, never lost.)
    Fleet(tokio::time::Instant),
}

/// `--poll-limit hold`: an early poll waits for a change or the end of the interval.
async fn held(
    call: &Call<'_>,
    id: &TaskId,
    owner: &Owner,
    started: tokio::time::Instant,
) -> Result<Answer, GatewayError> {
    let state = call.state;
    let pacer = &state.polls;
    let principal = owner.key();
    let tolerance = state.config.polls.tolerance;
    // Answered here recently: hold before asking Redis anything. Not admitted against the
    // request rate: a held poll is paced, one per interval at most.
    let mut hold = pacer.early(&principal, id, tolerance).map(|_| Hold::Local);
    let give_up = tokio::time::Instant::now() + crate::polls::MAX_HOLD;
    for _ in 0..MAX_HOLDS {
        if let Some(reason) = hold.take() {
            // Watch first, then look again: a change heard before the watch made the pacer
            // forget the task; one heard after wakes the watch. None is slept through.
            let watch = state.events.watch(&[id.as_str()], 4);
            let deadline = match reason {
                Hold::Local => pacer.early(&principal, id, tolerance),
                Hold::Fleet(deadline) => Some(deadline),
            };
            if let Some(deadline) = deadline.map(|d| d.min(give_up)) {
                let Some(_slot) = pacer.hold(&principal) else {
                    METRICS.held_polls.with_label_values(&["refused"]).inc();
                    return Err(refused(deadline.saturating_duration_since(tokio::time::Instant::now())));
                };
                METRICS.held_polls.with_label_values(&["held"]).inc();
                if wait_for_change(call, watch, deadline).await {
                    // Changed: answer now, with what it changed to.
                    METRICS.held_polls.with_label_values(&["woken"]).inc();
                    let ticket = pacer.reading(id);
                    let answer = read(call, id, owner, started).await?;
                    pacer.answered(&principal, ticket, Duration::from_millis(answer.poll_interval_ms));
                    return Ok(answer);
                }
            }
        }
        let ticket = pacer.reading(id);
        match poll(call, id, owner, Some(started)).await? {
            Poll::Answer(answer) => {
                pacer.answered(&principal, ticket, Duration::from_millis(answer.poll_interval_ms));
                return Ok(answer);
            }
            Poll::NotFound => return Err(task_not_found().into()),
            // Another replica answered this principal lately: hold for the rest of its interval.
            Poll::TooSoon { retry_after_ms, interval_ms } => {
                let rest = Duration::from_millis(retry_after_ms)
                    + Duration::from_millis(interval_ms).mul_f64((1.0 - tolerance).max(0.0));
                hold = Some(Hold::Fleet(tokio::time::Instant::now() + rest.min(crate::polls::MAX_HOLD)));
            }
        }
    }
    read(call, id, owner, started).await
}

/// Waits until the task changes (`true`) or `deadline` passes (`false`). Shutting down counts
/// as a change: the poll is answered at once rather than cut.
async fn wait_for_change(call: &Call<'_>, mut watch: Watch, deadline: tokio::time::Instant) -> bool {
    let sleep = tokio::time::sleep_until(deadline);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            () = &mut sleep => return false,
            () = call.state.shutdown.cancelled() => return true,
            wake = watch.recv() => match wake {
                Some(Wake::Changed(..) | Wake::Resync) => return true,
                // Progress and log notices are not changes of the task.
                Some(Wake::Notice(_)) => {}
                None => return false,
            },
        }
    }
}

fn refused(wait: Duration) -> GatewayError {
    limits::refused(Limit::Poll, u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1))
}
