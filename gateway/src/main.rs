use anyhow::Context as _;
use taskgate_gateway::config::Auth;
use taskgate_gateway::{AppState, Config, runtime};

#[cfg(not(feature = "dhat-heap"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(feature = "dhat-heap")]
#[global_allocator]
static GLOBAL: dhat::Alloc = dhat::Alloc;

fn main() -> anyhow::Result<()> {
    #[cfg(feature = "dhat-heap")]
    let _profiler = dhat::Profiler::new_heap();
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(errors) => {
            for error in &errors {
                eprintln!("error: {error}");
            }
            std::process::exit(2);
        }
    };
    config.runtime.main_runtime().context("starting the runtime")?.block_on(serve(config))
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let _telemetry = taskgate_shared::telemetry::init(config.log_format, "taskgate-gateway");
    if config.requests.timeout <= config.inline_timeout {
        tracing::warn!(
            request_timeout = ?config.requests.timeout,
            inline_timeout = ?config.inline_timeout,
            "--request-timeout-ms is not above --inline-timeout-ms: slow inline calls will get 504 instead of their own answer"
        );
    }
    if matches!(config.auth, Auth::None) {
        tracing::warn!(listen = %config.listen, "AUTHENTICATION IS OFF (--auth none): every caller is tenant 'default', principal 'anonymous'");
    }
    let listeners = runtime::bind(config.listen, config.runtime.runtimes())
        .with_context(|| format!("binding {}", config.listen))?;
    tracing::info!(
        listen = %listeners[0].local_addr()?,
        namespace = %config.redis.namespace,
        runtime = ?config.runtime.shape,
        listeners = listeners.len(),
        // The listen caps in effect, the per-principal one computed unless given.
        listen_max_streams = config.streams.max_streams,
        listen_max_streams_per_principal = config.streams.max_streams_per_principal,
        "gateway listening"
    );
    let state = AppState::new(config).await?;
    taskgate_gateway::run(state, listeners, taskgate_shared::shutdown::signal()).await?;
    tracing::info!("gateway stopped");
    Ok(())
}
