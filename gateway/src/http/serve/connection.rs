//! One connection's life: hyper serving it, each request under the connection's response
//! deadline, and the loop that closes it when its head is too slow, it is idle, or the server
//! stops.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Request, header};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use super::activity::{Activity, Underway, Verdict};
use super::io::{Guarded, Watched};
use crate::config::ConnectionLimits;
use crate::error::GatewayError;
use crate::http::edge;

/// After an idle connection is told to close, how long it may take (a peer that stopped reading
/// could otherwise hold it).
const CLOSE_GRACE: Duration = Duration::from_secs(10);

/// One connection, until it ends, times out, or the server stops.
pub(super) async fn serve_connection(
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
