//! The command line: global options and one subcommand.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, CommandFactory as _, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "taskgate",
    version,
    about = "Call MCP tools as durable tasks through a taskgate gateway, and follow, answer and cancel them",
    after_help = "Exit codes: 0 completed, 1 the tool reported an error, 2 usage, 3 failed, 4 cancelled, \
                  5 input needed and no terminal to ask on, 6 authentication refused, 7 could not talk to the \
                  gateway, 8 the gateway refused the request, 130 stopped following (the task goes on)."
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: Global,
    #[command(subcommand)]
    pub(crate) command: Command,
}

impl Cli {
    /// Parses the command line (exiting on a usage error) and settles which token to use.
    pub(crate) fn parse_args() -> Self {
        Self::settle(Self::command().get_matches_from(std::env::args_os())).unwrap_or_else(|err| err.exit())
    }

    fn settle(matches: clap::ArgMatches) -> Result<Self, clap::Error> {
        use clap::parser::ValueSource::CommandLine;
        let mut cli = <Self as clap::FromArgMatches>::from_arg_matches(&matches)?;
        let given = |id: &str| matches.value_source(id) == Some(CommandLine);
        if cli.global.token.is_some() && cli.global.token_file.is_some() {
            match (given("token"), given("token_file")) {
                (true, true) => {
                    return Err(Self::command()
                        .error(clap::error::ErrorKind::ArgumentConflict, "give --token or --token-file, not both"));
                }
                (false, true) => cli.global.token = None,
                _ => cli.global.token_file = None,
            }
        }
        Ok(cli)
    }
}

#[derive(Debug, Args)]
pub(crate) struct Global {
    /// The gateway's MCP endpoint.
    #[arg(long, global = true, env = "TASKGATE_URL", default_value = "http://127.0.0.1:8080/mcp")]
    pub(crate) url: String,
    /// Bearer token (a JWT or an API key), sent as `Authorization: Bearer …`.
    #[arg(long, global = true, env = "TASKGATE_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// A file holding the bearer token (surrounding whitespace is ignored). Given with
    /// `--token`, the one on the command line wins; both from the environment, the token wins.
    #[arg(long, global = true, env = "TASKGATE_TOKEN_FILE")]
    pub(crate) token_file: Option<PathBuf>,
    /// `human` for people, `json` for scripts (one JSON document per line on stdout).
    #[arg(long, global = true, value_enum, env = "TASKGATE_OUTPUT", default_value_t = Output::Human)]
    pub(crate) output: Output,
    /// Give up on any single request after this long (`30s`, `500ms`, `2m`). Following a task
    /// is not one request and has no limit.
    #[arg(long, global = true, env = "TASKGATE_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub(crate) timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Output {
    Human,
    Json,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// List the tools: name, how a call runs, description.
    Tools {
        /// Print one tool's input and output schemas instead.
        #[arg(long, value_name = "NAME")]
        schema: Option<String>,
    },
    /// Call a tool: create its task and follow it to the end, asking for input on a terminal.
    Call(CallArgs),
    /// Show a task as it is now.
    Get { task: String },
    /// Follow tasks until every one is terminal, one line each.
    Follow {
        #[arg(required = true)]
        tasks: Vec<String>,
    },
    /// Ask for a task to be cancelled (cancellation is cooperative: the tool may still finish).
    Cancel { task: String },
    /// Answer one input request of a task waiting for input.
    Answer(AnswerArgs),
    /// The server's protocol versions, capabilities and extensions.
    Discover,
    /// Show a task's timeline: every transition, its run (fence, holder) and any operator's
    /// action. Reads the gateway's operator console (`--console`), with an operator or
    /// tenant-admin token.
    Inspect { task: String },
    /// Manage per-tenant upstream credentials through the gateway's admin API
    /// (`/admin/credentials`), with an operator or tenant-admin token. Values are sealed by
    /// the gateway and never shown back.
    Credentials {
        #[command(subcommand)]
        action: CredentialsCommand,
    },
    /// Print a shell completion script.
    Completions { shell: clap_complete::Shell },
}

#[derive(Debug, Subcommand)]
pub(crate) enum CredentialsCommand {
    /// Store a credential for a tenant (or one of its principals) and an upstream, replacing
    /// any: its values are given by name, from the environment or a file (preferred), or on
    /// the command line.
    Set(SetCredentialArgs),
    /// List who has a credential for which upstream: value names, key id, who set it when.
    List {
        /// One tenant; without it, every tenant this token reaches.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Delete a credential.
    Delete(HolderArgs),
    /// Seal every credential again under the gateway's current key (after a key rotation).
    Rewrap,
}

#[derive(Debug, Args)]
pub(crate) struct HolderArgs {
    #[arg(long)]
    pub(crate) tenant: String,
    /// One principal's credential; without it, the tenant's own (used by every principal
    /// that has none of its own).
    #[arg(long)]
    pub(crate) principal: Option<String>,
    /// The upstream server's name, as the workers' upstream entries name it.
    #[arg(long)]
    pub(crate) upstream: String,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("values").required(true).multiple(true).args(["value", "value_env", "value_file"])))]
pub(crate) struct SetCredentialArgs {
    #[command(flatten)]
    pub(crate) holder: HolderArgs,
    /// One value, `NAME=VALUE`. Visible to anyone who can list this machine's processes
    /// (`ps`): prefer --value-env or --value-file. Repeatable.
    #[arg(long = "value", value_name = "NAME=VALUE", value_parser = parse_named)]
    pub(crate) value: Vec<(String, String)>,
    /// One value from an environment variable, `NAME=VAR`. Repeatable.
    #[arg(long = "value-env", value_name = "NAME=VAR", value_parser = parse_named)]
    pub(crate) value_env: Vec<(String, String)>,
    /// One value from a file, `NAME=PATH` (one trailing newline is dropped). Repeatable.
    #[arg(long = "value-file", value_name = "NAME=PATH", value_parser = parse_named)]
    pub(crate) value_file: Vec<(String, String)>,
}

#[derive(Debug, Args)]
pub(crate) struct CallArgs {
    pub(crate) tool: String,
    /// One argument, `key=value`; the value is typed by the tool's input schema (numbers,
    /// booleans, JSON objects) and is a string otherwise. Repeatable.
    #[arg(long = "arg", short = 'a', value_name = "KEY=VALUE", value_parser = parse_pair)]
    pub(crate) args: Vec<(String, String)>,
    /// All arguments as one JSON object (`--arg` values are laid over it).
    #[arg(long, value_name = "JSON", conflicts_with = "json_file")]
    pub(crate) json: Option<String>,
    /// All arguments as a JSON object read from a file (`-` for standard input).
    #[arg(long, value_name = "FILE")]
    pub(crate) json_file: Option<PathBuf>,
    /// Print the task id and return at once, without following the task.
    #[arg(long)]
    pub(crate) detach: bool,
    /// The call's idempotency key: the same key (by the same caller, with the same arguments)
    /// always names the same task, so running the command again after a lost answer does not
    /// run the tool twice. Without it, each run makes a fresh key, re-sent on its own retries.
    #[arg(long, value_name = "KEY")]
    pub(crate) idempotency_key: Option<String>,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("action").required(true).args(["accept", "decline", "cancel"])))]
pub(crate) struct AnswerArgs {
    pub(crate) task: String,
    /// The input request's key, as shown by `taskgate get`.
    pub(crate) key: String,
    /// Accept, with this JSON object as the form's content (`{}` for a URL request).
    #[arg(long, value_name = "JSON")]
    pub(crate) accept: Option<String>,
    /// Decline the request.
    #[arg(long)]
    pub(crate) decline: bool,
    /// Dismiss the request without a choice.
    #[arg(long)]
    pub(crate) cancel: bool,
}

fn parse_pair(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

/// `NAME=…` of a credential's value. The error never repeats what was given: it may be a
/// secret typed without its name.
fn parse_named(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, rest)) if !name.is_empty() => Ok((name.to_owned(), rest.to_owned())),
        _ => Err("expected NAME=… (the value's name, an equals sign, then the value, variable or path)".into()),
    }
}

/// `250ms`, `30s`, `2m` (humantime's syntax), above zero.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(s).map_err(|err| format!("{err} (try 30s or 500ms)"))?;
    if duration.is_zero() {
        return Err("the timeout must be above zero".into());
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn pairs_split_at_the_first_equals_sign() {
        assert_eq!(parse_pair("q=a=b"), Ok(("q".into(), "a=b".into())));
        assert_eq!(parse_pair("empty="), Ok(("empty".into(), String::new())));
        assert!(parse_pair("=x").is_err());
        assert!(parse_pair("novalue").is_err());
    }

    #[test]
    fn a_token_on_the_command_line_wins_over_one_from_the_environment() {
        let settle = |args: &[&str]| Cli::settle(Cli::command().try_get_matches_from(args).unwrap());
        // Both on the command line: refused.
        assert!(settle(&["taskgate", "--token", "a", "--token-file", "f", "discover"]).is_err());
        let cli = settle(&["taskgate", "--token", "a", "discover"]).unwrap();
        assert_eq!((cli.global.token.as_deref(), cli.global.token_file), (Some("a"), None));
        let cli = settle(&["taskgate", "discover", "--token-file", "f"]).unwrap();
        assert_eq!(cli.global.token_file, Some(PathBuf::from("f")));
    }

    #[test]
    fn answer_needs_exactly_one_action() {
        Cli::command().debug_assert();
        assert!(Cli::try_parse_from(["taskgate", "answer", "t", "k"]).is_err());
        assert!(Cli::try_parse_from(["taskgate", "answer", "t", "k", "--decline", "--cancel"]).is_err());
        assert!(Cli::try_parse_from(["taskgate", "answer", "t", "k", "--accept", "{}"]).is_ok());
    }
}
