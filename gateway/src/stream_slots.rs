//! Open `subscriptions/listen` and `events/stream` streams on this replica (counted together),
//! per principal and in all, so one caller cannot take every stream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::metrics::METRICS;

/// Re-reads of watched tasks under way at once on this replica, over every stream: a burst of
/// wake-ups (a resubscription, many tasks changing together) then waits here instead of
/// queueing on the Redis connection past its timeout.
const READS_IN_FLIGHT: usize = 256;

/// Open listen streams per principal on this replica, and in all, and the re-reads they share.
pub(crate) struct StreamCounts {
    counts: Mutex<Counts>,
    reads: tokio::sync::Semaphore,
}

impl Default for StreamCounts {
    fn default() -> Self {
        Self { counts: Mutex::default(), reads: tokio::sync::Semaphore::new(READS_IN_FLIGHT) }
    }
}

#[derive(Default)]
struct Counts {
    total: usize,
    per_principal: HashMap<String, usize>,
}

/// One counted stream; dropping it frees the slot.
pub(crate) struct StreamSlot {
    counts: Arc<StreamCounts>,
    key: String,
}

impl StreamCounts {
    /// A slot for `key`, unless it already holds `max`, or the replica holds `max_total`.
    pub(crate) fn acquire(self: &Arc<Self>, key: String, max: usize, max_total: usize) -> Option<StreamSlot> {
        let mut counts = self.counts.lock().expect("the stream counts' lock is never poisoned");
        if counts.total >= max_total {
            return None;
        }
        let open = counts.per_principal.entry(key.clone()).or_default();
        if *open >= max {
            return None;
        }
        *open += 1;
        counts.total += 1;
        METRICS.sse_streams.inc();
        Some(StreamSlot { counts: self.clone(), key })
    }
}

impl StreamSlot {
    /// Streams open on this replica now.
    pub(crate) fn open_streams(&self) -> usize {
        self.counts.counts.lock().expect("the stream counts' lock is never poisoned").total
    }

    /// A turn to re-read a watched task.
    pub(crate) async fn read_turn(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.counts.reads.acquire().await.expect("the semaphore is never closed")
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        METRICS.sse_streams.dec();
        let mut counts = self.counts.counts.lock().expect("the stream counts' lock is never poisoned");
        counts.total -= 1;
        if let Some(open) = counts.per_principal.get_mut(&self.key) {
            *open -= 1;
            if *open == 0 {
                counts.per_principal.remove(&self.key);
            }
        }
    }
}
