//! Closed and open loops, with a warm-up, a progress line each second, and histograms.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::client::LoadError;
use crate::config::Config;

/// One successful operation.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    /// Set when the operation measured its own latency (otherwise the driver's is used).
    pub latency: Option<Duration>,
    /// Creation to terminal state, for lifecycles.
    pub time_to_terminal: Option<Duration>,
}

pub type Op = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<Sample, LoadError>> + Send>> + Send + Sync>;

/// What a run saw. Only samples taken after the warm-up count.
pub struct Recorder {
    pub latency: Mutex<Histogram<u64>>,
    pub time_to_terminal: Mutex<Histogram<u64>>,
    pub errors: Mutex<BTreeMap<String, u64>>,
    pub ok: AtomicU64,
    measuring: AtomicBool,
    seen: AtomicU64,
}

pub fn histogram() -> Histogram<u64> {
    // Microseconds, up to 10 minutes, 3 significant digits.
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

impl Default for Recorder {
    fn default() -> Self {
        Self {
            latency: Mutex::new(histogram()),
            time_to_terminal: Mutex::new(histogram()),
            errors: Mutex::default(),
            ok: AtomicU64::new(0),
            measuring: AtomicBool::new(false),
            seen: AtomicU64::new(0),
        }
    }
}

impl Recorder {
    pub fn record(&self, elapsed: Duration, outcome: Result<Sample, LoadError>) {
        self.seen.fetch_add(1, Ordering::Relaxed);
        if !self.measuring.load(Ordering::Relaxed) {
            return;
        }
        match outcome {
            Ok(sample) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
                let latency = sample.latency.unwrap_or(elapsed);
                self.latency.lock().expect("lock poisoned: a holder panicked").saturating_record(micros(latency));
                if let Some(ttt) = sample.time_to_terminal {
                    self.time_to_terminal
                        .lock()
                        .expect("lock poisoned: a holder panicked")
                        .saturating_record(micros(ttt));
                }
            }
            Err(err) => self.error(&err.to_string()),
        }
    }

    pub fn error(&self, kind: &str) {
        *self.errors.lock().expect("lock poisoned: a holder panicked").entry(kind.to_owned()).or_default() += 1;
    }

    pub fn errors_total(&self) -> u64 {
        self.errors.lock().expect("lock poisoned: a holder panicked").values().sum()
    }

    pub fn start_measuring(&self) {
        self.measuring.store(true, Ordering::Relaxed);
    }
}

pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// Runs `op` for the warm-up and the measured duration, calling `measuring` as the measured
/// window opens; returns the measured wall time.
pub async fn run(
    config: &Config,
    op: Op,
    recorder: Arc<Recorder>,
    measuring: impl FnOnce() + Send + 'static,
) -> Duration {
    let start = Instant::now();
    let measure_from = start + config.warmup();
    let end = measure_from + config.duration();
    let progress = tokio::spawn(progress(recorder.clone(), measure_from));
    {
        let recorder = recorder.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(measure_from).await;
            recorder.start_measuring();
            measuring();
        });
    }
    match config.rate {
        None => closed(config.concurrency, op, recorder.clone(), end).await,
        Some(rate) => open(rate, config.concurrency, op, recorder.clone(), end).await,
    }
    progress.abort();
    end.saturating_duration_since(measure_from)
}

async fn closed(concurrency: usize, op: Op, recorder: Arc<Recorder>, end: Instant) {
    let loops: Vec<_> = (0..concurrency.max(1))
        .map(|_| {
            let (op, recorder) = (op.clone(), recorder.clone());
            tokio::spawn(async move {
                while Instant::now() < end {
                    let t0 = Instant::now();
                    let outcome = op().await;
                    recorder.record(t0.elapsed(), outcome);
                }
            })
        })
        .collect();
    for handle in loops {
        let _ = handle.await;
    }
}

/// Fixed arrivals. Latency counts from the intended start, so a stalled server shows in the
/// tail instead of slowing the arrivals down (coordinated omission).
async fn open(rate: f64, max_in_flight: usize, op: Op, recorder: Arc<Recorder>, end: Instant) {
    let interval = Duration::from_secs_f64(1.0 / rate.max(0.001));
    let slots = Arc::new(Semaphore::new(max_in_flight.max(1)));
    let start = Instant::now();
    let mut handles = Vec::new();
    for i in 0u64.. {
        let intended = start + interval.mul_f64(i as f64);
        if intended >= end {
            break;
        }
        tokio::time::sleep_until(intended).await;
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            recorder.record(Duration::ZERO, Err(LoadError::Unexpected("overload: too many in flight")));
            continue;
        };
        let (op, recorder) = (op.clone(), recorder.clone());
        handles.push(tokio::spawn(async move {
            let outcome = op().await;
            recorder.record(intended.elapsed(), outcome);
            drop(permit);
        }));
    }
    for handle in handles {
        let _ = handle.await;
    }
}

async fn progress(recorder: Arc<Recorder>, measure_from: Instant) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut last = 0;
    loop {
        tick.tick().await;
        let seen = recorder.seen.load(Ordering::Relaxed);
        let phase = if Instant::now() < measure_from { "warm-up" } else { "measuring" };
        eprintln!("[{phase}] {} ops/s, {} errors", seen - last, recorder.errors_total());
        last = seen;
    }
}
