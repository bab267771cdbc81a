//! What the MCP layer answers a request with, before any HTTP is decided.

use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use serde_json::Value;

use crate::error::GatewayError;

/// A request's successful answer.
pub(crate) enum Reply {
    /// The JSON-RPC `result` of the request, sent as one JSON body.
    Result(Value),
    /// The same, already encoded as JSON.
    Encoded(Encoded),
    /// Notifications, then the response, sent as a request-scoped SSE stream, with keep-alive
    /// comments while it is quiet.
    Stream(Stream),
    /// A notification: accepted, nothing to say.
    Accepted,
}

/// A `result` already encoded as JSON: written for this request (a method that writes its
/// result straight into bytes), or kept and shared (a snapshot-cache hit: not copied before the
/// edge frames it).
pub(crate) enum Encoded {
    Written(Vec<u8>),
    Kept(Bytes),
}

impl std::ops::Deref for Encoded {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Self::Written(bytes) => bytes,
            Self::Kept(bytes) => bytes,
        }
    }
}

/// The items of an SSE reply. The edge (`http/edge.rs`) writes each as a JSON-RPC message.
pub(crate) struct Stream {
    pub(crate) items: BoxStream<'static, StreamItem>,
    pub(crate) keep_alive: Duration,
}

/// One message of an SSE reply.
pub(crate) enum StreamItem {
    Notice(Notice),
    /// The request's response, the stream's last message: its result, or the error that the
    /// table in `error.rs` answers (in-band: the 200 went out with the stream's head).
    Done(Result<Value, GatewayError>),
}

/// A notification to the client.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Notice {
    pub(crate) method: &'static str,
    pub(crate) params: NoticeParams,
}

/// A notification's `params`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum NoticeParams {
    Value(Value),
    /// The members of the `params` object as JSON, without its braces: a listen snapshot,
    /// written straight into bytes.
    Members(Vec<u8>),
}

impl Notice {
    pub(crate) fn new(method: &'static str, params: Value) -> Self {
        Self { method, params: NoticeParams::Value(params) }
    }
}
