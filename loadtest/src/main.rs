use clap::Parser as _;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    taskgate_loadtest::run(taskgate_loadtest::Config::parse()).await.map(drop)
}
