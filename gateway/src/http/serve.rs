//! Connections: accepting them, bounding them, and timing out the ones that say nothing.
//!
//! - A connection must send its first request's head (HTTP/1.1) or its preface (HTTP/2) within
//!   `--header-read-timeout-ms`. For HTTP/1.1 the same limit applies to every later request head,
//!   so it is also the idle keep-alive timeout. A response in progress (an SSE stream, with its
//!   own keep-alive comments) is never cut by it.
//! - At most `--max-connections` are served at once. One more is answered 503 with
//!   `Retry-After` and closed; past a small number of such refusals in progress, it is closed at
//!   once.
//! - An HTTP/2 connection carries at most `--http2-max-streams` concurrent requests, and pings
//!   find peers that went away.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Request, header};
use axum::response::Response;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Sleep;

use super::edge;
use crate::config::ConnectionLimits;
use crate::error::GatewayError;
use crate::metrics::METRICS;

/// Over-limit connections being answered 503 at once; beyond this they are closed unanswered.
const MAX_REFUSING: usize = 64;
/// Bytes of an HTTP/2 preface; an HTTP/1.1 request head is longer than this.
const PREFACE_LEN: usize = 24;

/// Serves `app` on `listener` until `shutdown` resolves, then stops accepting and waits for
/// the connections to finish what they are doing (idle ones close at once).
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let builder = builder(limits);
    let graceful = GracefulShutdown::new();
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
        let io = TokioIo::new(Preface::new(stream, limits.header_read_timeout));
        match slots.clone().try_acquire_owned() {
            Ok(slot) => {
                let service = TowerToHyperService::new(app.clone());
                let connection = graceful.watch(builder.serve_connection(io, service).into_owned());
                tokio::spawn(async move {
                    if let Err(err) = connection.await {
                        tracing::debug!(error = %err, "connection ended with an error");
                    }
                    drop(slot);
                });
            }
            Err(_) => {
                METRICS.shed.with_label_values(&["connections"]).inc();
                if let Ok(permit) = refusing.clone().try_acquire_owned() {
                    tokio::spawn(async move {
                        refuse(io, limits.header_read_timeout).await;
                        drop(permit);
                    });
                }
            }
        }
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

fn builder(limits: ConnectionLimits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
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
async fn refuse(io: TokioIo<Preface>, header_read_timeout: Duration) {
    let service = hyper::service::service_fn(|request: Request<Incoming>| async move {
        let body = Limited::new(request.into_body(), 64 * 1024);
        let _ = tokio::time::timeout(Duration::from_secs(1), body.collect()).await;
        let mut response: Response<Body> = edge::refusal(GatewayError::Overloaded);
        response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        Ok::<_, std::convert::Infallible>(response)
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout.min(Duration::from_secs(2)))
        .keep_alive(false)
        .serve_connection(io, service);
    if let Err(err) = connection.await {
        tracing::debug!(error = %err, "refused connection ended with an error");
    }
}

/// After a failed accept: a peer that gave up is nothing; anything else (out of file
/// descriptors, most often) waits a moment so the loop does not spin.
async fn backoff_after(err: &io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(err.kind(), ConnectionAborted | ConnectionRefused | ConnectionReset) {
        return;
    }
    tracing::warn!(error = %err, "accept failed");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// A connection that must send its first [`PREFACE_LEN`] bytes before a deadline. Version
/// detection waits for them, and before they arrive no HTTP timer of hyper's runs.
struct Preface {
    io: TcpStream,
    deadline: Option<Pin<Box<Sleep>>>,
    seen: usize,
}

impl Preface {
    fn new(io: TcpStream, timeout: Duration) -> Self {
        Self { io, deadline: Some(Box::pin(tokio::time::sleep(timeout))), seen: 0 }
    }
}

impl AsyncRead for Preface {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                this.seen += buf.filled().len() - before;
                if this.seen >= PREFACE_LEN {
                    this.deadline = None;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                let expired = this.deadline.as_mut().is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready());
                if expired {
                    let err = io::Error::new(io::ErrorKind::TimedOut, "no request within the header timeout");
                    return Poll::Ready(Err(err));
                }
                Poll::Pending
            }
            Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
        }
    }
}

impl AsyncWrite for Preface {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
