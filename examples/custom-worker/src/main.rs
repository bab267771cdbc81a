//! A worker of your own: taskgate's worker as a library, serving a tool written in Rust
//! ([`count_words::CountWords`]) beside whatever packs (`--tools`) and upstream MCP servers
//! (`--upstreams`) its flags name. Every flag of `taskgate-worker` works here too:
//!
//! ```text
//! custom-worker --redis-url redis://127.0.0.1:6379 --tools "" --upstreams upstreams.toml
//! ```

mod count_words;

use taskgate_worker::{Config, Worker};

fn main() -> anyhow::Result<()> {
    let config = Config::from_env().unwrap_or_else(|errors| {
        for error in &errors {
            eprintln!("error: {error}");
        }
        std::process::exit(2)
    });
    // The runtime `--runtime` asks for (with `per-core`, the first lane's; the worker starts the
    // others' itself).
    config.runtime.main_runtime()?.block_on(async {
        let _telemetry = taskgate_shared::telemetry::init(config.log_format, "custom-worker");
        Worker::new(config).tool(count_words::CountWords).run(taskgate_worker::shutdown_signal()).await?;
        Ok(())
    })
}
