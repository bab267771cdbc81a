//! Input asked by a 2026-07-28 upstream (`resultType: "input_required"`), carried through
//! taskgate's own: each round of the server's requests parks the task once, under keys
//! prefixed with the round (`r2.approve`) so that they stay unique over the task's life even
//! when the server reuses its keys, and the server's `requestState` is saved with the park.
//! The run after the answers sends them back with that state: the replay contract, where the
//! server's state is the checkpoint.

use rmcp::model::{ClientCapabilities, InputRequiredResult, InputResponses, RequestMetaObject};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use taskgate_shared::protocol::{ErrorKind, RpcError};

use super::bounds::MAX_INPUT_BYTES;
use crate::tool::{ToolContext, ToolError};

/// Rounds one call may take, parked or not: a server asking without end fails the task.
const MAX_ROUNDS: u32 = 32;
/// Largest `requestState` kept; it is stored with the task until it ends.
const MAX_STATE_BYTES: usize = 64 * 1024;
/// The capabilities a task's creator may have declared that let a server ask for input.
const INPUT_CAPABILITIES: [&str; 3] = ["elicitation", "sampling", "roots"];

/// Where a call stands between rounds: what goes back to the server on the next attempt.
pub(super) struct Resume {
    round: u32,
    pub(super) request_state: Option<String>,
    pub(super) responses: InputResponses,
}

/// What an upstream call saves on its task between runs.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) enum Saved {
    /// Parked between two rounds of a 2026-07-28 server's `input_required`: the round, the
    /// server's state, and the server's own keys.
    Rounds {
        round: u32,
        #[serde(rename = "requestState")]
        request_state: Option<String>,
        keys: Vec<String>,
    },
    /// A task the server created for the call (its id is never shown to clients), and, when
    /// parked for its input, the round, the server's keys of that round, and every key the
    /// server asked so far.
    Task {
        server: String,
        task: String,
        round: u32,
        keys: Vec<String>,
        #[serde(default)]
        asked: Vec<String>,
    },
}

/// What the run that last parked (or saved) the task left.
pub(super) fn saved(ctx: &ToolContext) -> Result<Option<Saved>, ToolError> {
    ctx.saved_state()
        .map(|saved| {
            serde_json::from_value(saved.clone())
                .map_err(|_| internal("the saved state of the upstream call is not readable".into()))
        })
        .transpose()
}

pub(super) fn round_key(prefix: char, round: u32, key: &str) -> String {
    format!("{prefix}{round}.{key}")
}

/// The recorded answers to `keys` of `round`, under the server's own keys.
pub(super) fn answers(
    ctx: &ToolContext,
    prefix: char,
    round: u32,
    keys: &[String],
) -> Result<InputResponses, ToolError> {
    let mut responses = InputResponses::new();
    for key in keys {
        let ours = round_key(prefix, round, key);
        let answer = ctx.answer(&ours).ok_or_else(|| internal(format!("input {ours:?} has no answer")))?;
        responses.insert(key.clone(), answer.clone());
    }
    Ok(responses)
}

/// The server's requests of one round as taskgate's own (prefixed keys), with the status
/// message to show while they wait.
pub(super) fn our_requests(
    remote: &str,
    prefix: char,
    round: u32,
    requests: rmcp::model::InputRequests,
) -> Result<(Vec<(String, Value)>, String), ToolError> {
    let mut ours = Vec::with_capacity(requests.len());
    let mut bytes = 0;
    for (key, request) in requests {
        let request = serde_json::to_value(request)
            .map_err(|_| internal(format!("upstream tool {remote:?} asked for input taskgate cannot store")))?;
        bytes += key.len() + request.to_string().len();
        if bytes > MAX_INPUT_BYTES {
            return Err(internal(format!(
                "upstream tool {remote:?} asked for input over {} KiB",
                MAX_INPUT_BYTES / 1024
            )));
        }
        ours.push((round_key(prefix, round, &key), request));
    }
    let message =
        single_message(&ours).unwrap_or_else(|| format!("The upstream tool {remote:?} needs input to go on."));
    Ok((ours, message))
}

fn internal(message: String) -> ToolError {
    ToolError::Rpc(RpcError::new(ErrorKind::Internal, message))
}

/// The round a resumed run continues, from the state its park saved and the answers given.
pub(super) fn resume(
    ctx: &ToolContext,
    round: u32,
    request_state: Option<String>,
    keys: &[String],
) -> Result<Resume, ToolError> {
    Ok(Resume { round, request_state, responses: answers(ctx, 'r', round, keys)? })
}

/// What follows an `input_required` answer.
pub(super) enum Next {
    /// Nothing to ask (only a state to send back): call again at once.
    Retry(Resume),
    /// The task parks for the answers (a suspension), or fails.
    Stop(ToolError),
}

pub(super) fn next(ctx: &ToolContext, remote: &str, previous: Option<&Resume>, asked: InputRequiredResult) -> Next {
    let round = previous.map_or(1, |r| r.round + 1);
    if round > MAX_ROUNDS {
        return Next::Stop(internal(format!(
            "upstream tool {remote:?} asked for input more than {MAX_ROUNDS} times in one call"
        )));
    }
    if asked.request_state.as_ref().is_some_and(|s| s.len() > MAX_STATE_BYTES) {
        return Next::Stop(internal(format!(
            "upstream tool {remote:?} sent a requestState over {} KiB",
            MAX_STATE_BYTES / 1024
        )));
    }
    let requests = asked.input_requests.unwrap_or_default();
    if requests.is_empty() {
        return Next::Retry(Resume { round, request_state: asked.request_state, responses: InputResponses::new() });
    }
    let keys: Vec<String> = requests.keys().cloned().collect();
    let (ours, message) = match our_requests(remote, 'r', round, requests) {
        Ok(ours) => ours,
        Err(err) => return Next::Stop(err),
    };
    let saved = Saved::Rounds { round, request_state: asked.request_state, keys };
    let saved = serde_json::to_value(saved).unwrap_or(Value::Null);
    Next::Stop(ctx.suspend_saving(ours, &message, saved))
}

/// The message of the one elicitation asked, as the task's status while it waits.
fn single_message(requests: &[(String, Value)]) -> Option<String> {
    let [(_, request)] = requests else { return None };
    request.pointer("/params/message").and_then(Value::as_str).map(super::bounds::status_text)
}

/// `_meta` declaring, as the client's capabilities, the input capabilities the task's creator
/// declared (a 2026-07-28 server then asks only for input the creator can give), and the Tasks
/// extension when the worker follows the server's own tasks.
pub(super) fn creator_capabilities(ctx: &ToolContext, follow_tasks: bool) -> Option<RequestMetaObject> {
    let declared = ctx.client_capabilities().as_object();
    let mut kept: serde_json::Map<String, Value> = INPUT_CAPABILITIES
        .iter()
        .filter_map(|name| Some(((*name).to_owned(), declared?.get(*name)?.clone())))
        .collect();
    if follow_tasks {
        kept.insert("extensions".into(), serde_json::json!({ rmcp::model::TASKS_EXTENSION_ID: {} }));
    }
    let capabilities: ClientCapabilities = serde_json::from_value(Value::Object(kept)).ok()?;
    let mut meta = RequestMetaObject::default();
    meta.set_client_capabilities(capabilities);
    Some(meta)
}
