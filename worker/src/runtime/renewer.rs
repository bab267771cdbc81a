//! Renews every held lease about three times per lease period. The renewals of one round go
//! out together and share the multiplexed connection, so they pipeline. A renewal also carries
//! the cancel flag, which covers a missed cancel signal.

use std::sync::Arc;

use futures::future::join_all;
use taskgate_shared::store::{Lease, Renewal};

use super::Shared;
use crate::metrics::METRICS;

pub(super) async fn run(shared: Arc<Shared>) {
    let lease = shared.config.lease;
    let margin = shared.config.lease_margin();
    let mut tick = tokio::time::interval(lease / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let held = shared.held.snapshot();
        let sent = std::time::Instant::now();
        let renewals = held.iter().map(|(id, task)| {
            let store = &shared.store;
            let worker = shared.worker_id.as_str();
            async move {
                store.renew(Lease { task_id: id, worker, fence: task.fence, outbox: Some(&*task.outbox) }, lease).await
            }
        });
        for ((id, task), renewal) in held.iter().zip(join_all(renewals).await) {
            match renewal {
                Ok(Renewal::Held { cancel_requested }) => {
                    METRICS.leases_renewed.inc();
                    task.renewed(sent, lease, margin);
                    if cancel_requested {
                        task.cancel.cancel();
                    }
                }
                // Our own outcome write ended the lease: nothing was lost.
                Ok(Renewal::Lost) if task.ending.is_cancelled() => {}
                Ok(Renewal::Lost) => {
                    tracing::warn!(task_id = %id, fence = task.fence, "lease lost");
                    METRICS.leases_expired.inc();
                    task.lost.cancel();
                }
                // Maybe transient: the next round tries again, and the run stops on its own
                // once its validity has passed.
                Err(err) => tracing::warn!(task_id = %id, fence = task.fence, error = %err, "lease renewal failed"),
            }
        }
    }
}
