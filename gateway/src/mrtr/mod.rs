//! Multi round-trip requests (SEP-2322) for `tools/call`: the continuation state, the answers
//! gathered so far, and the capability gate on what may be asked.

pub(crate) mod state;

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use taskgate_shared::protocol::params::{self, Params, present};
use taskgate_shared::protocol::{RpcError, ValidMeta, result};

pub(crate) use state::{Carried, Expected, StateKeys, StatePayload, digest};

/// Bounds on what a client may carry through rounds.
const MAX_ANSWERS: usize = 64;

/// The answers of this call: those signed into `requestState` by earlier rounds plus this
/// round's `inputResponses`, and the state an earlier inline run parked with. Answers to keys nobody asked are kept but never read (tools look
/// answers up by the keys they ask), which is how extra keys are ignored.
pub(crate) fn gather(
    keys: &StateKeys,
    params: &Params<'_>,
    expect: &Expected<'_>,
    now_ms: u64,
    max_bytes: usize,
) -> Result<Gathered, RpcError> {
    let (mut answers, carried) = match params.request_state.map(RawValue::get) {
        None | Some("null") => (BTreeMap::new(), Carried::default()),
        Some(_) => {
            let token = params::text(params.request_state)
                .ok_or_else(|| RpcError::invalid_params("requestState must be a string"))?;
            let payload = keys.verify(&token, expect, now_ms)?;
            (payload.answers, payload.carried)
        }
    };
    if params.input_responses.is_some_and(|raw| raw.get() != "null") {
        let responses = input_responses(params.input_responses)
            .ok_or_else(|| RpcError::invalid_params("inputResponses must be an object"))?;
        for (key, response) in responses.into_iter().filter(|(_, r)| usable_answer(r)) {
            let value = serde_json::from_str(response.get())
                .map_err(|err| RpcError::invalid_params(format!("inputResponses: {err}")))?;
            answers.insert(key, value);
        }
    }
    let size: usize = answers.values().map(|v| v.to_string().len()).sum();
    if answers.len() > MAX_ANSWERS || size > max_bytes {
        return Err(RpcError::invalid_params("too many or too large inputResponses"));
    }
    Ok(Gathered { answers, carried })
}

/// What a call carries into its next run: every answer so far, and what an earlier inline run
/// left (the tool's state to resume, its recorded steps).
#[derive(Default)]
pub(crate) struct Gathered {
    pub(crate) answers: BTreeMap<String, Value>,
    pub(crate) carried: Carried,
}

/// Whether a response can answer an input request: an object (ElicitResult,
/// CreateMessageResult, ListRootsResult), whose `action`, when present, is one the spec
/// defines. Anything else is ignored, so the request stays outstanding and is asked again.
pub(crate) fn usable_answer(response: &RawValue) -> bool {
    /// The members that decide it, raw.
    #[derive(Deserialize)]
    struct Answer<'a> {
        #[serde(default, borrow, deserialize_with = "present")]
        action: Option<&'a RawValue>,
        #[serde(default, borrow, deserialize_with = "present")]
        content: Option<&'a RawValue>,
    }
    if !response.get().starts_with('{') {
        return false;
    }
    let Ok(answer) = serde_json::from_str::<Answer<'_>>(response.get()) else { return false };
    let action_ok = answer.action.is_none()
        || matches!(params::text(answer.action).as_deref(), Some("accept" | "decline" | "cancel"));
    let content_ok = answer.content.is_none_or(|c| c.get().starts_with('{')) || answer.action.is_none();
    action_ok && content_ok
}

/// `inputResponses`, each answer kept raw; `None` unless it is an object.
pub(crate) fn input_responses(member: Option<&RawValue>) -> Option<BTreeMap<String, &RawValue>> {
    member.filter(|raw| raw.get().starts_with('{')).and_then(|raw| serde_json::from_str(raw.get()).ok())
}

/// `-32021` unless the current request declared every capability these requests need. Never
/// ask for a kind of input the request did not declare (SEP-2322, "Capability gate").
pub(crate) fn check_capabilities(meta: &ValidMeta, requests: &Map<String, Value>) -> Result<(), RpcError> {
    taskgate_shared::protocol::capabilities::check_input_requests(&meta.capabilities, requests.values())
}

/// `{"resultType":"input_required","inputRequests":…,"requestState":…}`. Not cacheable, so no
/// cache hints.
pub(crate) fn input_required(requests: Map<String, Value>, state: String) -> Value {
    let mut fields = Map::with_capacity(2);
    fields.insert("inputRequests".into(), Value::Object(requests));
    fields.insert("requestState".into(), Value::String(state));
    result::with_type(result::INPUT_REQUIRED, fields)
}
