//! `tasks/update`: answers to outstanding input requests. Always an empty acknowledgement for
//! an owned task; answers to unknown, answered or superseded keys are ignored.

use std::collections::BTreeMap;

use serde_json::Value;
use serde_json::value::RawValue;
use taskgate_shared::protocol::{RpcError, result};
use taskgate_shared::store::Answered;

use crate::error::GatewayError;
use crate::mcp::{Call, task_id, task_not_found};

/// More answers than any tool could have asked for at once is abuse, not a mistake.
const MAX_ANSWERS: usize = 64;

pub(crate) async fn run(call: &Call<'_>) -> Result<Value, GatewayError> {
    let id = task_id(call.params)?;
    let owner = call.principal.owner();
    let Some(responses) = crate::mrtr::input_responses(call.params.input_responses) else {
        // The lookup comes first: a foreign id must not learn that its inputResponses were
        // malformed. It reads the owner fields only, so a foreign task costs an unknown one's.
        return Err(match call.state.store.owns_task(&id, &owner).await? {
            true => RpcError::invalid_params("inputResponses must be an object"),
            false => task_not_found(),
        }
        .into());
    };
    if responses.len() > MAX_ANSWERS {
        return Err(RpcError::invalid_params(format!("at most {MAX_ANSWERS} inputResponses per update")).into());
    }
    let answers = usable_answers(&responses)?;
    let size: usize = answers.iter().map(|(k, v)| k.len() + v.len()).sum();
    let cap = call.state.config.requests.max_input_response_bytes;
    if size > cap {
        return Err(RpcError::invalid_params(format!("inputResponses exceed the {cap}-byte limit")).into());
    }
    // A task the answers resume is charged to its tenant like a new one (docs/design.md, "Fair
    // dispatch"), or answering in bulk would run ahead of every other tenant.
    let weight = call.state.config.tenants.weight(&owner.tenant);
    let answered = call.state.store.answer_inputs(&id, &owner, &answers, None, weight).await;
    // Before the acknowledgement, whatever the outcome: a get on this replica after it reads
    // what was written (other replicas hear it from the event hub).
    call.state.snapshots.changed(id.as_str());
    let answered = answered?;
    if let Answered::Applied { .. } = answered {
        // The client commonly polls right after answering: not held, whatever pub/sub's timing.
        call.state.polls.changed(id.as_str());
    }
    match answered {
        Answered::NotFound => Err(task_not_found().into()),
        Answered::Ignored | Answered::Applied { .. } => Ok(result::ack()),
    }
}

/// Answers that can be stored; anything else is ignored, so its key stays outstanding.
/// Each is decoded once (its syntax was checked with the body, but not, say, a lone surrogate
/// in a string, which no reader could decode later) and stored in compact form.
fn usable_answers(responses: &BTreeMap<String, &RawValue>) -> Result<Vec<(String, String)>, RpcError> {
    responses
        .iter()
        .filter(|(_, answer)| crate::mrtr::usable_answer(answer))
        .map(|(key, answer)| match serde_json::from_str::<Value>(answer.get()) {
            Ok(value) => Ok((key.clone(), value.to_string())),
            Err(err) => Err(RpcError::invalid_params(format!("inputResponses: {err}"))),
        })
        .collect()
}
