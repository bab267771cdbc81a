//! `listen`: K concurrent subscriptions on parked tasks; the driver cancels tasks at the
//! configured rate, and each stream records the lag from the change (`lastUpdatedAt`, Redis
//! time) to the SSE event's arrival (this host's clock: run on the same machine).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt as _, TryStreamExt as _};
use hdrhistogram::Histogram;
use serde_json::json;
use taskgate_shared::task::now_ms;

use super::create_for_setup;
use crate::client::{Client, LoadError, SseReader};
use crate::config::Config;
use crate::driver::{Op, Recorder, Sample, histogram};

/// Notification lag, microseconds.
pub type Lags = Arc<Mutex<Histogram<u64>>>;

pub(super) async fn prepare(config: &Config, client: Client, recorder: Arc<Recorder>) -> anyhow::Result<(Op, Lags)> {
    let k = config.subscriptions.max(1);
    // Created 64 at a time: one at a time, 100,000 tasks would take minutes to set up.
    let ids: Vec<String> = futures::stream::iter(0..k)
        .map(|_| create_for_setup(&client, "generate_report", json!({})))
        .buffered(64)
        .try_collect()
        .await
        .map_err(|e| anyhow::anyhow!("creating: {e}"))?;
    let lags: Lags = Arc::new(Mutex::new(histogram()));
    let opened = Arc::new(AtomicUsize::new(0));
    // Streams the gateway refused (a 429 past a listen-stream cap, say): not waited for.
    let refused = Arc::new(AtomicUsize::new(0));
    // Tasks the worker has parked (`input_required`): the measurement starts once every task
    // is, so that the window holds the cancellations alone, not the worker still claiming the
    // set-up's tasks.
    let parked = Arc::new(AtomicUsize::new(0));
    // Streams open `--concurrency` at a time, as a fleet of clients ramps up: all at once, the
    // requests waiting for their headers would be load-shed by the gateway's in-flight bound.
    let opening = Arc::new(tokio::sync::Semaphore::new(config.concurrency.max(1)));
    for id in &ids {
        let (client, id, lags, opened, refused, parked, recorder, opening) = (
            client.clone(),
            id.clone(),
            lags.clone(),
            opened.clone(),
            refused.clone(),
            parked.clone(),
            recorder.clone(),
            opening.clone(),
        );
        tokio::spawn(async move {
            let permit = opening.acquire_owned().await.expect("the semaphore is never closed");
            let response = match client.listen(&[&id]).await {
                Ok(r) => r,
                Err(err) => {
                    refused.fetch_add(1, Ordering::Relaxed);
                    return recorder.error(&format!("listen: {err}"));
                }
            };
            drop(permit);
            opened.fetch_add(1, Ordering::Relaxed);
            let mut stream = SseReader::new(response);
            let mut seen_parked = false;
            while let Some(message) = stream.next().await {
                let snapshot = &message["params"];
                if !seen_parked && message["method"] == "notifications/tasks" && snapshot["status"] == "input_required"
                {
                    seen_parked = true;
                    parked.fetch_add(1, Ordering::Relaxed);
                }
                if message["method"] == "notifications/tasks" && snapshot["status"] == "cancelled" {
                    let updated = snapshot["lastUpdatedAt"]
                        .as_str()
                        .and_then(taskgate_shared::task::parse_iso8601_ms)
                        .unwrap_or(0);
                    let lag_ms = now_ms().saturating_sub(updated);
                    lags.lock().expect("lock poisoned: a holder panicked").saturating_record((lag_ms * 1_000).max(1));
                }
            }
        });
    }
    wait_until(|| opened.load(Ordering::Relaxed) + refused.load(Ordering::Relaxed) >= k).await;
    let (open, not) = (opened.load(Ordering::Relaxed), refused.load(Ordering::Relaxed));
    if not == 0 {
        eprintln!("{open} of {k} subscriptions open");
    } else {
        // All from one principal: past the gateway's per-principal cap (by default a quarter
        // of `--listen-max-streams`) the rest are refused with 429.
        eprintln!("{open} of {k} subscriptions open, {not} refused (see the errors below)");
    }
    wait_until(|| parked.load(Ordering::Relaxed) >= opened.load(Ordering::Relaxed)).await;
    eprintln!("{} of them on parked tasks (waiting for input)", parked.load(Ordering::Relaxed));
    let ids = Arc::new(ids);
    let next = Arc::new(AtomicUsize::new(0));
    let op: Op = Arc::new(move || {
        let (client, ids, next) = (client.clone(), ids.clone(), next.clone());
        Box::pin(async move {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let id = ids.get(i).ok_or(LoadError::Unexpected("ran out of subscribed tasks"))?;
            client.call("tasks/cancel", json!({"taskId": id}), true).await?;
            Ok(Sample::default())
        })
    });
    Ok((op, lags))
}

/// Waits until `done` holds, checking every 100 ms, for at most 5 minutes (the set-up goes on
/// with what it has then, and says so).
async fn wait_until(done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    while !done() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
