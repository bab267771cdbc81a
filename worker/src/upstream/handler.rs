//! What the worker answers when an upstream server talks back during a connection: progress is
//! routed to the call it belongs to, list changes trigger a new listing, and requests for input
//! are declined with a message the server can show (forwarding them is not built yet).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

// Sampling is deprecated upstream, but servers still send it, and it must be declined clearly.
#[allow(deprecated)]
use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
    ElicitResult, ErrorCode, Implementation, ProgressNotificationParam, ProgressToken,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient};
use rmcp::{ClientHandler, ErrorData};
use tokio::sync::{Notify, mpsc};

/// The task's status after the server asked for input (`kind`) and was refused.
pub(super) fn declined_status(kind: &str) -> String {
    format!(
        "The upstream server asked for {kind} during the call; taskgate does not forward that yet, so it was declined."
    )
}

/// Progress and input events of one call.
#[derive(Debug)]
pub(super) enum CallEvent {
    Progress(ProgressNotificationParam),
    InputDeclined(&'static str),
}

/// The client side of one connection to an upstream server.
#[derive(Clone)]
pub(super) struct Bridge {
    pub(super) upstream: Arc<str>,
    /// Calls in flight on this connection, by progress token.
    calls: Arc<Mutex<HashMap<ProgressToken, mpsc::Sender<CallEvent>>>>,
    pub(super) list_changed: Arc<Notify>,
}

impl Bridge {
    pub(super) fn new(upstream: Arc<str>, list_changed: Arc<Notify>) -> Self {
        Self { upstream, calls: Arc::default(), list_changed }
    }

    /// Routes events for `token` to `events` until the returned guard drops.
    pub(super) fn route(&self, token: ProgressToken, events: mpsc::Sender<CallEvent>) -> Route {
        if let Ok(mut calls) = self.calls.lock() {
            calls.insert(token.clone(), events);
        }
        Route { calls: self.calls.clone(), token }
    }

    /// A request from the server carries no reference to the call it serves, so its decline
    /// can be shown on that call's task only when the call is the one in flight.
    fn tell_the_only_call(&self, kind: &'static str) {
        let Ok(calls) = self.calls.lock() else { return };
        if calls.len() == 1
            && let Some(events) = calls.values().next()
        {
            let _ = events.try_send(CallEvent::InputDeclined(kind));
        }
    }

    fn declined(&self, kind: &'static str) -> ErrorData {
        tracing::info!(upstream = %self.upstream, kind, "declined an input request from the upstream server");
        self.tell_the_only_call(kind);
        ErrorData::new(
            ErrorCode::INVALID_REQUEST,
            format!("{kind} is not available through this gateway: it does not forward input requests from tools yet"),
            None,
        )
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
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Err(self.declined("elicitation"))
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
        // No elicitation, sampling, roots or Tasks extension declared: the server should not
        // ask for input or answer with a task of its own.
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("taskgate-worker", env!("CARGO_PKG_VERSION")),
        )
    }
}
