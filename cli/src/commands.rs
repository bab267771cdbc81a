//! One function per subcommand.

use std::collections::BTreeSet;

use clap::CommandFactory as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, GetTaskParams, InputResponses, UpdateTaskParams,
};
use serde_json::{Value, json};

use crate::args::{AnswerArgs, CallArgs, Cli, Command, Global, Output};
use crate::connect::Connection;
use crate::exit::{CliError, Exit};
use crate::follow::{self, Ended};
use crate::{arguments, prompt, render};

/// Rounds of inline questions answered before a call that keeps asking is given up.
const MAX_INLINE_ROUNDS: usize = 10;

pub(crate) async fn run(cli: Cli) -> Result<Exit, CliError> {
    let global = &cli.global;
    if let Command::Completions { shell } = cli.command {
        clap_complete::generate(shell, &mut Cli::command(), "taskgate", &mut std::io::stdout());
        return Ok(Exit::Ok);
    }
    if let Command::Inspect { task } = &cli.command {
        return crate::inspect::run(global, task).await;
    }
    if let Command::Credentials { action } = &cli.command {
        return crate::credentials::run(global, action).await;
    }
    let mut conn = Connection::open(global).await?;
    let exit = match &cli.command {
        Command::Tools { schema } => tools(&conn, global, schema.as_deref()).await,
        Command::Call(args) => call(&mut conn, global, args).await,
        Command::Get { task } => get(&conn, global, task).await,
        Command::Follow { tasks } => follow_tasks(&mut conn, global, tasks).await,
        Command::Cancel { task } => cancel(&conn, global, task).await,
        Command::Answer(args) => answer(&conn, global, args).await,
        Command::Discover => discover(&conn, global),
        Command::Completions { .. } | Command::Inspect { .. } | Command::Credentials { .. } => {
            unreachable!("answered before connecting")
        }
    };
    conn.close().await;
    exit
}

async fn list_tools(conn: &Connection) -> Result<Vec<Value>, CliError> {
    let tools = conn.call("tools/list", conn.peer().list_all_tools()).await?;
    Ok(tools.iter().filter_map(|t| serde_json::to_value(t).ok()).collect())
}

async fn tools(conn: &Connection, global: &Global, schema: Option<&str>) -> Result<Exit, CliError> {
    let tools = list_tools(conn).await?;
    match schema {
        Some(name) => {
            let tool = find(&tools, name)?;
            let schemas = json!({ "inputSchema": tool["inputSchema"], "outputSchema": tool.get("outputSchema") });
            match global.output {
                Output::Json => render::json_line(&schemas),
                Output::Human => println!("{}", serde_json::to_string_pretty(&schemas).unwrap_or_default()),
            }
        }
        None => match global.output {
            Output::Json => render::json_line(&json!({ "tools": tools })),
            Output::Human => print!("{}", render::tools_table(&tools)),
        },
    }
    Ok(Exit::Ok)
}

fn find<'a>(tools: &'a [Value], name: &str) -> Result<&'a Value, CliError> {
    tools.iter().find(|t| t["name"] == name).ok_or_else(|| {
        let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
        CliError::new(Exit::Refused, format!("the gateway has no tool {name:?}"))
            .hint(format!("its tools: {}", if names.is_empty() { "none yet".into() } else { names.join(", ") }))
    })
}

/// The `_meta` member a call's idempotency key travels in (the SDK sets no per-request header).
const IDEMPOTENCY_KEY_META: &str = "io.taskgate/idempotencyKey";
/// Sends after a transport error, in all: the key makes each one name the same task.
const CALL_ATTEMPTS: u32 = 3;

/// A key for one run of `taskgate call`: 128 random bits.
fn fresh_key() -> String {
    format!("tg-{:032x}", rand::random::<u128>())
}

/// `tools/call`, sent again (with the same key) when the gateway could not be reached or did
/// not answer: the answer to the first may have been lost after the task was made.
async fn send_call(conn: &Connection, params: &CallToolRequestParams) -> Result<CallToolResponse, CliError> {
    let mut attempt = 1;
    loop {
        match conn.call("tools/call", conn.peer().call_tool_once(params.clone())).await {
            Err(err) if err.exit == Exit::Transport && attempt < CALL_ATTEMPTS => {
                attempt += 1;
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
            other => return other,
        }
    }
}

async fn call(conn: &mut Connection, global: &Global, args: &CallArgs) -> Result<Exit, CliError> {
    let tools = list_tools(conn).await?;
    let tool = find(&tools, &args.tool)?;
    let base = match &args.json_file {
        Some(path) if path.as_os_str() == "-" => Some(
            std::io::read_to_string(std::io::stdin())
                .map_err(|e| CliError::usage(format!("cannot read the arguments from standard input: {e}")))?,
        ),
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display())))?,
        ),
        None => args.json.clone(),
    };
    let arguments = arguments::build(base.as_deref(), &args.args, &tool["inputSchema"])?;
    let interactive = prompt::interactive();
    let key = args.idempotency_key.clone().unwrap_or_else(fresh_key);
    let mut meta = rmcp::model::RequestMetaObject::default();
    meta.insert(IDEMPOTENCY_KEY_META.to_owned(), Value::from(key.as_str()));
    let mut params = CallToolRequestParams::new(args.tool.clone()).with_arguments(arguments);
    params.meta = Some(meta);
    let mut rounds = 0;
    loop {
        let response = send_call(conn, &params).await?;
        match response {
            CallToolResponse::Complete(result) => {
                let result = serde_json::to_value(&result).unwrap_or(Value::Null);
                // An inline answer has no task; it is shown as a completed one without an id. A
                // task that ended within the gateway's completion budget is answered the same
                // way, with its id in `_meta`: shown with it (`--detach` has nothing to detach).
                let id = result["_meta"]["io.taskgate/taskId"].clone();
                let mut done = json!({ "status": "completed", "result": result });
                if id.is_string() {
                    done["taskId"] = id;
                }
                finish(global, &done);
                return Ok(render::exit_for(&done));
            }
            CallToolResponse::Task(created) => {
                let id = created.task.task_id.clone();
                if args.detach {
                    match global.output {
                        Output::Json => {
                            let mut task = serde_json::to_value(&created.task).unwrap_or(Value::Null);
                            task["idempotencyKey"] = Value::from(key.as_str());
                            render::json_line(&task)
                        }
                        Output::Human => println!("{id}"),
                    }
                    return Ok(Exit::Ok);
                }
                let options = follow::Options {
                    output: global.output,
                    interactive,
                    stop_at_input: !interactive,
                    stream_json: false,
                };
                return match follow::follow(conn, std::slice::from_ref(&id), &options).await? {
                    Ended::Settled(mut last) => {
                        let task = last.remove(0);
                        finish(global, &task);
                        Ok(render::exit_for(&task))
                    }
                    Ended::Stopped(mut last) => Ok(stopped(global, &last.remove(0))),
                };
            }
            CallToolResponse::InputRequired(asked) => {
                // Questions before any task exists (a tool run inline): answered on this
                // terminal and the call sent again, as the protocol's retry.
                rounds += 1;
                let requests = serde_json::to_value(&asked.input_requests).unwrap_or(Value::Null);
                let keys: Vec<String> = requests.as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default();
                if !interactive {
                    let waiting = json!({ "status": "input_required", "inputRequests": requests });
                    match global.output {
                        Output::Json => render::json_line(&waiting),
                        Output::Human => eprint!("{}", render::input_requests(&args.tool, &waiting, &keys)),
                    }
                    return Err(CliError::new(Exit::InputNeeded, "the tool asks for input before it can run")
                        .hint("run it on a terminal to answer (an inline call has no task to answer later)"));
                }
                if rounds > MAX_INLINE_ROUNDS {
                    return Err(CliError::new(
                        Exit::Refused,
                        format!("the tool kept asking for input after {MAX_INLINE_ROUNDS} rounds of answers"),
                    ));
                }
                let mut answers = InputResponses::new();
                for key in keys {
                    let request = requests[&key].clone();
                    let asked_key = key.clone();
                    let answer = tokio::task::spawn_blocking(move || prompt::ask(&asked_key, &request))
                        .await
                        .map_err(|e| CliError::new(Exit::Interrupted, e.to_string()))?
                        .map_err(|e| CliError::new(Exit::Interrupted, format!("stopped asking: {e}")))?;
                    match answer {
                        Some(answer) => answers.insert(key, answer),
                        // Sent again without this answer, the call would only ask again.
                        None => {
                            return Err(CliError::new(
                                Exit::InputNeeded,
                                format!("the tool asks for {key:?}, a kind of input this client cannot give"),
                            ));
                        }
                    };
                }
                params.input_responses = Some(answers);
                params.request_state = asked.request_state;
            }
            other => {
                return Err(CliError::new(
                    Exit::Transport,
                    format!("tools/call: an answer this client does not know: {other:?}"),
                ));
            }
        }
    }
}

/// Prints how a task ended.
fn finish(global: &Global, task: &Value) {
    match global.output {
        Output::Json => render::json_line(task),
        Output::Human if task.get("status").and_then(Value::as_str) == Some("input_required") => {
            let id = task.get("taskId").and_then(Value::as_str).unwrap_or("?");
            eprintln!("{id} waits for input; answer it with `taskgate answer`, then `taskgate follow {id}`");
        }
        Output::Human => render::outcome(task),
    }
}

fn stopped(global: &Global, task: &Value) -> Exit {
    let id = task.get("taskId").and_then(Value::as_str).unwrap_or("?");
    match global.output {
        Output::Json => render::json_line(task),
        Output::Human => eprintln!("stopped following; the task goes on: taskgate follow {id}"),
    }
    Exit::Interrupted
}

async fn get_task(conn: &Connection, id: &str) -> Result<Value, CliError> {
    let got = conn.call("tasks/get", conn.peer().get_task(GetTaskParams::new(id.to_owned()))).await?;
    Ok(render::wire_task(serde_json::to_value(&got).unwrap_or(Value::Null)))
}

async fn get(conn: &Connection, global: &Global, id: &str) -> Result<Exit, CliError> {
    let task = get_task(conn, id).await?;
    match global.output {
        Output::Json => render::json_line(&task),
        Output::Human => print!("{}", render::task_detail(&task)),
    }
    Ok(Exit::Ok)
}

async fn follow_tasks(conn: &mut Connection, global: &Global, ids: &[String]) -> Result<Exit, CliError> {
    let mut seen = BTreeSet::new();
    let ids: Vec<String> = ids.iter().filter(|id| seen.insert(id.as_str())).cloned().collect();
    let options = follow::Options {
        output: global.output,
        interactive: prompt::interactive(),
        stop_at_input: false,
        stream_json: global.output == Output::Json,
    };
    let last = match follow::follow(conn, &ids, &options).await? {
        Ended::Settled(last) => last,
        Ended::Stopped(last) => {
            match global.output {
                Output::Json => last.iter().for_each(render::json_line),
                Output::Human => eprintln!("stopped following; the tasks go on"),
            }
            return Ok(Exit::Interrupted);
        }
    };
    if global.output == Output::Human {
        for task in &last {
            if last.len() > 1 {
                eprintln!("{}", render::line(task));
            }
            render::outcome(task);
        }
    }
    Ok(last.iter().map(render::exit_for).max().unwrap_or(Exit::Ok))
}

async fn cancel(conn: &Connection, global: &Global, id: &str) -> Result<Exit, CliError> {
    conn.call("tasks/cancel", conn.peer().cancel_task(CancelTaskParams::new(id.to_owned()))).await?;
    let task = get_task(conn, id).await?;
    match global.output {
        Output::Json => render::json_line(&task),
        Output::Human => eprintln!("cancel asked (the tool may still finish first): {}", render::line(&task)),
    }
    Ok(Exit::Ok)
}

async fn answer(conn: &Connection, global: &Global, args: &AnswerArgs) -> Result<Exit, CliError> {
    let response = match (&args.accept, args.decline) {
        (Some(content), _) => match serde_json::from_str::<Value>(content) {
            Ok(content @ Value::Object(_)) => json!({ "action": "accept", "content": content }),
            _ => return Err(CliError::usage("--accept takes a JSON object, the form's content")),
        },
        (None, true) => json!({ "action": "decline" }),
        (None, false) => json!({ "action": "cancel" }),
    };
    // The protocol ignores answers to keys a task is not waiting on; say so instead.
    let task = get_task(conn, &args.task).await?;
    let pending: Vec<&str> = task
        .get("inputRequests")
        .and_then(Value::as_object)
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    if !pending.contains(&args.key.as_str()) {
        let status = task.get("status").and_then(Value::as_str).unwrap_or("?");
        let message = format!("task {} is not waiting on {:?} (status {status})", args.task, args.key);
        let err = CliError::usage(message);
        return Err(if pending.is_empty() { err } else { err.hint(format!("it waits on: {}", pending.join(", "))) });
    }
    let mut answers = InputResponses::new();
    answers.insert(args.key.clone(), response);
    conn.call("tasks/update", conn.peer().update_task(UpdateTaskParams::new(args.task.clone(), answers))).await?;
    let task = get_task(conn, &args.task).await?;
    match global.output {
        Output::Json => render::json_line(&task),
        Output::Human => eprintln!("answered {}: {}", args.key, render::line(&task)),
    }
    Ok(Exit::Ok)
}

fn discover(conn: &Connection, global: &Global) -> Result<Exit, CliError> {
    let server = conn.server();
    match global.output {
        Output::Json => render::json_line(&server),
        Output::Human => print!("{}", render::server(&server)),
    }
    Ok(Exit::Ok)
}
