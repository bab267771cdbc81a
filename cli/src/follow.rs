//! Following tasks to the end: one `subscriptions/listen` stream for all of them, a live line
//! per task on a terminal, questions asked as they come, and Ctrl-C handled.
//!
//! The listen stream is the source of changes; `tasks/get` is read at the start, when the
//! stream ends (its final result may overtake the last snapshot, which the SDK hands over on
//! another task), and instead of the stream when the gateway does not offer it.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use rmcp::model::{CancelTaskParams, GetTaskParams, InputResponses, UpdateTaskParams};
use serde_json::{Value, json};

use crate::args::Output;
use crate::connect::Connection;
use crate::exit::{CliError, Exit};
use crate::prompt::{self, Interrupt};
use crate::render;

/// How following ended.
pub(crate) enum Ended {
    /// Every task is terminal (or, with `stop_at_input`, waits for input): their last snapshots.
    Settled(Vec<Value>),
    /// The person stopped following.
    Stopped(Vec<Value>),
}

pub(crate) struct Options {
    pub(crate) output: Output,
    /// Ask the person for input (a terminal is attached).
    pub(crate) interactive: bool,
    /// Without a person to ask, end at `input_required` instead of waiting for an answer from
    /// elsewhere.
    pub(crate) stop_at_input: bool,
    /// Print each new snapshot as a JSON line (`follow --output json`).
    pub(crate) stream_json: bool,
}

struct Tracked {
    id: String,
    last: Value,
    /// Input keys already answered or shown, never asked again.
    seen_keys: BTreeSet<String>,
    bar: Option<ProgressBar>,
}

impl Tracked {
    fn status(&self) -> &str {
        self.last.get("status").and_then(Value::as_str).unwrap_or("unknown")
    }

    fn settled(&self, stop_at_input: bool) -> bool {
        render::is_terminal(&self.last) || (stop_at_input && self.status() == "input_required")
    }
}

/// How often unfinished tasks are read even while the stream is quiet: a backstop for a
/// connection that died without a word (no read timeout covers a half-open stream).
const BACKSTOP: Duration = Duration::from_secs(30);
/// The longest pause between a stream's end and the next read and listen.
const MAX_PAUSE: Duration = Duration::from_secs(5);
/// How long the gateway may stay unreachable before following gives up.
const GIVE_UP_AFTER: Duration = Duration::from_secs(60);

pub(crate) async fn follow(conn: &mut Connection, ids: &[String], options: &Options) -> Result<Ended, CliError> {
    // Ctrl-C is handled from here on, before anything is drawn, so that none is missed.
    let mut interrupts = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|err| CliError::new(Exit::Transport, format!("cannot watch for Ctrl-C: {err}")))?;
    let multi = MultiProgress::new();
    let live = options.output == Output::Human && console::Term::stderr().is_term();
    let mut tasks = Vec::new();
    for id in ids {
        let snapshot = get(conn, id).await?;
        let bar = live.then(|| {
            let bar = multi.add(ProgressBar::new_spinner());
            bar.set_style(
                ProgressStyle::with_template("{spinner:.cyan} {msg} {elapsed:.dim}").expect("a valid template"),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        tasks.push(Tracked { id: id.clone(), last: Value::Null, seen_keys: BTreeSet::new(), bar });
        let index = tasks.len() - 1;
        show(&mut tasks[index], snapshot, options);
    }
    let index: HashMap<String, usize> = tasks.iter().enumerate().map(|(i, t)| (t.id.clone(), i)).collect();
    let mut listening = true;
    let mut pause = Duration::ZERO;
    let mut unreachable_since: Option<std::time::Instant> = None;
    loop {
        answer_inputs(conn, &multi, &mut tasks, options).await?;
        if tasks.iter().all(|t| t.settled(options.stop_at_input)) {
            return Ok(Ended::Settled(finish(tasks)));
        }
        let pending: Vec<String> =
            tasks.iter().filter(|t| !t.settled(options.stop_at_input)).map(|t| t.id.clone()).collect();
        let listen = match listening {
            true => {
                match conn.request("subscriptions/listen", json!({ "notifications": { "taskIds": pending } })).await {
                    Ok(handle) => Some(handle),
                    Err(err) if err.exit == Exit::Transport => None,
                    Err(err) => return Err(err),
                }
            }
            false => None,
        };
        let poll_every = poll_interval(&tasks);
        let mut stream = std::pin::pin!(async move {
            match listen {
                Some(handle) => Some(handle.await_response().await),
                None => {
                    tokio::time::sleep(poll_every).await;
                    None
                }
            }
        });
        let mut backstop = tokio::time::interval_at(tokio::time::Instant::now() + BACKSTOP, BACKSTOP);
        // One stream, until it ends: questions are asked and Ctrl-C is answered without
        // closing it, so no stream is ever left open behind a new one.
        loop {
            tokio::select! {
                snapshot = conn.snapshots.recv() => {
                    let Some(snapshot) = snapshot else { break };
                    let id = snapshot.get("taskId").and_then(Value::as_str).unwrap_or_default();
                    let Some(&i) = index.get(id) else { continue };
                    if show(&mut tasks[i], snapshot, options) {
                        pause = Duration::ZERO;
                    }
                    if tasks[i].status() == "input_required" && !unseen_keys(&tasks[i]).is_empty() {
                        answer_inputs(conn, &multi, &mut tasks, options).await?;
                    }
                    if tasks.iter().all(|t| t.settled(options.stop_at_input)) {
                        return Ok(Ended::Settled(finish(tasks)));
                    }
                }
                ended = &mut stream => {
                    match ended {
                        Some(Err(rmcp::ServiceError::McpError(error))) => {
                            // A gateway without task listening: poll instead.
                            if options.output == Output::Human {
                                multi.suspend(|| eprintln!("(the gateway does not stream task changes: {}; polling instead)", crate::text::clean(&error.message)));
                            }
                            listening = false;
                        }
                        Some(Err(err)) if err.auth_challenge().is_some() => {
                            return Err(crate::exit::service("subscriptions/listen", err));
                        }
                        // The stream broke (a gateway restarting, a proxy's timeout) or ended
                        // before the tasks did (a gateway draining): read, then listen again.
                        Some(_) => {}
                        None => pause = Duration::ZERO,
                    }
                    break;
                }
                _ = backstop.tick() => {
                    for task in tasks.iter_mut().filter(|t| !t.settled(options.stop_at_input)) {
                        if let Ok(snapshot) = get(conn, &task.id).await {
                            show(task, snapshot, options);
                        }
                    }
                }
                _ = interrupts.recv() => {
                    match interrupted(&multi, options, tasks.len()) {
                        Interrupt::KeepFollowing => {}
                        Interrupt::StopFollowing => return Ok(Ended::Stopped(finish(tasks))),
                        Interrupt::CancelTask => {
                            for task in tasks.iter().filter(|t| !render::is_terminal(&t.last)) {
                                conn.call("tasks/cancel", conn.peer().cancel_task(CancelTaskParams::new(task.id.clone()))).await?;
                            }
                        }
                    }
                }
            }
        }
        // Streams that keep ending without news must not spin: wait longer each time.
        tokio::time::sleep(pause).await;
        pause = (pause * 2).clamp(Duration::from_millis(250), MAX_PAUSE);
        for task in tasks.iter_mut().filter(|t| !t.settled(options.stop_at_input)) {
            match get(conn, &task.id).await {
                Ok(snapshot) => {
                    unreachable_since = None;
                    show(task, snapshot, options);
                }
                Err(err) if err.exit == Exit::Transport => {
                    let since = *unreachable_since.get_or_insert_with(std::time::Instant::now);
                    if since.elapsed() > GIVE_UP_AFTER {
                        return Err(err.hint("the gateway stayed unreachable; the task goes on: follow it again later"));
                    }
                    break;
                }
                Err(err) => return Err(err),
            }
        }
    }
}

async fn get(conn: &Connection, id: &str) -> Result<Value, CliError> {
    let got = conn.call("tasks/get", conn.peer().get_task(GetTaskParams::new(id.to_owned()))).await?;
    Ok(serde_json::to_value(&got).unwrap_or(Value::Null))
}

/// Takes a snapshot unless it is older than the one shown, or the task already ended; whether
/// it changed what is shown.
fn show(task: &mut Tracked, snapshot: Value, options: &Options) -> bool {
    let snapshot = render::wire_task(snapshot);
    if render::is_terminal(&task.last) || render::older(&snapshot, &task.last) {
        return false;
    }
    let changed = render::line(&snapshot) != render::line(&task.last)
        || snapshot.get("inputRequests") != task.last.get("inputRequests");
    task.last = snapshot;
    if !changed {
        return false;
    }
    if options.stream_json {
        render::json_line(&task.last);
    }
    match &task.bar {
        Some(bar) => bar.set_message(render::line(&task.last)),
        None if options.output == Output::Human => eprintln!("{}", render::line(&task.last)),
        None => {}
    }
    true
}

fn unseen_keys(task: &Tracked) -> Vec<String> {
    let requests = task.last.get("inputRequests").and_then(Value::as_object);
    requests.into_iter().flatten().map(|(k, _)| k.clone()).filter(|k| !task.seen_keys.contains(k)).collect()
}

/// Asks the person for every new input request and sends the answers; without a person,
/// prints each new request once (and how to answer it).
async fn answer_inputs(
    conn: &Connection,
    multi: &MultiProgress,
    tasks: &mut [Tracked],
    options: &Options,
) -> Result<(), CliError> {
    for task in tasks.iter_mut().filter(|t| t.status() == "input_required") {
        let keys = unseen_keys(task);
        if keys.is_empty() {
            continue;
        }
        if !options.interactive {
            if options.output == Output::Human {
                multi.suspend(|| eprint!("{}", render::input_requests(&task.id, &task.last, &keys)));
            }
            task.seen_keys.extend(keys);
            continue;
        }
        let mut answers = InputResponses::new();
        let mut stopped = None;
        for (n, key) in keys.iter().enumerate() {
            let request = task.last["inputRequests"][key].clone();
            let asked = tokio::task::block_in_place(|| multi.suspend(|| prompt::ask(key, &request)));
            match asked {
                Ok(Some(answer)) => {
                    answers.insert(key.clone(), answer);
                }
                Ok(None) => {
                    multi.suspend(|| {
                        eprint!("{}", render::input_requests(&task.id, &task.last, std::slice::from_ref(key)))
                    });
                }
                Err(err) => {
                    stopped = Some((err, keys[n..].to_vec()));
                    break;
                }
            }
            task.seen_keys.insert(key.clone());
        }
        // Answers already given are sent even when the person stops at a later question.
        if !answers.is_empty() {
            let update = UpdateTaskParams::new(task.id.clone(), answers);
            conn.call("tasks/update", conn.peer().update_task(update)).await?;
        }
        if let Some((err, left)) = stopped {
            return Err(CliError::new(Exit::Interrupted, format!("stopped asking: {err}")).hint(format!(
                "the task goes on; answer {} later with `taskgate answer {} KEY …`",
                left.join(", "),
                task.id
            )));
        }
    }
    Ok(())
}

fn interrupted(multi: &MultiProgress, options: &Options, tasks: usize) -> Interrupt {
    if !options.interactive {
        return Interrupt::StopFollowing;
    }
    // A second Ctrl-C at the question, or a question that cannot be drawn: stop following.
    tokio::task::block_in_place(|| multi.suspend(|| prompt::interrupted(tasks))).unwrap_or(Interrupt::StopFollowing)
}

/// The wait between reads when polling: the smallest interval the tasks suggest, within bounds.
fn poll_interval(tasks: &[Tracked]) -> Duration {
    let suggested = tasks.iter().filter_map(|t| t.last.get("pollIntervalMs").and_then(Value::as_u64)).min();
    Duration::from_millis(suggested.unwrap_or(1000).clamp(100, 10_000))
}

fn finish(tasks: Vec<Tracked>) -> Vec<Value> {
    tasks
        .into_iter()
        .map(|task| {
            if let Some(bar) = &task.bar {
                bar.finish_and_clear();
            }
            task.last
        })
        .collect()
}
