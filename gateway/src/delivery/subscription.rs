//! One held subscription: read, POST in order, retry, dead-letter, acknowledge.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Value, json};
use taskgate_shared::credentials::{Holder, Sealed};
use taskgate_shared::store::{HookAck, HookClaim, HookWrite};

use super::outbox::{self, Occurrence};
use super::{Deliverer, Held, Secrets};
use crate::egress::{Answered, Failure, Post, WebhookSecret, random_token, unix_seconds};
use crate::events::Watch;
use crate::metrics::METRICS;

/// Events read at once.
const BATCH: usize = 64;
/// Acknowledgements are written at most this often, or every [`ACK_EVERY_EVENTS`].
const ACK_EVERY: Duration = Duration::from_millis(50);
const ACK_EVERY_EVENTS: usize = 32;
/// How long a failed read waits before reading again.
const RETRY: Duration = Duration::from_millis(300);
/// How long a quiet subscription waits for a wake-up before reading again anyway (jittered
/// between half and all of it): the backstop for a wake-up lost in transit. A change of one of
/// the owner's tasks wakes it at once (the event hub's owner watch).
const BACKSTOP: Duration = Duration::from_secs(5);
/// Wake-ups queued per subscription: they coalesce into one read, and an overflow is a read.
const WAKE_CAPACITY: usize = 8;
/// The longest retry delay.
const MAX_DELAY: Duration = Duration::from_secs(300);
/// How long a subscription whose secret does not open here is left unclaimed: another replica
/// (with the right key ring) may take it then; meanwhile no replica claims and drops it every
/// pass.
const PARK_UNOPENABLE: Duration = Duration::from_secs(60);

/// How one event ended.
enum Delivered {
    Acked,
    /// Dead-lettered: the reason, the attempts, and whether it counts toward suspension.
    Dead {
        reason: &'static str,
        attempts: u32,
        counts: bool,
    },
    /// The lease is gone or the process stops: nothing more may be written or sent.
    Stopped,
}

/// What this subscription has acknowledged and not yet written.
#[derive(Default)]
struct Pending {
    position: Option<String>,
    ok: bool,
    error: Option<&'static str>,
    /// A dead letter not yet confirmed written, and whether it counts toward suspension: kept
    /// through a failed write (the script drops it when the lost write did land).
    letter: Option<(String, bool)>,
    events: usize,
    since: Option<Instant>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.events == 0 && !self.ok && self.error.is_none() && self.letter.is_none()
    }

    fn due(&self) -> bool {
        self.events >= ACK_EVERY_EVENTS || self.since.is_some_and(|since| since.elapsed() >= ACK_EVERY)
    }
}

struct Sub {
    deliverer: Arc<Deliverer>,
    id: String,
    claim: HookClaim,
    held: Arc<Held>,
    url: reqwest::Url,
    task_ids: Option<Vec<String>>,
    statuses: Option<Vec<String>>,
    pending: Pending,
    /// Where the next read starts: the last position advanced to, written or not.
    cursor: String,
    /// Changes of the owner's tasks (with an outbox): each ends a quiet wait.
    watch: Watch,
}

pub(super) async fn run(deliverer: Arc<Deliverer>, id: String, claim: HookClaim, held: Arc<Held>) {
    let Ok(url) = reqwest::Url::parse(&claim.url) else {
        tracing::warn!(subscription = %id, "webhook subscription with an unusable URL; left to expire");
        return;
    };
    let args: Value = serde_json::from_str(&claim.args).unwrap_or(Value::Null);
    let list = |name: &str| {
        args.get(name)
            .and_then(Value::as_array)
            .map(|items| items.iter().filter_map(Value::as_str).map(str::to_owned).collect())
    };
    // Watch before the first read, so a change between the read and the watch is not missed.
    let watch = deliverer.state.events.watch_owner(&claim.owner, WAKE_CAPACITY);
    let mut sub = Sub {
        watch,
        task_ids: list("taskIds"),
        statuses: list("statuses"),
        deliverer,
        id,
        held,
        url,
        pending: Pending::default(),
        cursor: claim.position.clone(),
        claim,
    };
    sub.serve().await;
}

impl Sub {
    async fn serve(&mut self) {
        'serve: loop {
            if self.held.stop.is_cancelled() || !self.held.lease_valid() {
                break;
            }
            let (task_ids, statuses) = (&self.task_ids, &self.statuses);
            let keep = |entry: &taskgate_shared::store::OutboxEntry| {
                task_ids.as_ref().is_none_or(|ids| ids.contains(&entry.task_id))
                    && statuses.as_ref().is_none_or(|s| s.contains(&entry.status))
            };
            let outbox = self.deliverer.outbox;
            let read = outbox::read(self.deliverer.store(), outbox, &self.claim.owner, &self.cursor, BATCH, keep);
            // The secrets beside the read (one round trip on the multiplexed connection): a
            // refresh's new secret signs what this read finds.
            let secrets = self.deliverer.store().hook_secrets(self.held.bucket, &self.id);
            let (read, secrets) = tokio::join!(read, secrets);
            if let Ok(secrets) = secrets
                && !secrets.secret.is_empty()
            {
                *self.held.secrets.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Secrets {
                    secret: secrets.secret,
                    secret_old: secrets.secret_old,
                    old_until_ms: secrets.old_until_ms,
                };
            }
            let batch = match read {
                Ok(batch) => batch,
                Err(err) => {
                    tracing::warn!(error = %err, subscription = %self.id, "reading a webhook outbox failed");
                    if self.wait(RETRY).await {
                        break;
                    }
                    continue;
                }
            };
            if batch.gap {
                METRICS.webhook_deliveries.with_label_values(&["gap"]).inc();
                let body = json!({ "type": "gap", "cursor": batch.end });
                let id = format!("msg_gap_{}", random_token());
                match self.deliver(&id, body).await {
                    Delivered::Stopped => break,
                    Delivered::Acked | Delivered::Dead { .. } => {}
                }
            }
            let quiet = batch.events.is_empty();
            for event in batch.events {
                if !self.wanted(&event) {
                    self.advance(event.cursor);
                    continue;
                }
                let mut body = event.body;
                if let Some(object) = body.as_object_mut() {
                    object.insert("cursor".into(), event.cursor.clone().into());
                }
                match self.deliver(&event.event_id, body).await {
                    Delivered::Acked => {
                        let lag_ms = taskgate_shared::task::now_ms().saturating_sub(event.changed_ms);
                        METRICS.webhook_lag.observe(lag_ms as f64 / 1000.0);
                        self.pending.ok = true;
                        self.pending.error = None;
                        self.advance(event.cursor.clone());
                    }
                    Delivered::Dead { reason, attempts, counts } => {
                        self.advance(event.cursor.clone());
                        let letter = json!({
                            "eventId": event.event_id,
                            "at": taskgate_shared::task::now_ms(),
                            "reason": reason,
                            "attempts": attempts,
                        })
                        .to_string();
                        self.pending.letter = Some((letter, counts));
                        // Confirmed before anything else is sent: one unwritten letter at a
                        // time, so a second cannot take its place after a failed write.
                        loop {
                            if !self.flush(false).await {
                                return;
                            }
                            if self.pending.letter.is_none() {
                                break;
                            }
                            if self.wait(RETRY).await {
                                break 'serve;
                            }
                        }
                    }
                    Delivered::Stopped => break,
                }
                if self.pending.due() && !self.flush(false).await {
                    return;
                }
            }
            if quiet && batch.end != self.cursor {
                self.advance(batch.end);
            }
            if !self.pending.is_empty() && !self.flush(false).await {
                return;
            }
            if quiet && self.wait_for_change().await {
                break;
            }
        }
        // Positions first, then the lease (only while it is still ours to write).
        if self.held.lease_valid() {
            self.flush(true).await;
        }
    }

    fn wanted(&self, event: &Occurrence) -> bool {
        self.task_ids.as_ref().is_none_or(|ids| ids.contains(&event.task_id))
            && self.statuses.as_ref().is_none_or(|statuses| statuses.contains(&event.status))
    }

    fn advance(&mut self, position: String) {
        if self.pending.since.is_none() {
            self.pending.since = Some(Instant::now());
        }
        self.cursor.clone_from(&position);
        self.pending.position = Some(position);
        self.pending.events += 1;
    }

    /// Writes what is pending (a dead letter with it), fenced; false when the write was
    /// refused or the subscription is now suspended: this deliverer stops.
    async fn flush(&mut self, release: bool) -> bool {
        self.write(release, Duration::ZERO).await
    }

    /// [`Self::flush`], releasing the lease parked for `park` when `release`.
    async fn write(&mut self, release: bool, park: Duration) -> bool {
        let write = HookWrite {
            position: self.pending.position.as_deref(),
            ok: self.pending.ok,
            error: self.pending.error,
            dead_letter: self.pending.letter.as_ref().map(|(letter, counts)| (letter.as_str(), *counts)),
            release,
            park_ms: u64::try_from(park.as_millis()).unwrap_or(u64::MAX),
        };
        let suspend_after = u64::from(self.deliverer.settings.suspend_after);
        let held = &self.held;
        let written = self
            .deliverer
            .store()
            .ack_hook(held.bucket, &self.id, &self.deliverer.holder, held.fence, &write, suspend_after)
            .await;
        match written {
            Ok(HookAck::Written { active }) => {
                if let Some(position) = self.pending.position.take() {
                    self.claim.position = position;
                }
                self.pending = Pending::default();
                if !active {
                    tracing::warn!(subscription = %self.id, "webhook subscription suspended after dead letters in a row");
                }
                active
            }
            Ok(HookAck::Refused) => {
                tracing::info!(subscription = %self.id, "webhook acknowledgement refused (stale fence or gone); stopping");
                self.held.stop.cancel();
                false
            }
            Err(err) => {
                // Unknown whether it was written: keep it pending and try again at the next write.
                tracing::warn!(error = %err, subscription = %self.id, "webhook acknowledgement failed");
                true
            }
        }
    }

    /// Waits for a change of one of the owner's tasks, or the jittered backstop, unless stopped
    /// first; true when stopped. Wake-ups already queued coalesce into this one read.
    async fn wait_for_change(&mut self) -> bool {
        let backstop = BACKSTOP.mul_f64(0.5 + rand::random::<f64>() / 2.0);
        let stopped = tokio::select! {
            () = self.held.stop.cancelled() => true,
            _ = self.watch.recv() => false,
            () = tokio::time::sleep(backstop) => false,
        };
        while self.watch.try_recv().is_some() {}
        stopped
    }

    /// Waits `delay` unless stopped first; true when stopped.
    async fn wait(&self, delay: Duration) -> bool {
        tokio::select! {
            () = self.held.stop.cancelled() => true,
            () = tokio::time::sleep(delay) => false,
        }
    }

    /// The signatures of one attempt: the current secret's, and the replaced one's during its
    /// grace. `None` when the secret cannot be opened.
    fn signatures(&self, id: &str, timestamp: i64, body: &[u8]) -> Option<String> {
        let keyring = self.deliverer.state.credential_keys.as_ref()?;
        let secrets = self.held.secrets.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let holder =
            Holder { tenant: self.claim.principal.clone(), principal: None, upstream: format!("webhook:{}", self.id) };
        let open = |sealed: &str| -> Option<WebhookSecret> {
            let sealed = Sealed::from_json(sealed).ok()?;
            let credential = keyring.open(&holder, &sealed).ok()?;
            WebhookSecret::parse(credential.get("secret")?)
        };
        let mut signatures = vec![open(&secrets.secret)?.sign(id, timestamp, body)];
        if !secrets.secret_old.is_empty() && secrets.old_until_ms > taskgate_shared::task::now_ms() {
            signatures.extend(open(&secrets.secret_old).map(|old| old.sign(id, timestamp, body)));
        }
        Some(signatures.join(" "))
    }

    /// POSTs one body until it is accepted, refused for good, or out of attempts.
    async fn deliver(&mut self, webhook_id: &str, body: Value) -> Delivered {
        let deliverer = self.deliverer.clone();
        let settings = &deliverer.settings;
        let body = Bytes::from(body.to_string());
        let mut attempts = 0;
        loop {
            if self.held.stop.is_cancelled() || !self.held.lease_valid_for(settings.timeout) {
                return Delivered::Stopped;
            }
            attempts += 1;
            let timestamp = unix_seconds();
            let Some(signature) = self.signatures(webhook_id, timestamp, &body) else {
                // A key ring without the sealing key (a replica configured apart from the
                // rest) or a damaged record: nothing can be signed here. Parked, with the cause
                // on the record for the console, so that no replica claims and drops it every
                // pass; the client's next refresh with its secret seals it again.
                tracing::error!(subscription = %self.id, "cannot open a webhook subscription's secret; parked");
                self.pending.error = Some("secret");
                self.write(true, PARK_UNOPENABLE).await;
                self.held.stop.cancel();
                return Delivered::Stopped;
            };
            let post = Post {
                url: &self.url,
                body: body.clone(),
                headers: vec![
                    ("webhook-id", webhook_id.to_owned()),
                    ("webhook-timestamp", timestamp.to_string()),
                    ("webhook-signature", signature),
                    ("x-mcp-subscription-id", self.id.clone()),
                ],
            };
            let (failure, retry_after) = match self.deliverer.egress.post(post).await {
                Answered::Status { status: 200..=299, .. } => {
                    METRICS.webhook_deliveries.with_label_values(&["ok"]).inc();
                    return Delivered::Acked;
                }
                Answered::Status { status: 410, .. } => return self.dead("gone", attempts, false),
                Answered::Status { status: 413, .. } => return self.dead("too_large", attempts, false),
                Answered::Status { status, retry_after, .. } => (Failure::of_status(status), retry_after),
                Answered::Failed(failure) => (failure, None),
            };
            self.pending.error = Some(failure.category());
            if attempts >= settings.max_attempts {
                return self.dead(failure.category(), attempts, true);
            }
            // The failure goes on the record now (the console's last error and failing-since),
            // not only once the event is acknowledged or dead-lettered: an outage shows while
            // it lasts. One fenced write per failed attempt, spaced by the backoff.
            if !self.flush(false).await {
                return Delivered::Stopped;
            }
            METRICS.webhook_deliveries.with_label_values(&["retry"]).inc();
            let delay = backoff(settings.retry_base, attempts).max(retry_after.unwrap_or_default().min(MAX_DELAY));
            if self.wait(delay).await {
                return Delivered::Stopped;
            }
        }
    }

    fn dead(&self, reason: &'static str, attempts: u32, counts: bool) -> Delivered {
        let outcome = match reason {
            "gone" | "too_large" => reason,
            _ => "dead",
        };
        METRICS.webhook_deliveries.with_label_values(&[outcome]).inc();
        METRICS.webhook_dead_lettered.with_label_values(&[reason]).inc();
        tracing::info!(subscription = %self.id, reason, attempts, "webhook event dead-lettered");
        Delivered::Dead { reason, attempts, counts }
    }
}

/// The delay before attempt `attempts + 1`: the base doubled per attempt made, at most
/// [`MAX_DELAY`], jittered between half and all of it.
fn backoff(base: Duration, attempts: u32) -> Duration {
    let full = base.saturating_mul(2u32.saturating_pow(attempts.saturating_sub(1))).min(MAX_DELAY);
    full.mul_f64(0.5 + rand::random::<f64>() * 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_within_half_and_all_and_is_capped() {
        let base = Duration::from_secs(1);
        for attempts in 1..=12 {
            let full = Duration::from_secs(1 << (attempts - 1)).min(MAX_DELAY);
            for _ in 0..50 {
                let delay = backoff(base, attempts);
                assert!(delay >= full / 2 && delay <= full, "attempt {attempts}: {delay:?} of {full:?}");
            }
        }
    }
}
