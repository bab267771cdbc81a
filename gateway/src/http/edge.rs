//! Where MCP answers become HTTP responses: JSON bodies, SSE streams, and every error through
//! [`GatewayError::answer`]. No other module builds an MCP response: the MCP layer returns
//! typed replies, and a stream yields typed items (notifications, then `Done` with a result or
//! a `GatewayError`) that are written as JSON-RPC messages here.

use std::any::Any;
use std::convert::Infallible;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use serde_json::Value;
use taskgate_shared::protocol::{RequestId, envelope};
use tower::BoxError;

use crate::error::GatewayError;
use crate::mcp::{Notice, NoticeParams, Reply, Stream, StreamItem};

/// The response to one request. Errors are recorded here, where they are handled.
pub(crate) fn render(id: &RequestId, outcome: Result<Reply, GatewayError>) -> Response {
    match outcome {
        Ok(Reply::Result(result)) => json(StatusCode::OK, &envelope::success(id, result)),
        Ok(Reply::Encoded(result)) => json_bytes(StatusCode::OK, envelope::encode_success(id, &result)),
        Ok(Reply::Stream(stream)) => sse(id.clone(), stream),
        Ok(Reply::Accepted) => StatusCode::ACCEPTED.into_response(),
        Err(err) => {
            err.record();
            let answer = err.answer();
            let mut response = json(answer.status, &envelope::failure(id, &answer.error));
            response.headers_mut().extend(answer.headers);
            response.extensions_mut().insert(err.outcome());
            response
        }
    }
}

/// An error with no request id to answer: framing, or the pipeline's own refusals.
pub(crate) fn refusal(err: GatewayError) -> Response {
    render(&Value::Null, Err(err))
}

/// The pipeline's answer to an error from its tower layers (load shedding, timeouts).
pub(crate) async fn pipeline_error(err: BoxError) -> Response {
    let err = if err.is::<tower::load_shed::error::Overloaded>() {
        GatewayError::Overloaded
    } else if err.is::<tower::timeout::error::Elapsed>() {
        GatewayError::TimedOut
    } else {
        tracing::error!(error = %err, "unexpected error in the request pipeline");
        GatewayError::Panicked
    };
    refusal(err)
}

/// A handler panicked. The panic hook has printed the message; the client gets a JSON-RPC
/// error instead of a dropped connection.
pub(crate) fn panicked(_payload: Box<dyn Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    refusal(GatewayError::Panicked)
}

/// A JSON document (probes and metadata use it too).
pub(crate) fn json(status: StatusCode, body: &Value) -> Response {
    // Serialising a `Value` cannot fail: every map key is a string.
    json_bytes(status, serde_json::to_vec(body).unwrap_or_default())
}

fn json_bytes(status: StatusCode, bytes: Vec<u8>) -> Response {
    let mut response = (status, bytes).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A request-scoped SSE stream: one `data:` line per message, no `id:` lines (nothing is
/// replayed), keep-alive comments, and no buffering by proxies on the way.
fn sse(id: RequestId, stream: Stream) -> Response {
    let events = stream.items.map(move |item| Ok::<_, Infallible>(Event::default().data(message(&id, item))));
    let mut response = Sse::new(events).keep_alive(KeepAlive::new().interval(stream.keep_alive)).into_response();
    let headers = response.headers_mut();
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// One SSE item as a JSON-RPC message. An error ending a stream is recorded and answered by the
/// same table as any other, in-band: the 200 went out with the stream's head.
fn message(id: &RequestId, item: StreamItem) -> String {
    match item {
        StreamItem::Notice(Notice { method, params: NoticeParams::Value(params) }) => {
            envelope::notification(method, params).to_string()
        }
        StreamItem::Notice(Notice { method, params: NoticeParams::Members(members) }) => {
            envelope::encode_notification(method, members.len(), |out| out.extend_from_slice(&members))
        }
        StreamItem::Done(Ok(result)) => envelope::success(id, result).to_string(),
        StreamItem::Done(Err(err)) => {
            err.record();
            envelope::failure(id, &err.answer().error).to_string()
        }
    }
}
