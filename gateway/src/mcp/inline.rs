//! Inline execution: a `tools/call` answered with the tool's result rather than a task handle.
//!
//! Tool code still runs only in workers. The gateway creates a hidden task, owned like any
//! other, and waits for it through the event hub with a deadline. The reply is JSON when the
//! outcome is known before anything needs streaming, so error statuses stay exact; the first
//! forwarded notification (progress or log) upgrades the reply to a request-scoped SSE stream.
//! A client that goes away cancels the hidden task.

use std::time::Duration;

use futures::StreamExt as _;
use serde_json::{Map, Value, json};
use taskgate_shared::protocol::{ErrorKind, RpcError};
use taskgate_shared::task::{Owner, TaskId, TaskStatus};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;

use super::{Call, Durability, Notice, Stream, StreamItem, TaskShape, abandon_task, write_task};
use crate::config::Config;
use crate::error::GatewayError;
use crate::events::{Wake, Watch};
use crate::mrtr::Carried;
use crate::state::AppState;

/// Hidden tasks outlive the inline deadline by this much, then expire.
const HIDDEN_TTL_MARGIN: Duration = Duration::from_secs(60);
/// Re-read at least this often even without a wake-up (pub/sub is lossy).
const REREAD: Duration = Duration::from_secs(1);
/// The most of an inline run's recorded steps (names and results) that its requestState
/// carries to the next round: well inside the default request body limit, with the answers
/// and arguments beside it. A run that recorded more is refused rather than replayed
/// without its steps.
const MAX_CARRIED_STEP_BYTES: usize = 256 * 1024;

/// The lifetime of a hidden task: the inline deadline plus a margin.
pub(crate) fn hidden_ttl_ms(config: &Config) -> u64 {
    u64::try_from((config.inline_timeout + HIDDEN_TTL_MARGIN).as_millis()).unwrap_or(u64::MAX)
}

/// The shape of a hidden task: queued on `pool`, living [`hidden_ttl_ms`], with the caller's
/// own token handed over when `subject_token` (the tool's server exchanges it).
pub(crate) fn hidden_shape<'a>(
    config: &Config,
    pool: &'a str,
    poll_interval_ms: u64,
    subject_token: bool,
) -> TaskShape<'a> {
    TaskShape {
        pool,
        ttl_ms: hidden_ttl_ms(config),
        poll_interval_ms,
        status_message: None,
        fingerprint: None,
        subject_token,
        related: &[],
    }
}

/// How an inline run ended.
pub(crate) enum Done {
    Result(Value),
    /// The tool asked for input: answer with an InputRequiredResult. `carried` is what the
    /// run left for the retry's run: the state the tool saved when it parked, and its steps.
    InputRequired {
        requests: Map<String, Value>,
        carried: Carried,
    },
    Error(GatewayError),
}

/// One step of a run.
enum Step {
    Notice(Value),
    Done(Done),
}

/// A hidden task being waited on. Dropping it before the end cancels the task.
pub(crate) struct InlineRun {
    state: AppState,
    id: TaskId,
    owner: Owner,
    watch: Watch,
    deadline: Instant,
    timeout: Duration,
    finished: bool,
}

impl InlineRun {
    /// Creates the hidden task (after registering for its events, so none is missed).
    /// `shape` is [`hidden_shape`]'s.
    pub(crate) async fn start(
        call: &Call<'_>,
        id: TaskId,
        tool: &str,
        arguments: &str,
        shape: TaskShape<'_>,
        gathered: &crate::mrtr::Gathered,
    ) -> Result<Self, GatewayError> {
        let state = call.state;
        let timeout = state.config.inline_timeout;
        let owner = call.principal.owner();
        let watch = state.events.watch(&[id.as_str()], 64);
        write_task(call, &id, tool, arguments, shape, gathered, Durability::Primary).await?;
        Ok(Self {
            state: state.clone(),
            id,
            owner,
            watch,
            deadline: Instant::now() + timeout,
            timeout,
            finished: false,
        })
    }

    /// The next notice, or the outcome. The record is read after a change event, never
    /// before: pub/sub delivers the tool's notices ahead of the event of the change that
    /// followed them, so none is lost to a race with the read.
    async fn next(&mut self) -> Step {
        loop {
            let now = Instant::now();
            if now >= self.deadline {
                return Step::Done(Done::Error(GatewayError::Method(RpcError::new(
                    ErrorKind::Internal,
                    format!("the tool did not finish within {} ms", self.timeout.as_millis()),
                ))));
            }
            let wait = (self.deadline - now).min(REREAD);
            match tokio::time::timeout(wait, self.watch.recv()).await {
                Ok(Some(Wake::Notice(notice))) => return Step::Notice(notice),
                Ok(None) => tokio::time::sleep(wait).await,
                Ok(Some(Wake::Changed(..) | Wake::Resync)) | Err(_) => {}
            }
            match self.read().await {
                Ok(Some(done)) => return Step::Done(done),
                Ok(None) => {}
                Err(err) => return Step::Done(Done::Error(err)),
            }
        }
    }

    /// The outcome, if the task has one yet.
    async fn read(&mut self) -> Result<Option<Done>, GatewayError> {
        let Some(snapshot) = self.state.store.get_task(&self.id).await? else {
            return Err(RpcError::new(ErrorKind::Internal, "the call's task vanished").into());
        };
        let done = match snapshot.status {
            TaskStatus::Working => return Ok(None),
            TaskStatus::Completed => Done::Result(snapshot.parsed_result()),
            TaskStatus::Failed => Done::Error(stored_error(snapshot.error).into()),
            TaskStatus::Cancelled => Done::Result(json!({
                "resultType": "complete",
                "content": [{"type": "text", "text": snapshot.status_message.unwrap_or_else(|| "The call was cancelled.".into())}],
                "isError": true,
            })),
            // One more read, only on this path: the retry is a new run of a new hidden task, so
            // what this run saved (an upstream server's rounds) and the durable steps it recorded
            // go with the requestState, and are the next task's from its create.
            TaskStatus::InputRequired => {
                let (resume, steps) = self.state.store.parked_run(&self.id).await?;
                let carried = Carried { resume, steps: steps.into_iter().collect() };
                let size: usize = carried.steps.iter().map(|(name, result)| name.len() + result.len()).sum();
                if size > MAX_CARRIED_STEP_BYTES {
                    let message = format!(
                        "the tool's recorded steps ({size} bytes) are too large to carry to the next round \
                         (at most {MAX_CARRIED_STEP_BYTES}); call it as a task"
                    );
                    return Err(RpcError::new(ErrorKind::Internal, message).into());
                }
                Done::InputRequired { requests: snapshot.input_requests, carried }
            }
        };
        self.finished = snapshot.status.is_terminal();
        Ok(Some(done))
    }
}

impl Drop for InlineRun {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        // The client went away, the deadline passed, or the tool parked for input (a retry
        // creates a new task): stop this one and free its slot.
        let (state, id, owner) = (self.state.clone(), self.id.clone(), self.owner.clone());
        tokio::spawn(async move { abandon_task(&state, &id, &owner, "The inline call ended.").await });
    }
}

/// What to forward to the client, given what it asked for.
pub(crate) struct Forwarding {
    pub(crate) progress_token: Option<Value>,
    pub(crate) min_log_level: Option<usize>,
    pub(crate) keep_alive: Duration,
}

const LOG_LEVELS: [&str; 8] = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];

impl Forwarding {
    pub(crate) fn new(progress_token: Option<Value>, log_level: Option<&str>, keep_alive: Duration) -> Self {
        let min_log_level = log_level.and_then(|l| LOG_LEVELS.iter().position(|x| *x == l));
        Self { progress_token, min_log_level, keep_alive }
    }

    /// The notification to send for a tool's notice, if the client asked for that kind.
    fn notification(&self, notice: &Value, last_progress: &mut Option<f64>) -> Option<Notice> {
        match notice.get("kind").and_then(Value::as_str)? {
            "progress" => {
                let token = self.progress_token.clone()?;
                let progress = notice.get("progress").and_then(Value::as_f64)?;
                // Progress must strictly increase.
                if last_progress.is_some_and(|last| progress <= last) {
                    return None;
                }
                *last_progress = Some(progress);
                let mut params = Map::new();
                params.insert("progressToken".into(), token);
                params.insert("progress".into(), notice["progress"].clone());
                for optional in ["total", "message"] {
                    if let Some(v) = notice.get(optional).filter(|v| !v.is_null()) {
                        params.insert(optional.into(), v.clone());
                    }
                }
                Some(Notice::new("notifications/progress", Value::Object(params)))
            }
            "log" => {
                let min = self.min_log_level?;
                let level = notice.get("level").and_then(Value::as_str)?;
                let rank = LOG_LEVELS.iter().position(|l| *l == level)?;
                if rank < min {
                    return None;
                }
                let mut params = Map::new();
                params.insert("level".into(), level.into());
                if let Some(logger) = notice.get("logger").filter(|v| v.is_string()) {
                    params.insert("logger".into(), logger.clone());
                }
                params.insert("data".into(), notice.get("data").cloned().unwrap_or(Value::Null));
                Some(Notice::new("notifications/message", Value::Object(params)))
            }
            _ => None,
        }
    }
}

/// Runs to the end. Returns `Ok(done)` when nothing was streamed, or the stream that carries
/// the rest once a notification had to be forwarded.
pub(crate) async fn drive(
    mut run: InlineRun,
    forwarding: Forwarding,
    finish: impl FnOnce(Done) -> Result<Value, GatewayError> + Send + 'static,
) -> Result<Done, Stream> {
    let mut last_progress = None;
    let first = loop {
        match run.next().await {
            Step::Done(done) => return Ok(done),
            Step::Notice(notice) => {
                if let Some(message) = forwarding.notification(&notice, &mut last_progress) {
                    break message;
                }
            }
        }
    };
    let keep_alive = forwarding.keep_alive;
    let (tx, rx) = tokio::sync::mpsc::channel::<StreamItem>(32);
    tokio::spawn(async move {
        let mut next = Some(first);
        loop {
            if let Some(notice) = next.take()
                && tx.send(StreamItem::Notice(notice)).await.is_err()
            {
                return; // client gone: dropping `run` cancels the task
            }
            let step = tokio::select! {
                step = run.next() => step,
                () = tx.closed() => return,
            };
            match step {
                Step::Notice(notice) => next = forwarding.notification(&notice, &mut last_progress),
                Step::Done(done) => {
                    let _ = tx.send(StreamItem::Done(finish(done))).await;
                    return;
                }
            }
        }
    });
    Err(Stream { items: ReceiverStream::new(rx).boxed(), keep_alive })
}

/// The JSON-RPC error a failed task stored.
pub(crate) fn stored_error(error: Option<Value>) -> RpcError {
    let Some(error) = error else { return RpcError::internal() };
    let code = error.get("code").and_then(Value::as_i64).unwrap_or(-32603);
    let message = error.get("message").and_then(Value::as_str).unwrap_or("internal error").to_owned();
    let mut err = RpcError::new(ErrorKind::from_code(code), message);
    err.data = error.get("data").cloned();
    err
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::Forwarding;
    use crate::mcp::Notice;

    fn forwarding(token: Option<serde_json::Value>, level: Option<&str>) -> Forwarding {
        Forwarding::new(token, level, Duration::from_secs(15))
    }

    #[test]
    fn progress_goes_only_with_a_token_and_only_forward() {
        let mut last = None;
        let silent = forwarding(None, None);
        assert_eq!(silent.notification(&json!({"kind": "progress", "progress": 1}), &mut last), None);

        let asked = forwarding(Some(json!("tok")), None);
        let first =
            asked.notification(&json!({"kind": "progress", "progress": 1, "total": 4, "message": null}), &mut last);
        assert_eq!(
            first,
            Some(Notice::new("notifications/progress", json!({"progressToken": "tok", "progress": 1, "total": 4})))
        );
        assert_eq!(asked.notification(&json!({"kind": "progress", "progress": 1}), &mut last), None, "not increasing");
        assert_eq!(asked.notification(&json!({"kind": "progress", "progress": 0.5}), &mut last), None, "backwards");
        assert!(asked.notification(&json!({"kind": "progress", "progress": 2}), &mut last).is_some());
        assert_eq!(asked.notification(&json!({"kind": "progress"}), &mut last), None, "no progress value");
    }

    #[test]
    fn logs_go_only_at_or_above_the_asked_level() {
        let mut last = None;
        let warnings = forwarding(None, Some("warning"));
        let log = |level: &str| json!({"kind": "log", "level": level, "logger": "tool", "data": {"n": 1}});
        assert_eq!(warnings.notification(&log("info"), &mut last), None);
        assert_eq!(
            warnings.notification(&log("error"), &mut last),
            Some(Notice::new("notifications/message", json!({"level": "error", "logger": "tool", "data": {"n": 1}})))
        );
        assert_eq!(warnings.notification(&log("loud"), &mut last), None, "unknown levels are dropped");
        assert_eq!(forwarding(None, None).notification(&log("emergency"), &mut last), None, "not asked for");
        assert_eq!(forwarding(None, Some("nonsense")).notification(&log("emergency"), &mut last), None);
        assert_eq!(warnings.notification(&json!({"kind": "other"}), &mut last), None);
    }
}
