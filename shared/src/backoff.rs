//! Pacing for the loops that keep a connection up (pub/sub subscriptions, stream reads,
//! upstream servers): exponential from a floor to a ceiling, with jitter so that a fleet that
//! lost Redis together does not come back together, and reset once a connection works again.

use std::time::Duration;

use backon::{BackoffBuilder as _, ExponentialBackoff, ExponentialBuilder};

/// One loop's wait between attempts.
#[derive(Debug)]
pub struct Backoff {
    builder: ExponentialBuilder,
    delays: ExponentialBackoff,
    max: Duration,
}

impl Backoff {
    /// Waits start at `min` and double up to `max`, for ever.
    pub fn new(min: Duration, max: Duration) -> Self {
        let builder =
            ExponentialBuilder::default().with_min_delay(min).with_max_delay(max).with_jitter().without_max_times();
        Self { builder, delays: builder.build(), max }
    }

    /// The reconnect pacing of the Redis loops: 100 ms up to 5 s.
    pub fn redis() -> Self {
        Self::new(Duration::from_millis(100), Duration::from_secs(5))
    }

    /// The next wait.
    pub fn next_delay(&mut self) -> Duration {
        self.delays.next().unwrap_or(self.max)
    }

    /// Sleeps for the next wait.
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.next_delay()).await;
    }

    /// A success: the next failure waits the shortest time again.
    pub fn reset(&mut self) {
        self.delays = self.builder.build();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_its_ceiling_and_starts_over_after_a_reset() {
        let (min, max) = (Duration::from_millis(100), Duration::from_secs(1));
        let mut backoff = Backoff::new(min, max);
        let first = backoff.next_delay();
        // Jitter adds at most one more delay's worth.
        assert!(first >= min && first <= min * 2, "{first:?}");
        let later: Vec<Duration> = (0..20).map(|_| backoff.next_delay()).collect();
        assert!(later.iter().all(|d| *d <= max * 2), "{later:?}");
        assert!(later.last().is_some_and(|d| *d >= max), "{later:?}");
        backoff.reset();
        assert!(backoff.next_delay() <= min * 2);
    }
}
