//! What the MCP layer answers a request with, before any HTTP is decided.

use std::time::Duration;

use futures::stream::BoxStream;
use serde_json::Value;

/// A request's successful answer.
pub(crate) enum Reply {
    /// The JSON-RPC `result` of the request, sent as one JSON body.
    Result(Value),
    /// Whole JSON-RPC messages (notifications, then the response) sent as a request-scoped SSE
    /// stream, with keep-alive comments while it is quiet.
    Stream(Stream),
    /// A notification: accepted, nothing to say.
    Accepted,
}

/// The messages of an SSE reply.
pub(crate) struct Stream {
    pub(crate) messages: BoxStream<'static, Value>,
    pub(crate) keep_alive: Duration,
}
