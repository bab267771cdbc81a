//! Exit codes, and the errors that end a command with a hint of what to do next.

use std::process::ExitCode;

/// How a command ended. The numbers are part of the CLI's interface (docs/cli.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Exit {
    Ok = 0,
    /// Completed, but the tool reported an error (`isError: true`).
    ToolError = 1,
    Usage = 2,
    Failed = 3,
    Cancelled = 4,
    /// A task waits for input and there is no terminal to ask on.
    InputNeeded = 5,
    AuthRefused = 6,
    /// The gateway could not be reached, or answered something that is not MCP.
    Transport = 7,
    /// The gateway answered the request with a JSON-RPC error.
    Refused = 8,
    /// The person stopped following; the task goes on.
    Interrupted = 130,
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit as u8)
    }
}

/// An error that ends the command: what happened, and what to do about it.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(crate) struct CliError {
    pub(crate) exit: Exit,
    pub(crate) message: String,
    pub(crate) hint: Option<String>,
}

impl CliError {
    pub(crate) fn new(exit: Exit, message: impl Into<String>) -> Self {
        Self { exit, message: message.into(), hint: None }
    }

    pub(crate) fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self::new(Exit::Usage, message)
    }

    /// A 401 or 403 from the gateway.
    pub(crate) fn auth(challenge: &str) -> Self {
        let scope = challenge.contains("insufficient_scope");
        let message = if scope {
            "the gateway refused this token for the request (403)".to_owned()
        } else {
            "the gateway needs a valid token (401)".to_owned()
        };
        let hint = if scope {
            "use a token whose tenant and principal may do this"
        } else {
            "set --token, --token-file or TASKGATE_TOKEN"
        };
        Self::new(Exit::AuthRefused, message).hint(hint)
    }

    /// A JSON-RPC error the gateway answered with.
    pub(crate) fn refused(what: &str, error: &rmcp::model::ErrorData) -> Self {
        let mut err = Self::new(Exit::Refused, format!("{what}: {} ({})", error.message, error.code.0));
        err.hint = match error.code.0 {
            -32602 if what.starts_with("tasks/") => {
                Some("the task id is unknown, expired, or belongs to someone else".into())
            }
            -32602 => Some("check the arguments against `taskgate tools --schema NAME`".into()),
            -32601 => Some("this gateway does not offer that method; see `taskgate discover`".into()),
            -31429 => Some("the gateway is rate limiting this tenant; try again shortly".into()),
            _ => None,
        };
        err
    }
}

/// Turns an SDK error into the CLI's, naming the request it was for.
pub(crate) fn service(what: &str, err: rmcp::ServiceError) -> CliError {
    if let Some(challenge) = err.auth_challenge() {
        return CliError::auth(challenge);
    }
    match err {
        rmcp::ServiceError::McpError(error) => CliError::refused(what, &error),
        rmcp::ServiceError::Timeout { timeout } => {
            CliError::new(Exit::Transport, format!("{what}: no answer within {}", humantime::format_duration(timeout)))
                .hint("raise --timeout, or check the gateway's health")
        }
        other => CliError::new(Exit::Transport, format!("{what}: {other}"))
            .hint("check --url (TASKGATE_URL) and that the gateway is running"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_stable() {
        let codes: Vec<u8> = [
            Exit::Ok,
            Exit::ToolError,
            Exit::Usage,
            Exit::Failed,
            Exit::Cancelled,
            Exit::InputNeeded,
            Exit::AuthRefused,
            Exit::Transport,
            Exit::Refused,
            Exit::Interrupted,
        ]
        .into_iter()
        .map(|e| e as u8)
        .collect();
        assert_eq!(codes, [0, 1, 2, 3, 4, 5, 6, 7, 8, 130]);
    }

    #[test]
    fn an_auth_challenge_says_what_to_set() {
        let err = CliError::auth("Bearer realm=\"taskgate\"");
        assert_eq!(err.exit, Exit::AuthRefused);
        assert!(err.hint.unwrap().contains("TASKGATE_TOKEN"));
        let err = CliError::auth("Bearer error=\"insufficient_scope\"");
        assert!(err.message.contains("403"));
    }
}
