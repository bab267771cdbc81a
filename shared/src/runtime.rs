//! The tokio runtimes a binary runs on (`--runtime` and its tuning), shared by the gateway
//! and the worker.
//!
//! - `work-stealing` (the default): one multi-threaded runtime. A task and the Redis
//!   connection's reader may run on different threads, and a reply then wakes the task across
//!   threads.
//! - `per-core`: one single-threaded runtime per core, each with its own Redis connection, so a
//!   piece of work runs from start to end on one thread. What each runtime serves is the
//!   binary's choice: the gateway gives each its own listening socket, the worker its own share
//!   of the queue shards and of `--concurrency`.

use std::io;
use std::num::{NonZeroU32, NonZeroUsize};

use clap::ValueEnum;
use tokio::runtime::{Builder, Runtime};

/// How many runtimes, and of which kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RuntimeShape {
    /// One multi-threaded, work-stealing runtime.
    WorkStealing,
    /// One single-threaded runtime per core, each with its own Redis connection.
    PerCore,
}

/// `--runtime` and its tuning, as each binary's command line takes them.
#[derive(Debug, Clone, clap::Args)]
pub struct RuntimeArgs {
    /// The runtime: `work-stealing` (one multi-threaded runtime) or `per-core` (one
    /// single-threaded runtime per core, each with its own Redis connection: the gateway's with
    /// its own listening socket, `--max-connections` shared out among them; the worker's with its
    /// share of the queue shards and of `--concurrency`). See docs/performance.md.
    #[arg(long, env = "TASKGATE_RUNTIME", default_value = "work-stealing")]
    pub runtime: RuntimeShape,

    /// Runtime threads (work-stealing) or runtimes (per-core); default: the cores this process
    /// may use (for work-stealing, tokio's choice, which reads `TOKIO_WORKER_THREADS`).
    #[arg(long, env = "TASKGATE_RUNTIME_THREADS")]
    pub runtime_threads: Option<NonZeroUsize>,

    /// Scheduler ticks between polls for I/O and timers (tokio's default when unset: 61).
    #[arg(long, env = "TASKGATE_RUNTIME_EVENT_INTERVAL")]
    pub runtime_event_interval: Option<NonZeroU32>,

    /// Scheduler ticks between looks at the shared run queue, work-stealing only (tokio's
    /// default when unset adapts to how long tasks run).
    #[arg(long, env = "TASKGATE_RUNTIME_GLOBAL_QUEUE_INTERVAL")]
    pub runtime_global_queue_interval: Option<NonZeroU32>,
}

impl RuntimeArgs {
    pub fn settings(&self) -> RuntimeSettings {
        RuntimeSettings {
            shape: self.runtime,
            threads: self.runtime_threads,
            event_interval: self.runtime_event_interval,
            global_queue_interval: self.runtime_global_queue_interval,
        }
    }
}

/// The runtimes to build.
#[derive(Debug, Clone, Copy)]
pub struct RuntimeSettings {
    pub shape: RuntimeShape,
    /// Threads for `work-stealing`, runtimes for `per-core`; `None`: the cores this process may
    /// use (for `work-stealing`, tokio's choice, which also reads `TOKIO_WORKER_THREADS`).
    pub threads: Option<NonZeroUsize>,
    /// Scheduler ticks between polls of the I/O and timer drivers (tokio's default: 61).
    pub event_interval: Option<NonZeroU32>,
    /// Scheduler ticks between looks at the shared queue (work-stealing only; tokio's default
    /// adapts to the tasks' poll times).
    pub global_queue_interval: Option<NonZeroU32>,
}

impl Default for RuntimeSettings {
    fn default() -> Self {
        Self { shape: RuntimeShape::WorkStealing, threads: None, event_interval: None, global_queue_interval: None }
    }
}

impl RuntimeSettings {
    /// The runtime `main` blocks on: the only one, or the first core's.
    pub fn main_runtime(&self) -> io::Result<Runtime> {
        match self.shape {
            RuntimeShape::WorkStealing => {
                let mut builder = Builder::new_multi_thread();
                if let Some(threads) = self.threads {
                    builder.worker_threads(threads.get());
                }
                if let Some(interval) = self.global_queue_interval {
                    builder.global_queue_interval(interval.get());
                }
                self.tuned(&mut builder).build()
            }
            RuntimeShape::PerCore => self.core_runtime(),
        }
    }

    /// One core's single-threaded runtime.
    pub fn core_runtime(&self) -> io::Result<Runtime> {
        self.tuned(&mut Builder::new_current_thread()).build()
    }

    fn tuned<'b>(&self, builder: &'b mut Builder) -> &'b mut Builder {
        builder.enable_all();
        if let Some(interval) = self.event_interval {
            builder.event_interval(interval.get());
        }
        builder
    }

    /// How many runtimes this shape runs: one for `work-stealing`, one per core (or
    /// `--runtime-threads`) for `per-core`.
    pub fn runtimes(&self) -> usize {
        match self.shape {
            RuntimeShape::WorkStealing => 1,
            RuntimeShape::PerCore => {
                self.threads.unwrap_or_else(|| std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN)).get()
            }
        }
    }
}
