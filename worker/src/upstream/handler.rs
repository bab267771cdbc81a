//! What the worker answers when an upstream server talks back during a connection: progress is
//! routed to the call it belongs to, list changes trigger a new listing, and a mid-call
//! `elicitation/create` (revisions before 2026-07-28) is either answered `decline` (the default)
//! or, with `elicitation = "hold"`, handed to the call it belongs to, which shows it on the task
//! and waits for the answer. Sampling is declined with an error the server can show.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

// Sampling is deprecated upstream, but servers still send it, and it must be declined clearly.
#[allow(deprecated)]
use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
    ElicitResult, ElicitationAction, ElicitationCapability, ErrorCode, FormElicitationCapability, Implementation,
    ProgressNotificationParam, ProgressToken, UrlElicitationCapability,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient};
use rmcp::{ClientHandler, ErrorData};
use tokio::sync::{Notify, mpsc, oneshot};

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
    /// Calls in flight on this connection, by progress token.
    calls: Arc<Mutex<HashMap<ProgressToken, mpsc::Sender<CallEvent>>>>,
    pub(super) list_changed: Arc<Notify>,
    elicitation: ElicitationPolicy,
}

impl Bridge {
    pub(super) fn new(upstream: Arc<str>, list_changed: Arc<Notify>, elicitation: ElicitationPolicy) -> Self {
        Self { upstream, calls: Arc::default(), list_changed, elicitation }
    }

    /// The events of the one call in flight, when there is exactly one: a request from the
    /// server carries no reference to the call it serves.
    fn the_only_call(&self) -> Option<mpsc::Sender<CallEvent>> {
        let calls = self.calls.lock().ok()?;
        if calls.len() == 1 { calls.values().next().cloned() } else { None }
    }

    /// Routes events for `token` to `events` until the returned guard drops.
    pub(super) fn route(&self, token: ProgressToken, events: mpsc::Sender<CallEvent>) -> Route {
        if let Ok(mut calls) = self.calls.lock() {
            calls.insert(token.clone(), events);
        }
        Route { calls: self.calls.clone(), token }
    }

    /// Shows a decline on the call's task when the call can be told.
    fn tell_the_only_call(&self, kind: &'static str) {
        if let Some(events) = self.the_only_call() {
            let _ = events.try_send(CallEvent::InputDeclined(kind));
        }
    }

    fn declined(&self, kind: &'static str) -> ErrorData {
        tracing::info!(upstream = %self.upstream, kind, "declined an input request from the upstream server");
        self.tell_the_only_call(kind);
        ErrorData::new(ErrorCode::INVALID_REQUEST, format!("{kind} is not available through this gateway"), None)
    }

    /// `decline`, and the task's status says so.
    fn decline_elicitation(&self, why: &str) -> ElicitResult {
        tracing::info!(upstream = %self.upstream, why, "answered an elicitation from the upstream server with decline");
        self.tell_the_only_call("elicitation");
        ElicitResult::new(ElicitationAction::Decline)
    }
}

/// Unroutes a call's events when dropped.
pub(super) struct Route {
    calls: Arc<Mutex<HashMap<ProgressToken, mpsc::Sender<CallEvent>>>>,
    token: ProgressToken,
}

impl Drop for Route {
    fn drop(&mut self) {
        if let Ok(mut calls) = self.calls.lock() {
            calls.remove(&self.token);
        }
    }
}

#[allow(deprecated)]
impl ClientHandler for Bridge {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if self.elicitation == ElicitationPolicy::Decline {
            return Ok(self.decline_elicitation("the server's elicitation policy is decline"));
        }
        let Some(events) = self.the_only_call() else {
            return Ok(self.decline_elicitation("several calls are in flight, and the question names none of them"));
        };
        let (reply, answer) = oneshot::channel();
        if events.send(CallEvent::Elicitation { request, reply }).await.is_err() {
            return Ok(ElicitResult::new(ElicitationAction::Cancel));
        }
        // A call that ends without answering (cancelled, timed out) answers `cancel`.
        Ok(answer.await.unwrap_or_else(|_| ElicitResult::new(ElicitationAction::Cancel)))
    }

    async fn create_message(
        &self,
        _params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        Err(self.declined("sampling"))
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        let events = self.calls.lock().ok().and_then(|calls| calls.get(&params.progress_token).cloned());
        if let Some(events) = events {
            // Progress is advisory: a call that is behind loses the oldest news, never blocks.
            let _ = events.try_send(CallEvent::Progress(params));
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
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
