use taskgate_worker::Config;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::from_env().unwrap_or_else(|errors| {
        for error in &errors {
            eprintln!("error: {error}");
        }
        std::process::exit(2)
    });
    let _telemetry = taskgate_shared::telemetry::init(config.log_format, "taskgate-worker");
    taskgate_worker::run(config, taskgate_worker::shutdown_signal()).await?;
    Ok(())
}
