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

pub(crate) async fn follow(conn: &mut Connection, ids: &[String], options: &Options) -> Result<Ended, CliError> {
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
    loop {
        answer_inputs(conn, &multi, &mut tasks, options).await?;
        if tasks.iter().all(|t| t.settled(options.stop_at_input)) {
            return Ok(Ended::Settled(finish(tasks)));
        }
        let pending: Vec<String> =
            tasks.iter().filter(|t| !t.settled(options.stop_at_input)).map(|t| t.id.clone()).collect();
        let listen = if listening {
            Some(conn.request("subscriptions/listen", json!({ "notifications": { "taskIds": pending } })).await?)
        } else {
            None
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
        // Until the stream ends, a question needs asking, or the person interrupts.
        let reread = loop {
            tokio::select! {
                snapshot = conn.snapshots.recv() => {
                    let Some(snapshot) = snapshot else { break true };
                    let id = snapshot.get("taskId").and_then(Value::as_str).unwrap_or_default();
                    if let Some(&i) = index.get(id) {
                        show(&mut tasks[i], snapshot, options);
                        if needs_answer(&tasks[i], options) || tasks.iter().all(|t| t.settled(options.stop_at_input)) {
                            break false;
                        }
                    }
                }
                ended = &mut stream => {
                    match ended {
                        Some(Err(rmcp::ServiceError::McpError(error))) => {
                            // A gateway without task listening: poll instead.
                            if listening {
                                eprintln!("(the gateway refused to stream task changes: {}; polling instead)", error.message);
                            }
                            listening = false;
                        }
                        Some(Err(err)) if err.auth_challenge().is_some() => {
                            return Err(crate::exit::service("subscriptions/listen", err));
                        }
                        Some(Err(_)) => {
                            // The stream broke (a gateway restarting, a proxy's timeout): read
                            // and listen again after a breath.
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                        Some(Ok(_)) | None => {}
                    }
                    break true;
                }
                _ = tokio::signal::ctrl_c() => {
                    match interrupted(&multi, options, tasks.len()) {
                        Interrupt::KeepFollowing => continue,
                        Interrupt::StopFollowing => return Ok(Ended::Stopped(finish(tasks))),
                        Interrupt::CancelTask => {
                            for task in tasks.iter().filter(|t| !render::is_terminal(&t.last)) {
                                conn.call("tasks/cancel", conn.peer().cancel_task(CancelTaskParams::new(task.id.clone()))).await?;
                            }
                            break true;
                        }
                    }
                }
            }
        };
        if reread {
            for task in tasks.iter_mut().filter(|t| !t.settled(options.stop_at_input)) {
                let snapshot = get(conn, &task.id).await?;
                show(task, snapshot, options);
            }
        }
    }
}

async fn get(conn: &Connection, id: &str) -> Result<Value, CliError> {
    let got = conn.call("tasks/get", conn.peer().get_task(GetTaskParams::new(id.to_owned()))).await?;
    Ok(serde_json::to_value(&got).unwrap_or(Value::Null))
}

/// Takes a snapshot unless it is older than the one shown, or the task already ended.
fn show(task: &mut Tracked, snapshot: Value, options: &Options) {
    if render::is_terminal(&task.last) || render::older(&snapshot, &task.last) {
        return;
    }
    let changed = render::line(&snapshot) != render::line(&task.last);
    task.last = snapshot;
    if !changed {
        return;
    }
    if options.stream_json {
        render::json_line(&task.last);
    }
    match &task.bar {
        Some(bar) => bar.set_message(render::line(&task.last)),
        None if options.output == Output::Human => eprintln!("{}", render::line(&task.last)),
        None => {}
    }
}

fn needs_answer(task: &Tracked, options: &Options) -> bool {
    options.interactive && task.status() == "input_required" && !unseen_keys(task).is_empty()
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
        for key in keys {
            let request = task.last["inputRequests"][&key].clone();
            let asked = tokio::task::block_in_place(|| multi.suspend(|| prompt::ask(&key, &request)));
            match asked {
                Ok(Some(answer)) => {
                    answers.insert(key.clone(), answer);
                }
                Ok(None) => {
                    multi.suspend(|| {
                        eprint!("{}", render::input_requests(&task.id, &task.last, std::slice::from_ref(&key)))
                    });
                }
                Err(err) => {
                    return Err(CliError::new(Exit::Interrupted, format!("stopped asking: {err}"))
                        .hint(format!("the task goes on; answer later with `taskgate answer {} {key} …`", task.id)));
                }
            }
            task.seen_keys.insert(key);
        }
        if !answers.is_empty() {
            let update = UpdateTaskParams::new(task.id.clone(), answers);
            conn.call("tasks/update", conn.peer().update_task(update)).await?;
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
