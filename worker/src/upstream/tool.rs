//! An upstream server's tool as a taskgate tool: the call runs under the task's lease, its
//! progress becomes the task's status, a cancel reaches the server, and a call that a dead
//! worker may have sent already is not sent again unless that is known to be safe.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CancelledNotification, CancelledNotificationParam, ClientNotification, ClientRequest,
    ElicitRequestParams, ElicitResult, ElicitationAction, PingRequest, Request, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, ServiceError};
use serde_json::Value;
use taskgate_shared::protocol::capabilities::check_input_requests;
use taskgate_shared::protocol::meta::{IDEMPOTENCY_KEY_META, RELATED_TASK_IDS_META};
use taskgate_shared::protocol::{ErrorKind, RpcError};
use taskgate_shared::tools::ToolSpec;
use tokio::sync::mpsc;

use super::bounds::status_text;
use super::config::Resolved;
use super::connection::Upstream;
use super::errors;
use super::followed::{self, Caller, Follow};
use super::handler::{Bridge, CallEvent, declined_status};
use super::per_identity::PerIdentity;
use super::rounds::{self, Saved};
use crate::metrics::METRICS;
use crate::tool::{BoxFuture, Tool, ToolContext, ToolError, ToolOutput};

/// How a held question ended.
enum Held {
    Done(Result<ElicitResult, ToolError>),
    /// The server stopped waiting for the answer.
    Withdrawn,
    /// The call itself ended meanwhile.
    CallEnded(Box<Result<ServerResult, ServiceError>>),
}

/// At most one status update (each is a write and a publish) per this long.
const STATUS_EVERY: Duration = Duration::from_secs(1);

pub(crate) struct UpstreamTool {
    pub(super) upstream: Arc<Upstream>,
    /// The upstream's own name for the tool.
    pub(super) remote: String,
    pub(super) spec: ToolSpec,
    pub(super) settings: Resolved,
    /// Whether running the call again after a reclaim is allowed.
    pub(super) retry_safe: bool,
    pub(super) cancel_grace: Duration,
    /// Set for a per-identity server: where its instances and the callers' credentials are.
    pub(super) identities: Option<Arc<PerIdentity>>,
}

impl Tool for UpstreamTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn call<'a>(&'a self, arguments: Value, ctx: &'a ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let upstream = self.upstream.name().to_owned();
            let started = Instant::now();
            let outcome = match self.instance(ctx).await {
                Ok(instance) => self.run(instance.upstream(), arguments, ctx).await,
                Err(err) => Err(err),
            };
            let label = match &outcome {
                Ok(_) => "completed",
                Err(ToolError::Cancelled(_)) => "cancelled",
                Err(ToolError::Rpc(_)) => "failed",
                Err(ToolError::LeaseLost | ToolError::Suspend) => "abandoned",
            };
            METRICS.upstream_calls.with_label_values(&[&upstream, label]).inc();
            METRICS.upstream_seconds.with_label_values(&[&upstream]).observe(started.elapsed().as_secs_f64());
            tracing::info!(upstream = %upstream, tool = %self.remote, task_id = %ctx.task_id(), outcome = label, "upstream call ended");
            outcome
        })
    }
}

impl UpstreamTool {
    /// The connections this call runs on: the server's own, or the caller's instance.
    async fn instance(&self, ctx: &ToolContext) -> Result<super::per_identity::Chosen, ToolError> {
        match &self.identities {
            None => Ok(super::per_identity::Chosen::Shared(self.upstream.clone())),
            Some(identities) => identities
                .choose(&self.upstream.config, ctx.tenant(), ctx.principal(), ctx.task_id())
                .await
                .map_err(|refusal| super::per_identity::connect_or(&self.upstream.config, ctx, refusal)),
        }
    }

    /// What following a task the server created needs of this tool.
    fn caller<'a>(&'a self, up: &'a Arc<Upstream>) -> Caller<'a> {
        Caller {
            upstream: up,
            remote: &self.remote,
            timeout: self.settings.timeout,
            max_timeout: self.settings.max_timeout,
            cancel_grace: self.cancel_grace,
        }
    }

    async fn run(&self, up: &Arc<Upstream>, arguments: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let upstream = up.name();
        let saved = rounds::saved(ctx)?;
        // A task the server created for an earlier run is followed, not called again.
        if let Some(Saved::Task { server, task, round, keys, asked }) = saved {
            let follow = Follow::resume(ctx, upstream, server, task, round, &keys, asked)?;
            let _permit = up.in_flight.acquire().await.map_err(|_| errors::unavailable(upstream, "shutting down"))?;
            let (_, peer, _) = up.connection().await.map_err(|m| errors::unavailable(upstream, &m))?;
            return followed::follow(&self.caller(up), &peer, ctx, follow).await;
        }
        if !self.retry_safe && !ctx.mark_started().await? {
            tracing::warn!(upstream, tool = %self.remote, task_id = %ctx.task_id(), "an earlier run was interrupted mid-call; not retried");
            return Err(ToolError::Rpc(RpcError::new(
                ErrorKind::Internal,
                format!(
                    "the call to upstream tool {:?} was interrupted (its worker stopped) and is not retried because the tool may have side effects; mark it read-only or idempotent upstream, or set retry_on_reclaim, to allow a retry",
                    self.remote
                ),
            )));
        }
        let arguments = match arguments {
            Value::Object(map) => Some(map),
            Value::Null => None,
            _ => return Err(ToolError::Rpc(RpcError::invalid_params("tool arguments must be an object"))),
        };
        let _permit = up.in_flight.acquire().await.map_err(|_| errors::unavailable(upstream, "shutting down"))?;
        let (index, peer, bridge) = up.connection().await.map_err(|m| errors::unavailable(upstream, &m))?;
        // A run after the task was parked continues the server's rounds where they stopped.
        let mut resume = match saved {
            Some(Saved::Rounds { round, request_state, keys }) => {
                Some(rounds::resume(ctx, round, request_state, &keys)?)
            }
            _ => None,
        };
        loop {
            let mut params = CallToolRequestParams::new(self.remote.clone());
            params.arguments.clone_from(&arguments);
            if let Some(resume) = &resume {
                params.input_responses = Some(resume.responses.clone());
                params.request_state.clone_from(&resume.request_state);
            }
            match self.send(up, params, index, &peer, &bridge, ctx).await? {
                ServerResult::CallToolResult(result) => {
                    let result = serde_json::to_value(result)
                        .map_err(|_| errors::unavailable(upstream, "its result did not serialise"))?;
                    return Ok(ToolOutput { result, status_message: None });
                }
                ServerResult::InputRequiredResult(asked) => {
                    match rounds::next(ctx, &self.remote, resume.as_ref(), asked) {
                        rounds::Next::Retry(next) => resume = Some(next),
                        rounds::Next::Stop(err) => return Err(err),
                    }
                }
                ServerResult::CreateTaskResult(created) => {
                    let task = created.task.task_id;
                    tracing::info!(upstream, tool = %self.remote, task_id = %ctx.task_id(), "the server answered with a task of its own; following it");
                    let saved = Saved::Task {
                        server: upstream.to_owned(),
                        task: task.clone(),
                        round: 0,
                        keys: Vec::new(),
                        asked: Vec::new(),
                    };
                    if let Err(err) = ctx.save_state(&serde_json::to_value(saved).unwrap_or(Value::Null)).await {
                        // Without its id saved, a later run could not find the server's task:
                        // stop that task too.
                        return Err(followed::abandon(&self.caller(up), &peer, ctx, &task, err).await);
                    }
                    let follow = Follow { task, round: 0, asked: Vec::new(), answers: None };
                    return followed::follow(&self.caller(up), &peer, ctx, follow).await;
                }
                _ => return Err(errors::unavailable(upstream, "it answered the call with an unexpected result")),
            }
        }
    }

    /// Sends one `tools/call` and waits for its answer, turning the server's progress into the
    /// task's status and a cancel of the task into one of the call.
    async fn send(
        &self,
        up: &Arc<Upstream>,
        params: CallToolRequestParams,
        index: usize,
        peer: &Peer<RoleClient>,
        bridge: &Bridge,
        ctx: &ToolContext,
    ) -> Result<ServerResult, ToolError> {
        let upstream = up.name();
        // The call's timeouts are kept here rather than by the SDK, so that the time a question
        // is held for a human does not count against them.
        let mut options = PeerRequestOptions::no_options();
        // The server may ask only for input the task's creator can give.
        options.meta = rounds::creator_capabilities(ctx, up.config.follow_tasks);
        // The task's id as an idempotency key: the same on every run of the task (a retry after
        // a crash, a replay after an answer), so a server that honours keys runs the call once.
        // A task made with a client's key has an id derived from that key.
        let meta = options.meta.get_or_insert_with(Default::default);
        meta.insert(IDEMPOTENCY_KEY_META.to_owned(), Value::from(ctx.task_id()));
        // The caller's own related tasks only (the gateway dropped the rest): ids of taskgate's
        // tasks, which the server may know from earlier calls made for them.
        if !ctx.related_tasks().is_empty() {
            meta.insert(RELATED_TASK_IDS_META.to_owned(), Value::from(ctx.related_tasks().to_vec()));
        }
        let in_flight = METRICS.upstream_in_flight.with_label_values(&[upstream]);
        in_flight.inc();
        let _in_flight = scopeguard::guard((), move |()| in_flight.dec());
        let starting = bridge.starting();
        let handle = peer
            .send_request_with_option(ClientRequest::CallToolRequest(Request::new(params)), options)
            .await
            .map_err(|err| errors::failure(up, &self.remote, err))?;
        let (events_tx, mut events) = mpsc::channel(32);
        let mut route = bridge.route(handle.progress_token.clone(), handle.id.clone(), events_tx);
        drop(starting);
        let request_id = handle.id.clone();
        let response = handle.await_response();
        tokio::pin!(response);

        let timeout = self.settings.timeout;
        let mut idle = tokio::time::Instant::now() + timeout;
        let mut hard = tokio::time::Instant::now() + self.settings.max_timeout;
        let mut throttle = Throttle::default();
        loop {
            tokio::select! {
                answer = &mut response => {
                    route.answered();
                    return answer.map_err(|err| errors::failure(up, &self.remote, err));
                }
                Some(event) = events.recv() => match event {
                    CallEvent::Progress(p) => {
                        idle = tokio::time::Instant::now() + timeout;
                        let message = progress_message(p.progress, p.total, p.message.as_deref());
                        throttle.offer(message, (p.progress, p.total));
                    }
                    CallEvent::InputDeclined(kind) => throttle.offer(declined_status(kind), (0.0, None)),
                    CallEvent::Elicitation { request, mut reply } => {
                        let held_at = tokio::time::Instant::now();
                        let held = tokio::select! {
                            held = self.hold(ctx, request) => Held::Done(held),
                            () = reply.closed() => Held::Withdrawn,
                            answer = &mut response => Held::CallEnded(Box::new(answer)),
                        };
                        hard += held_at.elapsed();
                        idle = tokio::time::Instant::now() + timeout;
                        match held {
                            Held::Done(Ok(answer)) => {
                                let _ = reply.send(answer);
                            }
                            // Cancelled: the branch below tells the server (the dropped reply
                            // answers the question `cancel`).
                            Held::Done(Err(ToolError::Cancelled(_))) if ctx.is_cancelled() => {}
                            Held::Done(Err(err)) => return Err(err),
                            Held::Withdrawn => {
                                tracing::info!(upstream, tool = %self.remote, task_id = %ctx.task_id(), "the server withdrew its question");
                                ctx.withdraw_question("The upstream server withdrew its question.").await?;
                            }
                            // The task may still show the question: the outcome written next
                            // ends it (a held task can be finished by its holder).
                            Held::CallEnded(answer) => {
                                route.answered();
                                return (*answer).map_err(|err| errors::failure(up, &self.remote, err));
                            }
                        }
                    }
                },
                () = throttle.due() => {}
                () = tokio::time::sleep_until(idle) => {
                    self.abandon_call(peer, request_id, "timed out").await;
                    return Err(ToolError::Rpc(errors::idle(&self.remote, timeout)));
                }
                () = tokio::time::sleep_until(hard) => {
                    self.abandon_call(peer, request_id, "timed out").await;
                    return Err(ToolError::Rpc(errors::over_limit(&self.remote, self.settings.max_timeout)));
                }
                () = ctx.cancelled() => {
                    tracing::info!(upstream, tool = %self.remote, task_id = %ctx.task_id(), "cancelling the upstream call");
                    self.abandon_call(peer, request_id, "cancelled by the task's owner").await;
                    // A server that ignores the cancel still has to answer others; one that
                    // does not even answer a ping within the grace period is restarted.
                    let (upstream_ref, grace, peer) = (up.clone(), self.cancel_grace, peer.clone());
                    tokio::spawn(async move {
                        let ping = peer.send_request_with_option(
                            ClientRequest::PingRequest(PingRequest::default()),
                            PeerRequestOptions::with_timeout(grace),
                        );
                        // Any answer, an error included, shows the server is alive: a
                        // 2026-07-28 server may well not know `ping`.
                        let alive = match ping.await {
                            Ok(handle) => matches!(
                                handle.await_response().await,
                                Ok(_) | Err(ServiceError::McpError(_) | ServiceError::UnexpectedResponse)
                            ),
                            Err(_) => false,
                        };
                        if !alive {
                            upstream_ref.kill(index);
                        }
                    });
                    return Err(ToolError::Cancelled(None));
                }
            }
            if let Some((message, (progress, total))) = throttle.take() {
                ctx.progress(progress, total, Some(&message)).await;
                ctx.set_status(&message).await?;
            }
        }
    }

    /// Tells the server the worker no longer waits for the call (`notifications/cancelled`).
    async fn abandon_call(&self, peer: &Peer<RoleClient>, request_id: rmcp::model::RequestId, reason: &str) {
        let notice =
            CancelledNotification::new(CancelledNotificationParam::new(Some(request_id), Some(reason.to_owned())));
        let _ = peer.send_notification(ClientNotification::CancelledNotification(notice)).await;
    }

    /// A question the server asked mid-call (`elicitation = "hold"`): shown on the task while
    /// this run keeps its lease, unless the task's creator cannot answer it, in which case the
    /// server hears `decline` (input is never forwarded to a client that did not declare it).
    async fn hold(&self, ctx: &ToolContext, request: ElicitRequestParams) -> Result<ElicitResult, ToolError> {
        let upstream = self.upstream.name();
        let request = serde_json::json!({ "method": "elicitation/create", "params": request });
        let declared = ctx.client_capabilities().as_object().cloned().unwrap_or_default();
        if check_input_requests(&declared, std::iter::once(&request)).is_err() {
            tracing::info!(upstream, tool = %self.remote, task_id = %ctx.task_id(), "the task's creator cannot answer the server's question: declined");
            ctx.set_status(&declined_status("elicitation")).await?;
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        }
        let message = request
            .pointer("/params/message")
            .and_then(Value::as_str)
            .map_or_else(|| format!("The upstream tool {:?} asks a question.", self.remote), status_text);
        tracing::info!(upstream, tool = %self.remote, task_id = %ctx.task_id(), "holding the server's question for the task's creator");
        let answer = ctx.hold_input(&request, &message).await?;
        // The client's answer was checked by the gateway as an elicitation result; one that
        // does not read as such ends the question.
        Ok(serde_json::from_value(answer).unwrap_or_else(|_| ElicitResult::new(ElicitationAction::Cancel)))
    }
}

/// The status a progress notification shows; the server's message is bounded and cleaned
/// (see [`status_text`]), the amount kept whole.
fn progress_message(progress: f64, total: Option<f64>, message: Option<&str>) -> String {
    let amount = match total {
        Some(total) => format!("{progress}/{total}"),
        None => format!("{progress}"),
    };
    match message {
        Some(message) => {
            let amount = format!(" ({amount})");
            let room = super::bounds::MAX_STATUS_BYTES.saturating_sub(amount.len()).max(1);
            let mut text = status_text(message);
            if text.len() > room {
                let mut end = room.saturating_sub('…'.len_utf8());
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
                text.push('…');
            }
            format!("{text}{amount}")
        }
        None => format!("Progress {amount}"),
    }
}

/// Keeps the latest progress and lets it out at most once per [`STATUS_EVERY`]: the first at
/// once, later ones when the interval is over, and never an old one after a newer.
#[derive(Default)]
struct Throttle {
    latest: Option<(String, (f64, Option<f64>))>,
    last: Option<Instant>,
}

impl Throttle {
    fn offer(&mut self, message: String, amount: (f64, Option<f64>)) {
        self.latest = Some((message, amount));
    }

    fn take(&mut self) -> Option<(String, (f64, Option<f64>))> {
        if self.last.is_some_and(|last| last.elapsed() < STATUS_EVERY) {
            return None;
        }
        let latest = self.latest.take()?;
        self.last = Some(Instant::now());
        Some(latest)
    }

    /// Resolves when a held-back update may go out; never when there is none.
    async fn due(&self) {
        match (&self.latest, self.last) {
            (Some(_), Some(last)) => tokio::time::sleep_until((last + STATUS_EVERY).into()).await,
            _ => std::future::pending().await,
        }
    }
}
