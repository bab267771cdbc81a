//! Open `subscriptions/listen` streams on this replica, per principal and in all, so one caller
//! cannot take every stream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::metrics::METRICS;

/// Open listen streams per principal on this replica, and in all.
#[derive(Default)]
pub(crate) struct StreamCounts(Mutex<Counts>);

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
        let mut counts = self.0.lock().expect("the stream counts' lock is never poisoned");
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

impl Drop for StreamSlot {
    fn drop(&mut self) {
        METRICS.sse_streams.dec();
        let mut counts = self.counts.0.lock().expect("the stream counts' lock is never poisoned");
        counts.total -= 1;
        if let Some(open) = counts.per_principal.get_mut(&self.key) {
            *open -= 1;
            if *open == 0 {
                counts.per_principal.remove(&self.key);
            }
        }
    }
}
