//! The runs this worker holds leases for, with the signals that stop their tools.
//!
//! A run is keyed by (task, fencing token), not by task: after losing a lease a worker may
//! claim the same task again, and the new run must neither replace the old one's entry (the
//! old run would no longer be renewed-and-refused, so it would never be told to stop) nor be
//! removed when the old one ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use taskgate_shared::task::TaskId;
use tokio_util::sync::CancellationToken;

/// One held run.
#[derive(Debug, Clone)]
pub(crate) struct HeldTask {
    pub(crate) fence: u64,
    /// The task owner's digest, naming its outbox in every write the run makes
    /// (`Lease::outbox`): known from the claim, so no write costs a second round trip.
    pub(crate) outbox: Arc<str>,
    /// A cancel was requested for the task.
    pub(crate) cancel: CancellationToken,
    /// The answer to a held question came (the answer script signals it).
    pub(crate) answered: Arc<tokio::sync::Notify>,
    /// This worker's lease is gone: stop at once and write nothing.
    pub(crate) lost: CancellationToken,
    /// The run is over and its outcome is being written: a renewal refused from now on means
    /// the write (finish, park, release) ended the lease, not that it was lost.
    pub(crate) ending: CancellationToken,
    /// Until when this worker can show that the lease is valid: when the last successful claim
    /// or renewal was *sent*, plus the lease, minus a margin. Redis set the lease's end no
    /// earlier than that send, so past this instant another worker may already hold the task.
    valid_until: Arc<Mutex<Instant>>,
}

impl HeldTask {
    /// A renewal sent at `sent` held: the lease is known valid until `sent + lease - margin`.
    pub(crate) fn renewed(&self, sent: Instant, lease: Duration, margin: Duration) {
        let mut until = lock(&self.valid_until);
        *until = (*until).max(sent + lease.saturating_sub(margin));
    }

    /// Whether the lease can no longer be known to be valid.
    pub(crate) fn validity_passed(&self) -> bool {
        Instant::now() >= self.valid_until()
    }

    /// Until when the lease is known to be valid, as of the last claim or renewal that held.
    pub(crate) fn valid_until(&self) -> Instant {
        *lock(&self.valid_until)
    }

    /// Resolves once the lease can no longer be known to be valid.
    pub(crate) async fn validity_ends(&self) {
        loop {
            let until = *lock(&self.valid_until);
            if Instant::now() >= until {
                return;
            }
            // A renewal meanwhile moves the deadline: sleep to the old one, then look again.
            tokio::time::sleep_until(until.into()).await;
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Held(Mutex<HashMap<(TaskId, u64), HeldTask>>);

impl Held {
    /// Registers a run whose claim was sent at `sent`; `None` when that run is registered
    /// already (one claim answered twice must not run twice).
    pub(crate) fn insert(
        &self,
        id: TaskId,
        fence: u64,
        outbox: Arc<str>,
        sent: Instant,
        lease: Duration,
        margin: Duration,
    ) -> Option<HeldTask> {
        let task = HeldTask {
            fence,
            outbox,
            cancel: CancellationToken::new(),
            answered: Arc::default(),
            lost: CancellationToken::new(),
            ending: CancellationToken::new(),
            valid_until: Arc::new(Mutex::new(sent + lease.saturating_sub(margin))),
        };
        match lock(&self.0).entry((id, fence)) {
            std::collections::hash_map::Entry::Occupied(_) => None,
            std::collections::hash_map::Entry::Vacant(slot) => Some(slot.insert(task).clone()),
        }
    }

    /// Forgets one run; a later run of the same task stays.
    pub(crate) fn remove(&self, id: &TaskId, fence: u64) {
        lock(&self.0).remove(&(id.clone(), fence));
    }

    /// Every run of the task this worker holds (normally one).
    pub(crate) fn runs_of(&self, id: &TaskId) -> Vec<HeldTask> {
        lock(&self.0).iter().filter(|((task, _), _)| task == id).map(|(_, run)| run.clone()).collect()
    }

    pub(crate) fn snapshot(&self) -> Vec<(TaskId, HeldTask)> {
        lock(&self.0).iter().map(|((id, _), run)| (id.clone(), run.clone())).collect()
    }

    pub(crate) fn len(&self) -> usize {
        lock(&self.0).len()
    }
}

/// Nothing panics while holding these locks (no user code runs under them); a poisoned one
/// means that changed, and the runtime cannot trust its bookkeeping any more.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().expect("the held-runs lock is never poisoned")
}
