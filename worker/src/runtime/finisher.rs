//! The outcomes of tasks that end together go out together: each run hands its end to one
//! loop, which sends whatever has gathered, up to [`MOST`] a call, in one `finish_batch` script
//! call (each task fenced on its own there), while the calls before it are still under way. One
//! call takes the ends of every shard, except where a command must keep to one slot (a Redis
//! Cluster: `Store::one_slot_per_command`), where each shard's ends go in a call of their own.
//! A burst of ends thus costs Redis one script run, not one each; a lone end goes out at once,
//! alone. A batch whose outcome is unknown (an error) is answered `None`: each run then
//! writes its own end the usual way (`Store::finish`, sent again while its lease is known
//! valid), which finds an end the batch did write and answers written.

use std::sync::Arc;

use taskgate_shared::store::{Ending, Store};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tracing::Instrument as _;

/// The most ends one script call writes.
const MOST: usize = 256;

/// The most payload bytes one script call carries (an end larger than this goes alone): Redis
/// runs a script to its end before any other client's command, and a call that outlives the
/// worker's Redis timeout is sent again end by end, so a batch of large results would hold up
/// every client and then travel twice.
const MOST_BYTES: usize = 1 << 20;

/// How many batch calls may be under way at once; the ends that arrive meanwhile gather for
/// the next.
const IN_FLIGHT: usize = 2;

/// An end, where its answer goes, and the span it was handed in under (its task's trace).
type Request = (Ending, oneshot::Sender<Option<bool>>, tracing::Span);

#[derive(Clone)]
pub(crate) struct Finisher {
    requests: mpsc::UnboundedSender<Request>,
}

impl Finisher {
    /// Starts the loop; it ends when the finisher is dropped.
    pub(crate) fn start(store: Store, worker: String) -> Self {
        let (requests, receiver) = mpsc::unbounded_channel();
        tokio::spawn(run(store, Arc::from(worker), receiver));
        Self { requests }
    }

    /// Writes the end with others that gathered: `Some(written)`, `false` when the lease was
    /// lost (the write refused); `None` when the batch's outcome is unknown.
    pub(crate) async fn finish(&self, ending: Ending) -> Option<bool> {
        let (answer, answered) = oneshot::channel();
        self.requests.send((ending, answer, tracing::Span::current())).ok()?;
        answered.await.ok().flatten()
    }
}

async fn run(store: Store, worker: Arc<str>, mut requests: mpsc::UnboundedReceiver<Request>) {
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    loop {
        // Gather only once a call may go: ends arriving while the calls are under way wait here.
        let Ok(permit) = in_flight.clone().acquire_owned().await else { return };
        let Some(first) = requests.recv().await else { return };
        let mut gathered = vec![first];
        while let Ok(next) = requests.try_recv() {
            gathered.push(next);
        }
        let calls = batches(gathered, store.one_slot_per_command(), |r| (r.0.task_id.shard(), r.0.bytes()));
        let (store, worker) = (store.clone(), worker.clone());
        tokio::spawn(async move {
            let sends = calls.into_iter().map(|batch| send(&store, &worker, batch));
            futures::future::join_all(sends).await;
            drop(permit);
        });
    }
}

/// Ends in batches ([`super::batching::batches`]), each within [`MOST`] ends and [`MOST_BYTES`]
/// of payload. `key` gives an end's shard and bytes.
fn batches<T>(ends: Vec<T>, by_shard: bool, key: impl Fn(&T) -> (u8, usize)) -> Vec<Vec<T>> {
    super::batching::batches(ends, by_shard, MOST, MOST_BYTES, key)
}

async fn send(store: &Store, worker: &str, batch: Vec<Request>) {
    // The call's span joins the trace of the batch's first task (a span has one parent; the
    // others' traces show their own `task.finish` span, which waited for this call).
    let parent = batch.first().map_or_else(tracing::Span::none, |request| request.2.clone());
    let (endings, answers): (Vec<Ending>, Vec<_>) = batch.into_iter().map(|(end, answer, _)| (end, answer)).unzip();
    match store.finish_batch(worker, &endings).instrument(parent).await {
        Ok(written) => {
            for (answer, written) in answers.into_iter().zip(written) {
                let _ = answer.send(Some(written));
            }
        }
        Err(err) => {
            tracing::warn!(tasks = endings.len(), error = %err, "writing a batch of ends failed; each is written alone");
            for answer in answers {
                let _ = answer.send(None);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_keep_to_one_shard_on_a_cluster_and_bound_their_ends_and_bytes() {
        // (id, shard, bytes)
        let ends = || vec![(0, 1, 10), (1, 2, 10), (2, 1, MOST_BYTES), (3, 1, 10), (4, 2, 10)];
        let grouped = |by_shard| -> Vec<Vec<i32>> {
            batches(ends(), by_shard, |e| (e.1, e.2)).into_iter().map(|b| b.iter().map(|e| e.0).collect()).collect()
        };
        // The large end does not fit beside the first; it goes alone, and the ends after it join
        // the first batch (of their shard, on a Cluster) that has room.
        assert_eq!(grouped(true), vec![vec![0, 3], vec![1, 4], vec![2]]);
        // Elsewhere the shards share a batch.
        assert_eq!(grouped(false), vec![vec![0, 1, 3, 4], vec![2]]);
        for by_shard in [true, false] {
            let many: Vec<(usize, u8, usize)> = (0..MOST + 1).map(|i| (i, 7, 1)).collect();
            let sizes: Vec<usize> = batches(many, by_shard, |e| (e.1, e.2)).iter().map(Vec::len).collect();
            assert_eq!(sizes, vec![MOST, 1]);
        }
        // Many shards: one call for them all unless each must go alone.
        let spread = |by_shard| batches((0..64).map(|i| (i, (i % 16) as u8, 1)).collect(), by_shard, |e| (e.1, e.2));
        assert_eq!(spread(false).len(), 1);
        assert_eq!(spread(true).len(), 16);
    }
}
