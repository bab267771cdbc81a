//! `neighbour`: the noisy-neighbour figure. Each round, tenant A (`--token`) queues `--backlog`
//! tasks as fast as `--concurrency` creates allow; then tenant B (`--neighbour-token`) creates
//! one task and waits for it (listen or poll): B's create-to-terminal time is the figure. The
//! round ends when all of A's tasks have ended, so every round starts from an empty queue.

use futures::StreamExt as _;
use hdrhistogram::Histogram;
use tokio::time::Instant;

use super::{create, create_for_setup, lifecycle};
use crate::client::Client;
use crate::config::Config;
use crate::report::Percentiles;

/// B's create-to-terminal times, one per round, as [`Percentiles`] (ms), and the rounds' A
/// queueing times (ms).
pub struct Rounds {
    pub neighbour: Option<Percentiles>,
    pub each_ms: Vec<f64>,
}

pub async fn run(config: &Config, noisy: Client) -> anyhow::Result<Rounds> {
    let token = config
        .neighbour_token
        .clone()
        .ok_or_else(|| anyhow::anyhow!("--scenario neighbour needs --neighbour-token (tenant B's)"))?;
    let quiet = Client::new(&Config { token: Some(token), ..config.clone() }, 1);
    let mut histogram = Histogram::<u64>::new(3)?;
    let mut each_ms = Vec::new();
    for round in 1..=config.rounds {
        let queued_at = Instant::now();
        let backlog: Vec<String> = futures::stream::iter(0..config.backlog)
            .map(|_| create_for_setup(&noisy, &config.tool, config.arguments.clone()))
            .buffer_unordered(config.concurrency.max(1))
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<_, _>>()?;
        let queued = queued_at.elapsed();
        let t0 = Instant::now();
        let id = create(&quiet, &config.tool, config.arguments.clone()).await?;
        lifecycle::wait_until_terminal(&quiet, &id, config.wait).await?;
        let waited = t0.elapsed();
        histogram.record(u64::try_from(waited.as_micros()).unwrap_or(u64::MAX))?;
        each_ms.push(waited.as_secs_f64() * 1e3);
        println!(
            "round {round}: A queued {} tasks in {:.2} s; B's task took {:.0} ms from create to terminal",
            backlog.len(),
            queued.as_secs_f64(),
            waited.as_secs_f64() * 1e3
        );
        // Drain A's backlog before the next round.
        futures::stream::iter(backlog.iter())
            .map(|id| lifecycle::wait_until_terminal(&noisy, id, crate::config::Wait::Poll))
            .buffer_unordered(config.concurrency.max(1))
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<Vec<()>, _>>()?;
    }
    Ok(Rounds { neighbour: Percentiles::of(&histogram), each_ms })
}
