//! How a call to an upstream tool fails, as the task sees it. The call itself (`tool.rs`) and
//! the following of a task the server created for it (`followed.rs`) both raise these, so they
//! sit below both.

use std::time::Duration;

use rmcp::service::ServiceError;
use taskgate_shared::protocol::{ErrorKind, RpcError};

use super::connection::Upstream;
use super::http::error_chain;
use crate::tool::ToolError;

/// The call to `remote` went `timeout` without an answer or progress.
pub(super) fn idle(remote: &str, timeout: Duration) -> RpcError {
    RpcError::new(
        ErrorKind::Internal,
        format!(
            "upstream tool {:?} went {} ms without an answer or progress, and was abandoned",
            remote,
            timeout.as_millis()
        ),
    )
}

/// The call to `remote` ran past its hard limit.
pub(super) fn over_limit(remote: &str, limit: Duration) -> RpcError {
    RpcError::new(
        ErrorKind::Internal,
        format!("upstream tool {:?} did not finish within its limit of {} ms", remote, limit.as_millis()),
    )
}

/// What the server (or the way to it) answered a call to `remote` with, as the task's error.
pub(super) fn failure(upstream: &Upstream, remote: &str, err: ServiceError) -> ToolError {
    let name = upstream.name();
    ToolError::Rpc(match err {
        ServiceError::McpError(e) => {
            let kind = ErrorKind::from_code(i64::from(e.code.0));
            let mut error = RpcError::new(kind, e.message.into_owned());
            if let Some(data) = e.data {
                error = error.with_data(data);
            }
            error
        }
        ServiceError::Timeout { timeout } => idle(remote, timeout),
        // Over HTTP every call is its own request: a failed send means the server could
        // not be reached (refused, reset, a 5xx), not that a connection died mid-call.
        ServiceError::TransportSend(err) if upstream.is_http() => RpcError::new(
            ErrorKind::Internal,
            format!("upstream server {name:?} could not be reached: {}", error_chain(&*err.error)),
        ),
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => RpcError::new(
            ErrorKind::Internal,
            format!("upstream server {name:?} closed the connection during the call (it may have crashed)"),
        ),
        other => RpcError::new(
            ErrorKind::Internal,
            format!("upstream server {name:?} failed the call: {}", error_chain(&other)),
        ),
    })
}

/// The call could not be made at all (`why`), named for its server.
pub(super) fn unavailable(upstream: &str, why: &str) -> ToolError {
    let message = if why.starts_with("upstream server") {
        why.to_owned()
    } else {
        format!("upstream server {upstream:?}: {why}")
    };
    ToolError::Rpc(RpcError::new(ErrorKind::Internal, message))
}
