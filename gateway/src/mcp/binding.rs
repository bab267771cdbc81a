//! What a `requestState` is bound to: the caller, the method, what it names and a digest of its
//! arguments, so a state is good for the retry of the same request only; and how an inline run
//! ends, with a result or with its questions under such a state.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::GatewayError;
use crate::mcp::inline::{self, Done, Forwarding, InlineRun};
use crate::mcp::{Call, Reply};
use crate::mrtr::{self, Carried, Expected, StateKeys, StatePayload};

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
        Self {
            subject: call.principal.owner().key(),
            method,
            tool: tool.to_owned(),
            args_digest: mrtr::digest(arguments),
            ttl_ms: call.state.config.request_state.ttl_ms,
        }
    }

    pub(crate) fn expected(&self) -> Expected<'_> {
        Expected { subject: &self.subject, method: self.method, tool: &self.tool, args_digest: &self.args_digest }
    }

    pub(crate) fn payload(&self, answers: BTreeMap<String, Value>, carried: Carried) -> StatePayload {
        StatePayload {
            sub: self.subject.clone(),
            method: self.method.into(),
            tool: self.tool.clone(),
            args: self.args_digest.clone(),
            exp: taskgate_shared::task::now_ms() + self.ttl_ms,
            answers,
            carried,
        }
    }

    pub(crate) fn sign(&self, call: &Call<'_>, answers: BTreeMap<String, Value>, carried: Carried) -> String {
        call.state.request_state_keys.sign(&self.payload(answers, carried))
    }
}

/// Turns an inline run's outcome into the method's result.
#[derive(Clone)]
pub(crate) struct Finisher {
    meta: taskgate_shared::protocol::ValidMeta,
    binding: Binding,
    answers: BTreeMap<String, Value>,
    keys: StateKeys,
    /// `(ttlMs, cacheScope)` for results that carry cache hints.
    cache: Option<(u64, &'static str)>,
}

impl Finisher {
    pub(crate) fn new(
        call: &Call<'_>,
        binding: Binding,
        answers: BTreeMap<String, Value>,
        cache: Option<(u64, &'static str)>,
    ) -> Self {
        Self { meta: call.meta.clone(), binding, answers, keys: call.state.request_state_keys.clone(), cache }
    }

    /// Waits for `run`: the result as JSON, or a stream once notices had to be forwarded.
    pub(crate) async fn drive(self, run: InlineRun, forwarding: Forwarding) -> Result<Reply, GatewayError> {
        let streamed = self.clone();
        match inline::drive(run, forwarding, move |done| streamed.finish(done)).await {
            Ok(done) => self.finish(done).map(Reply::Result),
            Err(stream) => Ok(Reply::Stream(stream)),
        }
    }

    fn finish(&self, done: Done) -> Result<Value, GatewayError> {
        match done {
            Done::Result(mut result) => {
                if let (Some((ttl_ms, scope)), Some(fields)) = (self.cache, result.as_object_mut()) {
                    fields.insert("ttlMs".into(), ttl_ms.into());
                    fields.insert("cacheScope".into(), scope.into());
                }
                Ok(result)
            }
            Done::Error(err) => Err(err),
            Done::InputRequired { requests, carried } => {
                mrtr::check_capabilities(&self.meta, &requests)?;
                let state = self.keys.sign(&self.binding.payload(self.answers.clone(), carried));
                Ok(mrtr::input_required(requests, state))
            }
        }
    }
}
