use clap::Parser as _;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    taskgate_loadtest::run(taskgate_loadtest::Config::parse()).await.map(drop)
}
