//! What a `requestState` is bound to: the caller, the method, what it names and a digest of its
//! arguments, so a state is good for the retry of the same request only.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::mcp::Call;
use crate::mrtr::{self, Expected, StatePayload};

/// What a `requestState` is bound to for this call.
#[derive(Clone)]
pub(crate) struct Binding {
    subject: String,
    method: &'static str,
    /// The tool, prompt or resource the request names.
    tool: String,
    args_digest: String,
    ttl_ms: u64,
}

impl Binding {
    pub(crate) fn new(call: &Call<'_>, method: &'static str, tool: &str, arguments: &Value) -> Self {
        let principal = &call.principal;
        Self {
            subject: format!("{}/{}", principal.tenant, principal.subject),
            method,
            tool: tool.to_owned(),
            args_digest: mrtr::digest(arguments),
            ttl_ms: call.state.config.request_state_ttl_ms,
        }
    }

    pub(crate) fn expected(&self) -> Expected<'_> {
        Expected { subject: &self.subject, method: self.method, tool: &self.tool, args_digest: &self.args_digest }
    }

    pub(crate) fn payload(&self, answers: BTreeMap<String, Value>, resume: Option<String>) -> StatePayload {
        StatePayload {
            sub: self.subject.clone(),
            method: self.method.into(),
            tool: self.tool.clone(),
            args: self.args_digest.clone(),
            exp: taskgate_shared::task::now_ms() + self.ttl_ms,
            answers,
            resume,
        }
    }

    pub(crate) fn sign(&self, call: &Call<'_>, answers: BTreeMap<String, Value>, resume: Option<String>) -> String {
        call.state.request_state_keys.sign(&self.payload(answers, resume))
    }
}
