//! What the worker answers when an upstream server talks back during a connection: progress is
//! routed to the call it belongs to, list changes trigger a new listing, and a mid-call
//! `elicitation/create` (revisions before 2026-07-28) is either answered `decline` (the default)
//! or, with `elicitation = "hold"`, handed to the call it belongs to, which shows it on the task
//! and waits for the answer. Sampling is declined with an error the server can show.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

// Sampling is deprecated upstream, but servers still send it, and it must be declined clearly.
use rmcp::model::RequestId;
#[allow(deprecated)]
use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
    ElicitResult, ElicitationAction, ElicitationCapability, ErrorCode, FormElicitationCapability, Implementation,
    ProgressNotificationParam, ProgressToken, UrlElicitationCapability,
};
use rmcp::service::{InboundStreamOrigin, NotificationContext, RequestContext, RoleClient};
use rmcp::{ClientHandler, ErrorData};
use tokio::sync::{Notify, mpsc, oneshot};

use super::bounds::MAX_INPUT_BYTES;
use super::config::ElicitationPolicy;

/// The task's status after the server asked for input (`kind`) and was refused.
pub(super) fn declined_status(kind: &str) -> String {
    format!(
        "The upstream server asked for {kind} during the call, and was declined (see the server's elicitation setting)."
    )
}

/// Progress and input events of one call.
#[derive(Debug)]
pub(super) enum CallEvent {
    Progress(ProgressNotificationParam),
    InputDeclined(&'static str),
    /// The server asks a question of the call's task (`elicitation = "hold"`); the call answers
    /// through `reply` (dropping it answers `cancel`).
    Elicitation {
        request: ElicitRequestParams,
        reply: oneshot::Sender<ElicitResult>,
    },
}

/// The client side of one connection to an upstream server.
#[derive(Clone)]
pub(super) struct Bridge {
    pub(super) upstream: Arc<str>,
    calls: Arc<Mutex<Calls>>,
    pub(super) list_changed: Arc<Notify>,
    elicitation: ElicitationPolicy,
}

/// Calls in flight on one connection.
#[derive(Default)]
struct Calls {
    /// By progress token: the call's request id and its events.
    routes: HashMap<ProgressToken, (RequestId, mpsc::Sender<CallEvent>)>,
    /// Calls being sent, not routed yet.
    starting: usize,
    /// A call ended without its answer (cancelled, timed out) while the server may still be
    /// running it: a question that names no call can no longer be told apart from one of its.
    tainted: bool,
}

impl Bridge {
    pub(super) fn new(upstream: Arc<str>, list_changed: Arc<Notify>, elicitation: ElicitationPolicy) -> Self {
        Self { upstream, calls: Arc::default(), list_changed, elicitation }
    }

    fn calls(&self) -> std::sync::MutexGuard<'_, Calls> {
        // Nothing panics under this lock; a poisoned one is still consistent enough to read.
        self.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The call a server's question belongs to. Over Streamable HTTP the question arrives on
    /// the stream of the request it serves, which names it. Otherwise (stdio) it names no call,
    /// so it is taken as the one call in flight only when no other call could have asked it:
    /// none being sent, none abandoned on this connection.
    fn asker(&self, origin: Option<&InboundStreamOrigin>) -> Option<mpsc::Sender<CallEvent>> {
        let calls = self.calls();
        if let Some(InboundStreamOrigin::OutboundRequest(id)) = origin {
            return calls.routes.values().find(|(request, _)| request == id).map(|(_, events)| events.clone());
        }
        if calls.starting > 0 || calls.tainted || calls.routes.len() != 1 {
            return None;
        }
        calls.routes.values().next().map(|(_, events)| events.clone())
    }

    /// Counts a call as being sent until it is routed (or the guard drops).
    pub(super) fn starting(&self) -> Starting {
        self.calls().starting += 1;
        Starting { calls: self.calls.clone() }
    }

    /// Routes events for the call (`token`, `request`) to `events` until the guard drops.
    pub(super) fn route(&self, token: ProgressToken, request: RequestId, events: mpsc::Sender<CallEvent>) -> Route {
        self.calls().routes.insert(token.clone(), (request, events));
        Route { calls: self.calls.clone(), token, answered: false }
    }

    /// Shows a decline on the status of the call that asked, when it can be told which one
    /// did (never on another call's task).
    fn tell_the_asker(&self, origin: Option<&InboundStreamOrigin>, kind: &'static str) {
        if let Some(events) = self.asker(origin) {
            let _ = events.try_send(CallEvent::InputDeclined(kind));
        }
    }

    fn declined(&self, origin: Option<&InboundStreamOrigin>, kind: &'static str) -> ErrorData {
        tracing::info!(upstream = %self.upstream, kind, "declined an input request from the upstream server");
        self.tell_the_asker(origin, kind);
        ErrorData::new(ErrorCode::INVALID_REQUEST, format!("{kind} is not available through this gateway"), None)
    }

    /// `decline`, and the task's status says so.
    fn decline_elicitation(&self, origin: Option<&InboundStreamOrigin>, why: &str) -> ElicitResult {
        tracing::info!(upstream = %self.upstream, why, "answered an elicitation from the upstream server with decline");
        self.tell_the_asker(origin, "elicitation");
        ElicitResult::new(ElicitationAction::Decline)
    }
}

/// A call being sent; uncounted when dropped.
pub(super) struct Starting {
    calls: Arc<Mutex<Calls>>,
}

impl Drop for Starting {
    fn drop(&mut self) {
        let mut calls = self.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        calls.starting = calls.starting.saturating_sub(1);
    }
}

/// Unroutes a call's events when dropped; a call dropped before its answer taints the
/// connection (see [`Calls::tainted`]).
pub(super) struct Route {
    calls: Arc<Mutex<Calls>>,
    token: ProgressToken,
    answered: bool,
}

impl Route {
    /// The server answered the call: it is over on the server too.
    pub(super) fn answered(&mut self) {
        self.answered = true;
    }
}

impl Drop for Route {
    fn drop(&mut self) {
        let mut calls = self.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        calls.routes.remove(&self.token);
        if !self.answered {
            calls.tainted = true;
        }
    }
}

#[allow(deprecated)]
impl ClientHandler for Bridge {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let origin = context.extensions.get::<InboundStreamOrigin>();
        if self.elicitation == ElicitationPolicy::Decline {
            return Ok(self.decline_elicitation(origin, "the server's elicitation policy is decline"));
        }
        let Some(events) = self.asker(origin) else {
            return Ok(self.decline_elicitation(origin, "the question cannot be tied to one call"));
        };
        // Held questions are stored with the task: one over the bound is refused, and the call
        // goes on (the server decides what a refused question means).
        let bytes = serde_json::to_string(&request).map_or(usize::MAX, |json| json.len());
        if bytes > MAX_INPUT_BYTES {
            tracing::warn!(upstream = %self.upstream, bytes, "refused an elicitation from the upstream server: too large");
            return Err(ErrorData::new(
                ErrorCode::INVALID_PARAMS,
                format!("the elicitation is over the {} KiB this gateway stores", MAX_INPUT_BYTES / 1024),
                None,
            ));
        }
        let (reply, answer) = oneshot::channel();
        if events.send(CallEvent::Elicitation { request, reply }).await.is_err() {
            return Ok(ElicitResult::new(ElicitationAction::Cancel));
        }
        // A call that ends without answering (cancelled, timed out) answers `cancel`; a server
        // that withdraws its question drops the wait, which the call sees.
        tokio::select! {
            answer = answer => Ok(answer.unwrap_or_else(|_| ElicitResult::new(ElicitationAction::Cancel))),
            () = context.ct.cancelled() => Ok(ElicitResult::new(ElicitationAction::Cancel)),
        }
    }

    async fn create_message(
        &self,
        _params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        Err(self.declined(context.extensions.get::<InboundStreamOrigin>(), "sampling"))
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        let events = self.calls().routes.get(&params.progress_token).map(|(_, events)| events.clone());
        if let Some(events) = events {
            // Progress is advisory: a call that is behind loses the oldest news, never blocks.
            let _ = events.try_send(CallEvent::Progress(params));
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.notify_one();
    }

    // One relisting covers tools, prompts and resources alike.
    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.notify_one();
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.notify_one();
    }

    fn get_info(&self) -> ClientConfig {
        // Elicitation is declared only where it is held and forwarded; no sampling, roots or
        // Tasks extension: the server should not ask for those, or answer with a task of its
        // own. (A 2026-07-28 call declares the task creator's own capabilities per request.)
        let mut capabilities = ClientCapabilities::default();
        if self.elicitation == ElicitationPolicy::Hold {
            let mut elicitation = ElicitationCapability::new();
            elicitation.form = Some(FormElicitationCapability::default());
            elicitation.url = Some(UrlElicitationCapability::default());
            capabilities.elicitation = Some(elicitation);
        }
        ClientConfig::new(capabilities, Implementation::new("taskgate-worker", env!("CARGO_PKG_VERSION")))
    }
}
