//! `--runtime per-core`: the worker as lanes, one per single-threaded runtime. Each lane reads
//! its own share of the queue shards over a Redis connection of its own, with its own share of
//! `--concurrency`, and claims, runs and finishes what it read on its own thread: a claim's
//! reply, the run and its end never wake a task on another thread. The first lane runs on the
//! runtime `main` blocks on, beside the work done once per worker (renewals, cancel signals,
//! the reaper, the catalogue heartbeat, `/metrics`); every further lane gets a thread here.
//!
//! Lanes share what is per worker: the held runs (renewed, and told of cancels, from the first
//! lane), the execution tracker (so a drain waits for every lane's runs) and the drain signals.

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;

use taskgate_shared::store::Store;
use tokio::sync::{Semaphore, oneshot};
use tokio_util::sync::CancellationToken;

use super::{Finisher, Shared, dispatcher};
use crate::config::Config;

/// One lane's share of the worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Share {
    pub(crate) shards: Vec<u8>,
    pub(crate) slots: usize,
}

/// The lanes' shares: `runtimes` lanes, but never more than there are shards or slots to give
/// each one; shard `s` goes to lane `s mod lanes`, the slots as evenly as they divide.
pub(crate) fn shares(config: &Config) -> Vec<Share> {
    let shards = config.redis.queue_shards.clamp(1, 256) as usize;
    let slots = config.concurrency as usize;
    let lanes = config.runtime.runtimes().min(shards).min(slots).max(1);
    (0..lanes)
        .map(|lane| Share {
            shards: (lane..shards).step_by(lanes).map(|s| s as u8).collect(),
            slots: slots / lanes + usize::from(lane < slots % lanes),
        })
        .collect()
}

/// The lanes after the first, each on its own thread.
pub(crate) struct Lanes {
    /// Cancelled once Redis is usable and the consumer groups exist: the lanes start reading.
    go: CancellationToken,
    /// One per lane: answered when its reader stopped (on drain), so no claim starts after.
    stopped: Vec<oneshot::Receiver<()>>,
    threads: Vec<JoinHandle<()>>,
}

impl Lanes {
    /// Starts a thread with a single-threaded runtime for each share; each lane waits for
    /// [`Lanes::go`] (or the drain) before it reads.
    pub(crate) fn start(first: &Shared, shares: Vec<Share>) -> io::Result<Self> {
        let mut lanes = Self { go: CancellationToken::new(), stopped: Vec::new(), threads: Vec::new() };
        for (index, share) in shares.into_iter().enumerate() {
            if let Err(err) = lanes.spawn(first, index + 1, share) {
                // The lanes started so far wait for `go` or the drain: the drain it is.
                first.stop_claiming.cancel();
                for thread in lanes.threads.drain(..) {
                    let _ = thread.join();
                }
                return Err(err);
            }
        }
        Ok(lanes)
    }

    fn spawn(&mut self, first: &Shared, index: usize, share: Share) -> io::Result<()> {
        let runtime = first.config.runtime.core_runtime()?;
        let redis = &first.config.redis;
        let store = {
            // Opened in the lane's runtime: a connection's tasks (a Cluster client's driver, a
            // standalone connection's reader once it connects) run on the runtime that opened it.
            let _lane = runtime.enter();
            Store::connect_lazy(&redis.endpoint, &redis.namespace, redis.timeout).map_err(io::Error::other)?
        };
        let template = first.clone();
        let go = self.go.clone();
        let (stopped, stopped_rx) = oneshot::channel();
        let thread = std::thread::Builder::new().name(format!("taskgate-lane-{index}")).spawn(move || {
            runtime.block_on(async move {
                let lane = Arc::new(Shared {
                    finisher: Finisher::start(store.clone(), template.worker_id.clone()),
                    store,
                    slots: Arc::new(Semaphore::new(share.slots)),
                    shards: share.shards,
                    ..template
                });
                tokio::select! {
                    () = go.cancelled() => {}
                    () = lane.stop_claiming.cancelled() => {
                        let _ = stopped.send(());
                        return;
                    }
                }
                dispatcher::run(lane.clone()).await;
                let _ = stopped.send(());
                // The runs this lane started live on its runtime: it turns until they end.
                lane.executions.wait().await;
            })
        })?;
        self.stopped.push(stopped_rx);
        self.threads.push(thread);
        Ok(())
    }

    pub(crate) fn len(&self) -> usize {
        self.threads.len()
    }

    /// Redis is usable: the lanes start reading.
    pub(crate) fn go(&self) {
        self.go.cancel();
    }

    /// Resolves once every lane's reader has stopped (the worker stopped claiming).
    pub(crate) async fn readers_stopped(&mut self) {
        for stopped in self.stopped.drain(..) {
            let _ = stopped.await;
        }
    }

    /// Waits for the lanes' threads, once the execution tracker is closed and empty.
    pub(crate) async fn join(self) {
        for thread in self.threads {
            if let Ok(Err(_)) = tokio::task::spawn_blocking(move || thread.join()).await {
                tracing::error!("a lane's runtime panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn config(args: &[&str]) -> Config {
        let cli = crate::config::Cli::try_parse_from([&["taskgate-worker"], args].concat()).expect("a command line");
        Config::from_cli(cli).expect("a configuration")
    }

    fn split(args: &[&str]) -> Vec<(Vec<u8>, usize)> {
        shares(&config(args)).into_iter().map(|s| (s.shards, s.slots)).collect()
    }

    #[test]
    fn lanes_share_the_shards_and_slots_and_never_outnumber_them() {
        let per_core = ["--runtime", "per-core", "--runtime-threads"];
        assert_eq!(
            split(&["--runtime", "work-stealing", "--queue-shards", "4", "--concurrency", "16"]),
            vec![(vec![0, 1, 2, 3], 16)]
        );
        assert_eq!(
            split(&[&per_core[..], &["3", "--queue-shards", "5", "--concurrency", "16"]].concat()),
            vec![(vec![0, 3], 6), (vec![1, 4], 5), (vec![2], 5)]
        );
        // No lane without a shard or a slot to its name.
        assert_eq!(split(&[&per_core[..], &["4", "--queue-shards", "2", "--concurrency", "16"]].concat()).len(), 2);
        assert_eq!(
            split(&[&per_core[..], &["4", "--queue-shards", "16", "--concurrency", "1"]].concat()),
            vec![((0..16).collect(), 1)]
        );
    }
}
