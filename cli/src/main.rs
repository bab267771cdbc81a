//! `taskgate`: call MCP tools as durable tasks from a terminal or a script, and follow, answer
//! and cancel them (docs/cli.md).

use std::process::ExitCode;

mod args;
mod arguments;
mod commands;
mod connect;
mod credentials;
mod exit;
mod follow;
mod form;
mod inspect;
mod prompt;
mod render;
mod text;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = args::Cli::parse_args();
    let json = cli.global.output == args::Output::Json;
    match commands::run(cli).await {
        Ok(exit) => exit.into(),
        Err(err) => {
            if json {
                let error = serde_json::json!({ "error": { "message": err.message, "hint": err.hint, "exit": err.exit as u8 } });
                eprintln!("{error}");
            } else {
                eprintln!("{} {}", console::style("error:").red().bold(), err.message);
                if let Some(hint) = &err.hint {
                    eprintln!("{} {hint}", console::style("hint:").dim());
                }
            }
            err.exit.into()
        }
    }
}
