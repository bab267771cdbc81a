//! This worker's signal channel: the cancel script publishes a task id here when a task this
//! worker holds is cancelled, so the tool sees it within milliseconds, and the answer script
//! publishes `answered <id>` when a question this worker holds open was answered. Pub/sub is
//! lossy: lease renewals carry the cancel flag, and a held question is looked up now and then,
//! as backstops.

use std::sync::Arc;

use futures::StreamExt as _;
use taskgate_shared::backoff::Backoff;
use taskgate_shared::task::TaskId;

use super::Shared;

pub(super) async fn run(shared: Arc<Shared>) {
    let channel = shared.store.keys().signal_channel(&shared.worker_id);
    let mut backoff = Backoff::redis();
    loop {
        // Taken before the connection is made: a primary left meanwhile ends it at once.
        let mut moved = shared.store.primary_moves();
        match shared.store.pubsub().await {
            Ok(mut pubsub) => {
                if let Err(err) = pubsub.subscribe(&channel).await {
                    tracing::warn!(error = %err, "cannot subscribe to the signal channel");
                } else {
                    backoff.reset();
                    let mut messages = pubsub.on_message();
                    loop {
                        let msg = tokio::select! {
                            msg = messages.next() => msg,
                            // The old primary hears nothing the new one publishes.
                            () = moved.wait() => None,
                        };
                        let Some(msg) = msg else { break };
                        let Ok(payload) = msg.get_payload::<String>() else {
                            continue;
                        };
                        if let Some(id) = payload.strip_prefix("answered ").and_then(TaskId::parse) {
                            for run in shared.held.runs_of(&id) {
                                run.answered.notify_one();
                            }
                        } else if let Some(id) = TaskId::parse(&payload) {
                            for run in shared.held.runs_of(&id) {
                                run.cancel.cancel();
                            }
                        }
                    }
                    drop(messages);
                    pubsub.discard();
                    tracing::warn!("signal channel closed; resubscribing");
                }
            }
            Err(err) => tracing::warn!(error = %err, "cannot open the signal connection"),
        }
        backoff.wait().await;
    }
}
