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
//!
//! **Riders.** A lease is one call to Redis whatever it carries, and what a call costs Redis is
//! mostly the wake-up and the reading and writing, not the few commands inside. So a lease also
//! takes the next slice of up to [`RIDERS`] other tenants of this replica whose slices are
//! nearly spent (a quarter left) or nearly lapsed, provided they took at least two slice times
//! to get there (each uses well under half its rate here). Their unused cells go back as with
//! any lease and each still holds one slice, so the bound is unchanged; the cells they had not
//! used and could not give back (already due by the clock) lapse, which a tenant so far under
//! its rate does not feel. A fleet of tenants polling through a replica then costs Redis a few
//! calls a second for them all rather than one per tenant; the slices so renewed run out
//! together again, and again go in one call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use taskgate_shared::store::{Admission, Leased, Limit, Rate, SliceAsk, Store, StoreError};
use tokio::sync::OwnedMutexGuard;

/// Tenants kept before expired slices are dropped (their unused cells lapse, which is safe).
const KEPT: usize = 10_000;

/// Slice times a slice is used for at most, unless spent sooner (module docs): at the default
/// 100 ms, a tenant sending fewer than its rate asks Redis about once a second per replica.
const LIFE_IN_SLICES: u32 = 10;

/// Other tenants' slices a lease renews at most (module docs, "Riders").
const RIDERS: usize = 32;

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
    /// The rate the slice was leased at (what a ride renews it at).
    rate: Option<Rate>,
    /// Listed for a ride ([`Slices::due`]) since it became nearly done.
    due: bool,
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

    /// Whether the slice may ride on another tenant's lease: a quarter of it or less left, or
    /// of its life, and at least two slice times (`slice_time`) since it was leased.
    fn nearly_done(&self, now: Instant, slice_time: Duration) -> bool {
        let (Some(leased_at), Some(until)) = (self.leased_at, self.until) else { return false };
        let slow = now.saturating_duration_since(leased_at) >= slice_time * 2;
        let spent = self.left * 4 <= self.cells;
        let lapsing = until.saturating_duration_since(now) * 4 <= slice_time * LIFE_IN_SLICES;
        slow && (spent || lapsing)
    }

    /// A lease granted: `cells`, of which `taken` are used at once.
    fn granted(&mut self, now: Instant, rate: Rate, cells: u64, taken: u64, life: Duration) {
        *self = Self {
            left: cells - taken,
            until: Some(now + life),
            cells,
            leased_at: Some(now),
            refused_until: None,
            open_until: None,
            rate: Some(rate),
            due: false,
        };
    }
}

/// A slice renewed with another tenant's lease: its tenant, its lock and the cells it gives
/// back.
struct Rider {
    tenant: String,
    slice: OwnedMutexGuard<Slice>,
    rate: Rate,
    unused: u64,
}

pub(crate) struct Slices {
    tenants: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Slice>>>>,
    /// Tenants whose slices became nearly done, oldest first: the next lease takes them along.
    due: Mutex<Vec<String>>,
    /// How long a slice is used; 0 leases one cell per request (every request asks Redis).
    lifetime: Duration,
}

impl Slices {
    pub(crate) fn new(lifetime: Duration) -> Self {
        Self { tenants: Mutex::new(HashMap::new()), due: Mutex::new(Vec::new()), lifetime }
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
            if !slice.due && slice.nearly_done(now, self.lifetime) {
                let mut due = lock(&self.due);
                // Bounded as the tenants are (names of tenants gone quiet wait for a lease).
                if due.len() < KEPT {
                    slice.due = true;
                    due.push(tenant.to_owned());
                }
            }
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
        let mut riders = self.riders(tenant, now);
        let mut asks = vec![SliceAsk { tenant, rate, want: self.slice_size(rate), unused }];
        asks.extend(riders.iter().map(|r| SliceAsk {
            tenant: &r.tenant,
            rate: r.rate,
            want: self.slice_size(r.rate),
            unused: r.unused,
        }));
        crate::metrics::METRICS.request_slice_calls.inc();
        let leased = store.lease_requests(&asks).await;
        let mut leases = match leased {
            Ok(leases) => leases.into_iter(),
            Err(err) => {
                count(asks.len(), "error");
                slice.open_until = Some(now + self.lifetime.max(Duration::from_millis(100)));
                // Whether the cells went back is unknown: they are not used again.
                for rider in &mut riders {
                    rider.slice.left -= rider.unused;
                    rider.slice.due = false;
                }
                return Err(err);
            }
        };
        let life = self.lifetime * LIFE_IN_SLICES;
        let own = leases.next();
        for rider in &mut riders {
            match leases.next() {
                Some(Leased::Granted(cells)) => {
                    count(1, "granted");
                    rider.slice.granted(now, rider.rate, cells, 0, life);
                }
                _ => {
                    count(1, "refused");
                    // It did not ask: it keeps what it did not give back, and asks when spent.
                    rider.slice.left -= rider.unused;
                    rider.slice.due = false;
                }
            }
        }
        match own {
            Some(Leased::Granted(cells)) => {
                count(1, "granted");
                slice.granted(now, rate, cells, 1, life);
                Ok(Admission::Admitted)
            }
            Some(Leased::Refused { retry_after_ms }) => {
                count(1, "refused");
                // Nothing fits before then, whoever asks; another replica's cells given back
                // meanwhile are not seen here, which only refuses a little more.
                slice.refused_until = Some(now + Duration::from_millis(retry_after_ms));
                Ok(Admission::Refused { limit: Limit::Requests, retry_after_ms })
            }
            None => Err(StoreError::UnexpectedReply("no lease for the tenant that asked".into())),
        }
    }

    /// Up to [`RIDERS`] nearly done slices of other tenants (or just lapsed), locked (one being
    /// admitted from right now is left to lease for itself).
    fn riders(&self, asking: &str, now: Instant) -> Vec<Rider> {
        let names: Vec<String> = {
            let mut due = lock(&self.due);
            let n = due.len().min(RIDERS);
            due.drain(..n).collect()
        };
        let tenants = lock(&self.tenants);
        names
            .into_iter()
            .filter(|name| name != asking)
            .filter_map(|tenant| {
                let slice = tenants.get(&tenant)?.clone().try_lock_owned().ok()?;
                let rate = slice.rate?;
                // Slices renewed together lapse together: the first to ask again takes the
                // others along, as long as they lapsed no more than a quarter of a life ago.
                let recent = slice.until.is_some_and(|until| now < until + self.lifetime * LIFE_IN_SLICES / 4);
                (slice.due && recent).then(|| {
                    let unused = slice.returnable(now, rate);
                    Rider { tenant, slice, rate, unused }
                })
            })
            .collect()
    }

    fn slot(&self, tenant: &str) -> Arc<tokio::sync::Mutex<Slice>> {
        let mut tenants = lock(&self.tenants);
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

/// Counts `n` leases that ended as `outcome`.
fn count(n: usize, outcome: &str) {
    crate::metrics::METRICS.request_slices.with_label_values(&[outcome]).inc_by(n as u64);
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
    fn a_slice_rides_when_nearly_spent_or_lapsed_by_a_slow_tenant() {
        let (at, slice_time) = (Instant::now(), Duration::from_millis(100));
        let rate = Rate { per_second: 100.0, burst: 1_000 };
        let mut slice = Slice::default();
        assert!(!slice.nearly_done(at, slice_time), "never leased");
        slice.granted(at, rate, 40, 1, slice_time * LIFE_IN_SLICES);
        slice.left = 10;
        assert!(!slice.nearly_done(at + slice_time, slice_time), "a quarter left, but used at half the rate");
        assert!(slice.nearly_done(at + slice_time * 2, slice_time), "a quarter left after two slice times");
        slice.left = 11;
        assert!(!slice.nearly_done(at + slice_time * 7, slice_time), "more than a quarter left and of its life");
        assert!(slice.nearly_done(at + slice_time * 8, slice_time), "the last quarter of its life");
        slice.granted(at, rate, 40, 0, slice_time * LIFE_IN_SLICES);
        assert_eq!((slice.left, slice.due, slice.rate), (40, false, Some(rate)), "a ride takes nothing");
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
