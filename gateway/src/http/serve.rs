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

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Request, header};
use axum::response::Response;
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt as _;

use super::edge;
use crate::config::ConnectionLimits;
use crate::error::GatewayError;
use crate::metrics::METRICS;

/// Over-limit connections being answered 503 at once; beyond this they are closed unanswered.
const MAX_REFUSING: usize = 64;
/// After an idle connection is told to close, how long it may take (a peer that stopped reading
/// could otherwise hold it).
const CLOSE_GRACE: Duration = Duration::from_secs(10);
/// The HTTP/2 connection preface: such a connection sends frames, not heads.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

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
) -> io::Result<()> {
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

/// One connection, until it ends, times out, or the server stops.
async fn serve_connection(
    builder: &auto::Builder<TokioExecutor>,
    stream: TcpStream,
    app: Router,
    limits: ConnectionLimits,
    stopping: CancellationToken,
    drain: Duration,
) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched { io: stream, activity: activity.clone(), started: false });
    let counted = activity.clone();
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let guard = Underway::start(counted.clone());
        let response = app.clone().oneshot(request.map(Body::new));
        async move {
            // A request counts as busy only until its deadline: one whose response has not
            // begun by then (a body that never comes, a handler that hangs) is dropped, and the
            // connection closes after the answer.
            let response = match tokio::time::timeout(limits.response_deadline, response).await {
                Ok(response) => response?,
                Err(_) => {
                    tracing::warn!("a request had no response within the connection's deadline; cut");
                    let mut response = edge::refusal(GatewayError::TimedOut);
                    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
                    response
                }
            };
            Ok::<_, Infallible>(response.map(|body| Body::new(Guarded { body, _guard: guard })))
        }
    });
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);
    // Once told to close: the time by which it must have, else it is cut.
    let mut close_by: Option<Instant> = None;
    loop {
        let wake = close_by.unwrap_or_else(|| activity.next_check(limits));
        tokio::select! {
            ended = connection.as_mut() => {
                if let Err(err) = ended {
                    tracing::debug!(error = %err, "connection ended with an error");
                }
                return;
            }
            () = stopping.cancelled(), if close_by.is_none() => {
                connection.as_mut().graceful_shutdown();
                close_by = Some(Instant::now() + drain);
            }
            () = tokio::time::sleep_until(wake) => {
                if close_by.is_some() {
                    return;
                }
                match activity.verdict(limits) {
                    Verdict::Busy => {}
                    // Half a head (or none on a new connection): not worth a goodbye.
                    Verdict::HeadTooSlow => return,
                    Verdict::Idle => {
                        connection.as_mut().graceful_shutdown();
                        close_by = Some(Instant::now() + CLOSE_GRACE);
                    }
                }
            }
        }
    }
}

/// What a connection is doing, for its head and idle timeouts. Times are milliseconds since
/// `epoch`.
struct Activity {
    epoch: Instant,
    /// Requests whose response has not been sent whole yet.
    underway: AtomicUsize,
    /// When the head being read began; `NONE` when no head is being read.
    head_since: AtomicU64,
    /// When the connection last had nothing under way.
    quiet_since: AtomicU64,
    /// HTTP/2: frames (pings included) are not heads; only the idle timeout applies.
    http2: AtomicBool,
}

const NONE: u64 = u64::MAX;

enum Verdict {
    Busy,
    HeadTooSlow,
    Idle,
}

impl Activity {
    fn new() -> Self {
        // A new connection owes its first head from the moment it is accepted.
        Self {
            epoch: Instant::now(),
            underway: AtomicUsize::new(0),
            head_since: AtomicU64::new(0),
            quiet_since: AtomicU64::new(0),
            http2: AtomicBool::new(false),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(NONE - 1)
    }

    fn at(&self, ms: u64) -> Instant {
        self.epoch + Duration::from_millis(ms)
    }

    /// Bytes arrived: with nothing under way, they begin a head (HTTP/1.1 only).
    fn read(&self, bytes: &[u8], first: bool) {
        // "PRI " tells the preface from any HTTP/1.1 method; a shorter first read is taken as
        // HTTP/1.1 (clients send the preface in one write).
        if first && bytes.len() >= 4 && H2_PREFACE.starts_with(&bytes[..bytes.len().min(H2_PREFACE.len())]) {
            // The preface answers the accept's deadline; from here on only idleness counts.
            self.http2.store(true, Ordering::Release);
            self.quiet_since.store(self.now(), Ordering::Release);
            self.head_since.store(NONE, Ordering::Release);
            return;
        }
        if self.http2.load(Ordering::Acquire) || self.underway.load(Ordering::Acquire) > 0 {
            return;
        }
        let _ = self.head_since.compare_exchange(NONE, self.now(), Ordering::AcqRel, Ordering::Acquire);
    }

    /// When to look again: the head's deadline, or the idle deadline, or (while busy) an idle
    /// period from now. Requests are not tracked by wake-ups (that would cost two per request):
    /// looking early is harmless, and on HTTP/1.1 the loop looks at least every half head
    /// timeout, so a head that began meanwhile is cut within one and a half of them.
    fn next_check(&self, limits: ConnectionLimits) -> Instant {
        let now = Instant::now();
        let due = if self.underway.load(Ordering::Acquire) > 0 {
            now + limits.idle_timeout
        } else {
            match self.head_since.load(Ordering::Acquire) {
                NONE => self.at(self.quiet_since.load(Ordering::Acquire)) + limits.idle_timeout,
                since => self.at(since) + limits.header_read_timeout,
            }
        };
        if self.http2.load(Ordering::Acquire) { due } else { due.min(now + limits.header_read_timeout / 2) }
    }

    fn verdict(&self, limits: ConnectionLimits) -> Verdict {
        if self.underway.load(Ordering::Acquire) > 0 {
            return Verdict::Busy;
        }
        let now = Instant::now();
        match self.head_since.load(Ordering::Acquire) {
            NONE if now >= self.at(self.quiet_since.load(Ordering::Acquire)) + limits.idle_timeout => Verdict::Idle,
            NONE => Verdict::Busy,
            since if now >= self.at(since) + limits.header_read_timeout => Verdict::HeadTooSlow,
            _ => Verdict::Busy,
        }
    }
}

/// One request under way, from its head to the end of its response.
struct Underway(Arc<Activity>);

impl Underway {
    fn start(activity: Arc<Activity>) -> Self {
        activity.underway.fetch_add(1, Ordering::AcqRel);
        activity.head_since.store(NONE, Ordering::Release);
        Self(activity)
    }
}

impl Drop for Underway {
    fn drop(&mut self) {
        let activity = &self.0;
        activity.quiet_since.store(activity.now(), Ordering::Release);
        activity.underway.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request under way until it is sent or dropped.
struct Guarded {
    body: Body,
    _guard: Underway,
}

impl hyper::body::Body for Guarded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The socket, reporting the bytes that begin a request head.
struct Watched {
    io: TcpStream,
    activity: Arc<Activity>,
    /// Whether any byte was read yet (the first read tells HTTP/2 from HTTP/1.1).
    started: bool,
}

impl AsyncRead for Watched {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.read(&buf.filled()[before..], !this.started);
            this.started = true;
        }
        polled
    }
}

impl AsyncWrite for Watched {
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
async fn backoff_after(err: &io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
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
    fn expired() -> ConnectionLimits {
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

    #[test]
    fn a_new_connection_owes_a_head_from_its_accept() {
        assert!(matches!(Activity::new().verdict(expired()), Verdict::HeadTooSlow));
    }

    #[test]
    fn http1_heads_are_timed_and_requests_under_way_are_never_idle() {
        let activity = Arc::new(Activity::new());
        activity.read(b"POST /mcp HTTP/1.1\r\n", true);
        assert!(matches!(activity.verdict(expired()), Verdict::HeadTooSlow));
        let underway = Underway::start(activity.clone());
        activity.read(b"{\"body\": 1}", false);
        assert!(matches!(activity.verdict(expired()), Verdict::Busy), "body bytes are not a head");
        drop(underway);
        assert!(matches!(activity.verdict(expired()), Verdict::Idle));
        activity.read(b"P", false);
        assert!(matches!(activity.verdict(expired()), Verdict::HeadTooSlow), "the next head is timed again");
    }

    #[test]
    fn http2_frames_are_not_heads() {
        let activity = Arc::new(Activity::new());
        activity.read(&H2_PREFACE[..10], true);
        assert!(matches!(activity.verdict(expired()), Verdict::Idle));
        // A PING acknowledgement on an idle connection.
        activity.read(&[0, 0, 8, 6, 1, 0, 0, 0, 0], false);
        assert!(matches!(activity.verdict(expired()), Verdict::Idle));
        let _stream = Underway::start(activity.clone());
        assert!(matches!(activity.verdict(expired()), Verdict::Busy));
    }
}
