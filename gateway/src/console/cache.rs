//! What the console keeps between requests on one replica: the overview, briefly, per reach
//! (it reads hundreds of keys, and its fragment refreshes every two seconds in every open
//! tab).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::model::{Overview, Reach};

/// How long an overview is served from memory. Its page says how old the figures are.
pub(super) const OVERVIEW_FRESH: Duration = Duration::from_secs(2);
/// Reaches kept at most (one per tenant admin's tenant, plus the operators'); past it the
/// cache starts over rather than grow.
const MAX_REACHES: usize = 1024;

/// The console's per-replica state.
#[derive(Default)]
pub(super) struct ConsoleState {
    overviews: Mutex<HashMap<Reach, (Instant, Arc<Overview>)>>,
}

impl ConsoleState {
    /// The overview for `reach` if one was built within [`OVERVIEW_FRESH`].
    pub(super) fn overview(&self, reach: &Reach) -> Option<Arc<Overview>> {
        let overviews = self.overviews.lock().expect("lock poisoned: a holder panicked");
        overviews.get(reach).filter(|(at, _)| at.elapsed() < OVERVIEW_FRESH).map(|(_, o)| o.clone())
    }

    pub(super) fn keep(&self, reach: Reach, overview: Arc<Overview>) {
        let mut overviews = self.overviews.lock().expect("lock poisoned: a holder panicked");
        if overviews.len() >= MAX_REACHES {
            overviews.retain(|_, (at, _)| at.elapsed() < OVERVIEW_FRESH);
            if overviews.len() >= MAX_REACHES {
                overviews.clear();
            }
        }
        overviews.insert(reach, (Instant::now(), overview));
    }
}
