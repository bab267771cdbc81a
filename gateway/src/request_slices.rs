//! A replica's slices of its tenants' request rates, admitted in memory.
//!
//! The request rate is fleet-wide: one GCRA per tenant in Redis. Asking Redis for every request
//! would cost each of them a script, and a cached `tasks/get` nothing else, so a replica leases
//! several cells at once (`Store::lease_requests`) and admits from them until they run out or
//! [`LIFE_IN_SLICES`] slice times pass. What it leased and did not use goes back with its next
//! lease, as far as its time has not come.
//!
//! Why a slice outlives its own time: a tenant well under its rate would otherwise cost one
//! lease per slice time on every replica it reaches (100 tenants polling through 2 replicas:
//! 2,000 leases a second), for cells it mostly never uses. The bound below counts cells, not
//! time, so it holds however long a slice is used; and what a lease takes from the rate is
//! taken when it is granted, so a replica that keeps a slice longer takes no more of it.
//!
//! The bound: a slice is at most the tenant's rate over `--admission-slice-ms`, and each replica
//! holds at most one per tenant, so the fleet admits at most `replicas × slice` more than one
//! exact limiter would over any window (cells leased before the window, used inside it). A
//! slice never exceeds what Redis granted: a tenant idle on one replica and busy on another
//! never gets more than its rate, only sooner. Cells a replica stops using need no sweeper:
//! leasing `k` cells moves the tenant's arrival time `k` intervals ahead, which the clock
//! catches up in one slice's time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use taskgate_shared::store::{Admission, Leased, Limit, Rate, Store, StoreError};

/// Tenants kept before expired slices are dropped (their unused cells lapse, which is safe).
const KEPT: usize = 10_000;

/// Slice times a slice is used for at most, unless spent sooner (module docs): at the default
/// 100 ms, a tenant sending fewer than its rate asks Redis about once a second per replica.
const LIFE_IN_SLICES: u32 = 10;

/// One tenant's current slice on this replica.
#[derive(Default)]
struct Slice {
    /// Cells left to admit.
    left: u64,
    /// When the slice lapses (`None`: never leased).
    until: Option<Instant>,
    /// Cells the slice was leased with, and when: what may be given back is bounded by them.
    cells: u64,
    leased_at: Option<Instant>,
    /// Redis refused the last lease: until then nothing fits, and requests are refused here.
    refused_until: Option<Instant>,
    /// The last lease failed (Redis unreachable): until then requests are admitted without
    /// asking, so an outage costs each tenant one timeout per slice, not one per request.
    open_until: Option<Instant>,
}

impl Slice {
    /// The unused cells whose time has not come yet: a lapsed slice's cells the clock has
    /// already passed are lapsed for the GCRA too, so giving them back would credit them twice.
    fn returnable(&self, now: Instant, rate: Rate) -> u64 {
        let Some(leased_at) = self.leased_at else { return 0 };
        if rate.per_second <= 0.0 {
            return 0;
        }
        let passed = now.saturating_duration_since(leased_at).as_secs_f64() * rate.per_second;
        let ahead = (self.cells as f64 - passed).floor().max(0.0) as u64;
        self.left.min(ahead)
    }
}

pub(crate) struct Slices {
    tenants: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Slice>>>>,
    /// How long a slice is used; 0 leases one cell per request (every request asks Redis).
    lifetime: Duration,
}

impl Slices {
    pub(crate) fn new(lifetime: Duration) -> Self {
        Self { tenants: Mutex::new(HashMap::new()), lifetime }
    }

    /// The cells a lease asks for: the rate over a slice's time, at least 1, at most the burst.
    pub(crate) fn slice_size(&self, rate: Rate) -> u64 {
        let cells = (rate.per_second * self.lifetime.as_secs_f64()).ceil();
        (cells as u64).clamp(1, u64::from(rate.burst.max(1)))
    }

    /// One request of `tenant` against `rate` (limited), from this replica's slice, leasing the
    /// next when it is spent or lapsed. Requests of one tenant wait for the lease in flight
    /// rather than each sending their own.
    pub(crate) async fn admit(&self, store: &Store, tenant: &str, rate: Rate) -> Result<Admission, StoreError> {
        let slot = self.slot(tenant);
        let mut slice = slot.lock().await;
        let now = Instant::now();
        let live = slice.until.is_some_and(|until| now < until);
        if live && slice.left > 0 {
            slice.left -= 1;
            return Ok(Admission::Admitted);
        }
        if slice.open_until.is_some_and(|until| now < until) {
            return Ok(Admission::Admitted);
        }
        if let Some(wait) = slice.refused_until.and_then(|until| until.checked_duration_since(now)) {
            let retry_after_ms = (wait.as_millis() as u64).max(1);
            return Ok(Admission::Refused { limit: Limit::Requests, retry_after_ms });
        }
        // A lapsed slice's cells go back, those not yet due; a spent live one has none.
        let unused = slice.returnable(now, rate);
        slice.left = 0;
        slice.until = None;
        slice.leased_at = None;
        let leased = store.lease_requests(tenant, rate, self.slice_size(rate), unused).await;
        crate::metrics::METRICS.request_slices.with_label_values(&[outcome(&leased)]).inc();
        let leased = match leased {
            Ok(leased) => leased,
            Err(err) => {
                slice.open_until = Some(now + self.lifetime.max(Duration::from_millis(100)));
                return Err(err);
            }
        };
        match leased {
            Leased::Granted(cells) => {
                slice.refused_until = None;
                slice.open_until = None;
                slice.left = cells - 1;
                slice.cells = cells;
                slice.leased_at = Some(now);
                slice.until = Some(now + self.lifetime * LIFE_IN_SLICES);
                Ok(Admission::Admitted)
            }
            Leased::Refused { retry_after_ms } => {
                // Nothing fits before then, whoever asks; another replica's cells given back
                // meanwhile are not seen here, which only refuses a little more.
                slice.refused_until = Some(now + Duration::from_millis(retry_after_ms));
                Ok(Admission::Refused { limit: Limit::Requests, retry_after_ms })
            }
        }
    }

    fn slot(&self, tenant: &str) -> Arc<tokio::sync::Mutex<Slice>> {
        let mut tenants = self.tenants.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(slot) = tenants.get(tenant) {
            return slot.clone();
        }
        if tenants.len() >= KEPT {
            let now = Instant::now();
            // A slot in use (handed out or locked) or live stays; the rest lapse with their
            // cells, so one tenant never holds two slices here.
            tenants.retain(|_, slot| {
                Arc::strong_count(slot) > 1
                    || slot.try_lock().map_or(true, |slice| slice.until.is_some_and(|until| now < until))
            });
        }
        tenants.entry(tenant.to_owned()).or_default().clone()
    }
}

fn outcome(leased: &Result<Leased, StoreError>) -> &'static str {
    match leased {
        Ok(Leased::Granted(_)) => "granted",
        Ok(Leased::Refused { .. }) => "refused",
        Err(_) => "error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_cells_not_yet_due_are_given_back() {
        let rate = Rate { per_second: 100.0, burst: 1_000 };
        let at = Instant::now();
        let slice = Slice { left: 8, cells: 10, leased_at: Some(at), ..Slice::default() };
        // Leased 10 cells of 10 ms: 8 unused; 50 ms later 5 are still ahead, 8 at once.
        assert_eq!(slice.returnable(at, rate), 8);
        assert_eq!(slice.returnable(at + Duration::from_millis(50), rate), 5);
        assert_eq!(slice.returnable(at + Duration::from_millis(100), rate), 0);
        assert_eq!(slice.returnable(at + Duration::from_secs(60), rate), 0, "an idle spell gives nothing back");
        assert_eq!(Slice::default().returnable(at, rate), 0, "never leased");
    }

    #[test]
    fn a_slice_is_the_rate_over_its_time_within_one_and_the_burst() {
        let slices = Slices::new(Duration::from_millis(100));
        assert_eq!(slices.slice_size(Rate { per_second: 500.0, burst: 1_000 }), 50);
        assert_eq!(slices.slice_size(Rate { per_second: 1.0, burst: 1 }), 1);
        assert_eq!(slices.slice_size(Rate { per_second: 10_000.0, burst: 20 }), 20);
        assert_eq!(slices.slice_size(Rate { per_second: 0.5, burst: 0 }), 1);
        let per_request = Slices::new(Duration::ZERO);
        assert_eq!(per_request.slice_size(Rate { per_second: 500.0, burst: 1_000 }), 1);
    }
}
