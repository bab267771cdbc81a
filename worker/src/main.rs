use anyhow::Context as _;
use taskgate_worker::Config;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let config = Config::from_env().unwrap_or_else(|errors| {
        for error in &errors {
            eprintln!("error: {error}");
        }
        std::process::exit(2)
    });
    config.runtime.main_runtime().context("starting the runtime")?.block_on(async {
        let _telemetry = taskgate_shared::telemetry::init(config.log_format, "taskgate-worker");
        taskgate_worker::run(config, taskgate_worker::shutdown_signal()).await?;
        Ok(())
    })
}
