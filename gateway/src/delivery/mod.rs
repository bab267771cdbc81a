//! The webhook delivery loop (docs/events.md, 2.9): claims subscriptions with fenced leases
//! per hook bucket, reads each one's owner outbox past its acknowledged position, and POSTs
//! each occurrence signed, one at a time per subscription (so in stream order), retrying with
//! jittered exponential backoff and dead-lettering what runs out of attempts.
//!
//! Leases follow the worker model (invariants 3, 12 and 13): a larger fence per claim, renewed
//! together every third of the lease, every write fenced, and a subscription whose lease cannot
//! be shown valid is not POSTed for. Positions are written coalesced, and always before a lease
//! is released.

mod outbox;
mod subscription;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use taskgate_shared::store::{HookRenewal, Store};
use tokio_util::sync::CancellationToken;

use crate::config::WebhookSettings;
use crate::egress::Egress;
use crate::metrics::METRICS;
use crate::state::AppState;

/// Subscriptions claimed per bucket per pass, at most.
const CLAIMS_PER_PASS: usize = 64;
/// How often free subscriptions are looked for.
const CLAIM_EVERY: Duration = Duration::from_millis(1_000);

/// One held subscription, as the loop and the renewer share it.
pub(super) struct Held {
    pub(super) bucket: u8,
    pub(super) fence: u64,
    /// Ended when the lease is lost or the process stops.
    pub(super) stop: CancellationToken,
    /// Until when the lease is known valid (invariant 12).
    pub(super) valid_until: Mutex<Instant>,
    /// The sealed secrets as the last renewal read them: a refresh's new secret reaches the
    /// holder without a new claim.
    pub(super) secrets: Mutex<Secrets>,
}

#[derive(Clone, Default)]
pub(super) struct Secrets {
    pub(super) secret: String,
    pub(super) secret_old: String,
    pub(super) old_until_ms: u64,
}

impl Held {
    pub(super) fn lease_valid(&self) -> bool {
        self.lease_valid_for(std::time::Duration::ZERO)
    }

    /// Whether the lease is still valid `span` from now: a POST that may take `span` is sent
    /// only then, so it cannot outlive the lease and overlap a successor's.
    pub(super) fn lease_valid_for(&self, span: std::time::Duration) -> bool {
        Instant::now() + span < *self.valid_until.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What every subscription task of this deliverer shares.
pub(super) struct Deliverer {
    pub(super) state: AppState,
    pub(super) settings: WebhookSettings,
    pub(super) egress: Arc<Egress>,
    /// This process's holder name in the records.
    pub(super) holder: String,
    /// Where outboxes are read from.
    pub(super) outbox: outbox::Outbox,
    held: Mutex<HashMap<String, Arc<Held>>>,
}

impl Deliverer {
    fn store(&self) -> &Store {
        &self.state.store
    }

    /// The lease, less a margin for the renewal's own round trip and clock drift.
    fn trusted_for(&self) -> Duration {
        self.settings.lease.mul_f64(0.8)
    }

    fn held_ids(&self) -> Vec<(String, Arc<Held>)> {
        let held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        held.iter().map(|(id, h)| (id.clone(), h.clone())).collect()
    }

    fn forget(&self, id: &str) {
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        held.remove(id);
        METRICS.webhook_held.set(held.len() as i64);
    }

    /// One claim pass over every bucket: each free subscription is claimed and its task
    /// started.
    async fn claim_pass(self: &Arc<Self>, stop: &CancellationToken) {
        let lease_ms = self.settings.lease.as_millis() as u64;
        for bucket in Store::hook_buckets() {
            let now = taskgate_shared::task::now_ms();
            let candidates = match self.store().hook_candidates(bucket, now, CLAIMS_PER_PASS).await {
                Ok(ids) => ids,
                Err(err) => {
                    tracing::warn!(error = %err, "webhook claim pass: reading a bucket failed");
                    return;
                }
            };
            for id in candidates {
                if self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains_key(&id) {
                    continue;
                }
                let sent = Instant::now();
                let claim = match self.store().claim_hook(bucket, &id, &self.holder, lease_ms).await {
                    Ok(Some(claim)) => claim,
                    Ok(None) => continue,
                    Err(err) => {
                        tracing::warn!(error = %err, subscription = %id, "webhook claim failed");
                        continue;
                    }
                };
                let held = Arc::new(Held {
                    bucket,
                    fence: claim.fence,
                    stop: stop.child_token(),
                    valid_until: Mutex::new(sent + self.trusted_for()),
                    secrets: Mutex::new(Secrets {
                        secret: claim.secret.clone(),
                        secret_old: claim.secret_old.clone(),
                        old_until_ms: claim.old_until_ms,
                    }),
                });
                {
                    let mut map = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    map.insert(id.clone(), held.clone());
                    METRICS.webhook_held.set(map.len() as i64);
                }
                tracing::info!(subscription = %id, fence = claim.fence, "webhook subscription claimed");
                let this = self.clone();
                tokio::spawn(async move {
                    subscription::run(this.clone(), id.clone(), claim, held).await;
                    this.forget(&id);
                });
            }
        }
    }

    /// Renews every held lease; a lost one stops its subscription.
    async fn renew_all(&self) {
        let lease_ms = self.settings.lease.as_millis() as u64;
        let renewals = self.held_ids().into_iter().map(|(id, held)| async move {
            let sent = Instant::now();
            match self.store().renew_hook(held.bucket, &id, &self.holder, held.fence, lease_ms).await {
                Ok(HookRenewal::Renewed { secret, secret_old, old_until_ms }) => {
                    *held.valid_until.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                        sent + self.trusted_for();
                    *held.secrets.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                        Secrets { secret, secret_old, old_until_ms };
                }
                Ok(HookRenewal::Lost) => {
                    tracing::info!(subscription = %id, "webhook lease lost");
                    held.stop.cancel();
                }
                // Unknown: the lease simply runs out unless a later renewal succeeds.
                Err(err) => tracing::warn!(error = %err, subscription = %id, "webhook lease renewal failed"),
            }
        });
        // Concurrent on the multiplexed connection: one pipelined batch.
        futures::future::join_all(renewals).await;
    }
}

/// Runs the deliverer until `stop` fires, then lets the subscriptions write their positions
/// and release their leases (bounded).
pub(crate) async fn run(state: AppState, stop: CancellationToken) {
    let (Some(settings), Some(egress)) = (state.config.webhooks.clone(), state.egress.clone()) else { return };
    let holder = format!("gw-{:016x}", rand::random::<u64>());
    tracing::info!(holder = %holder, "webhook delivery on");
    let outbox = outbox::Outbox {
        shards: state.config.redis.queue_shards,
        retention_ms: state.config.events.as_ref().map_or(3_600_000, |events| events.outbox.retention_ms),
    };
    let deliverer = Arc::new(Deliverer { state, settings, egress, holder, outbox, held: Mutex::new(HashMap::new()) });
    let subscriptions = stop.child_token();
    let renew_every = deliverer.settings.lease / 3;
    let mut claims = tokio::time::interval(CLAIM_EVERY);
    let mut renewals = tokio::time::interval(renew_every);
    claims.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    renewals.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            _ = claims.tick() => deliverer.claim_pass(&subscriptions).await,
            _ = renewals.tick() => deliverer.renew_all().await,
        }
    }
    subscriptions.cancel();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !deliverer.held_ids().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
