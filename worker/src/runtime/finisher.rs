//! The outcomes of tasks that end together go out together: each run hands its end to one
//! loop, which sends whatever has gathered, up to [`MOST`] a shard, in one `finish_batch` script
//! call per shard (each task fenced on its own there), while the calls before it are still
//! under way. A burst of ends thus costs Redis one script run, not one each; a lone end goes out
//! at once, alone. A batch whose outcome is unknown (an error) is answered `None`: each run then
//! writes its own end the usual way (`Store::finish`, sent again while its lease is known
//! valid), which finds an end the batch did write and answers written.

use std::sync::Arc;

use taskgate_shared::store::{Ending, Store};
use tokio::sync::{Semaphore, mpsc, oneshot};

/// The most ends of one shard one script call writes.
const MOST: usize = 256;

/// How many batch calls may be under way at once; the ends that arrive meanwhile gather for
/// the next.
const IN_FLIGHT: usize = 2;

type Request = (Ending, oneshot::Sender<Option<bool>>);

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
        self.requests.send((ending, answer)).ok()?;
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
        let mut by_shard: Vec<Vec<Request>> = Vec::new();
        for request in gathered {
            let shard = request.0.task_id.shard();
            match by_shard.iter_mut().find(|b| b.len() < MOST && b[0].0.task_id.shard() == shard) {
                Some(batch) => batch.push(request),
                None => by_shard.push(vec![request]),
            }
        }
        let (store, worker) = (store.clone(), worker.clone());
        tokio::spawn(async move {
            let sends = by_shard.into_iter().map(|batch| send(&store, &worker, batch));
            futures::future::join_all(sends).await;
            drop(permit);
        });
    }
}

async fn send(store: &Store, worker: &str, batch: Vec<Request>) {
    let (endings, answers): (Vec<Ending>, Vec<_>) = batch.into_iter().unzip();
    match store.finish_batch(worker, &endings).await {
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
