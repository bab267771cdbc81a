//! What the MCP layer answers a request with, before any HTTP is decided.

use std::time::Duration;

use futures::stream::BoxStream;
use serde_json::Value;

/// A request's successful answer.
pub(crate) enum Reply {
    /// The JSON-RPC `result` of the request, sent as one JSON body.
    Result(Value),
    /// The same, already encoded as JSON (a method that writes its result straight into bytes).
    Encoded(Vec<u8>),
    /// Whole JSON-RPC messages (notifications, then the response) sent as a request-scoped SSE
    /// stream, with keep-alive comments while it is quiet.
    Stream(Stream),
    /// A notification: accepted, nothing to say.
    Accepted,
}

/// The messages of an SSE reply, each a whole JSON-RPC message as JSON text.
pub(crate) struct Stream {
    pub(crate) messages: BoxStream<'static, String>,
    pub(crate) keep_alive: Duration,
}
