//! Connections: accepting them, bounding them, and closing the ones that say nothing.
//!
//! - A request head must arrive whole within `--header-read-timeout-ms` of its first byte, and
//!   a new connection must send one within that time of being accepted. A connection that
//!   does not (nothing sent, or half a head) is closed, within one and a half timeouts.
//! - A connection with nothing under way is closed gracefully after `--idle-timeout-ms` (for
//!   HTTP/2 the only timeout after its preface: frames are not heads). The
//!   default is above the idle timeouts of common proxies and load balancers (60 s), so a proxy
//!   never reuses a connection the gateway is closing. A response in progress (an SSE stream,
//!   with its own keep-alive comments, or an inline call that waits) is never idle.
//! - At most `--max-connections` are served at once. One more is answered 503 with
//!   `Retry-After` and closed; past a small number of such refusals in progress, it is closed at
//!   once.
//! - Every route bounds its own request (body read, handler, body size); under them, a request
//!   whose response has not begun within `--request-timeout-ms` plus `--body-timeout-ms` (and
//!   a grace) is answered 504 and the connection closed, so no stalled request keeps a
//!   connection busy for ever. A response under way (an SSE stream) is not cut.
//! - An HTTP/2 connection carries at most `--http2-max-streams` concurrent requests, and pings
//!   find peers that went away.

//!
//! Layout: the accept loop and the refusal of connections over the limit here; one
//! connection's life in `connection`; what it is doing, for its timeouts, in `activity`; the
//! socket and body wrappers that report to it in `io`.

mod activity;
mod connection;
mod io;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Request, header};
use axum::response::Response;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::edge;
use crate::config::ConnectionLimits;
use crate::error::GatewayError;
use crate::metrics::METRICS;
use connection::serve_connection;

/// Over-limit connections being answered 503 at once; beyond this they are closed unanswered.
const MAX_REFUSING: usize = 64;

/// Serves `app` on `listener` until `shutdown` resolves, then stops accepting and waits for
/// the connections to finish what they are doing (idle ones close at once).
///
/// `drain` bounds that wait for each connection: past it, what is still under way is cut.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    drain: Duration,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let builder = builder(limits);
    let stopping = CancellationToken::new();
    let connections = TaskTracker::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    backoff_after(&err).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Small SSE writes must not wait on Nagle's algorithm and the peer's delayed ACK.
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(error = %err, "could not set TCP_NODELAY");
        }
        match slots.clone().try_acquire_owned() {
            Ok(slot) => {
                let (builder, app, stopping) = (builder.clone(), app.clone(), stopping.clone());
                connections.spawn(async move {
                    serve_connection(&builder, stream, app, limits, stopping, drain).await;
                    drop(slot);
                });
            }
            Err(_) => {
                METRICS.shed.with_label_values(&["connections"]).inc();
                if let Ok(permit) = refusing.clone().try_acquire_owned() {
                    tokio::spawn(async move {
                        refuse(stream, limits.header_read_timeout).await;
                        drop(permit);
                    });
                }
            }
        }
    }
    drop(listener);
    stopping.cancel();
    connections.close();
    connections.wait().await;
    Ok(())
}

fn builder(limits: ConnectionLimits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // Head and idle timeouts are this module's (hyper's one timer cannot tell them apart).
    builder.http1().header_read_timeout(None);
    if let Some(bytes) = limits.http1_max_buffer {
        builder.http1().max_buf_size(bytes);
    }
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.http2_max_streams)
        .keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(20));
    builder
}

/// Answers every request on an over-limit connection 503 (after reading what it sent, so the
/// close does not reset the answer away), then closes it.
async fn refuse(stream: TcpStream, header_read_timeout: Duration) {
    let service = hyper::service::service_fn(|request: Request<Incoming>| async move {
        let body = Limited::new(request.into_body(), 64 * 1024);
        let _ = tokio::time::timeout(Duration::from_secs(1), body.collect()).await;
        let mut response: Response<Body> = edge::refusal(GatewayError::Overloaded);
        response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        Ok::<_, Infallible>(response)
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout.min(Duration::from_secs(2)))
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), service);
    if let Err(err) = connection.await {
        tracing::debug!(error = %err, "refused connection ended with an error");
    }
}

/// After a failed accept: a peer that gave up is nothing; anything else (out of file
/// descriptors, most often) waits a moment so the loop does not spin.
async fn backoff_after(err: &std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(err.kind(), ConnectionAborted | ConnectionRefused | ConnectionReset) {
        return;
    }
    tracing::warn!(error = %err, "accept failed");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Limits whose timeouts have all passed the moment they start.
    pub(super) fn expired() -> ConnectionLimits {
        ConnectionLimits {
            header_read_timeout: Duration::ZERO,
            idle_timeout: Duration::ZERO,
            max_connections: 1,
            http2_max_streams: 1,
            http1_max_buffer: None,
            response_deadline: Duration::ZERO,
        }
    }

    #[tokio::test]
    async fn a_request_with_no_response_by_the_deadline_is_answered_and_its_connection_closed() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let app = Router::new().route("/hang", axum::routing::get(std::future::pending::<&'static str>));
        let limits = ConnectionLimits {
            header_read_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60),
            max_connections: 4,
            http2_max_streams: 1,
            http1_max_buffer: None,
            response_deadline: Duration::from_millis(300),
        };
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, app, limits, Duration::from_secs(1), stop.clone().cancelled_owned()));
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream.write_all(b"GET /hang HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
        assert!(read.is_ok(), "the connection was held past its deadline");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 504"), "{answer}");
        stop.cancel();
        server.await.unwrap().unwrap();
    }
}
