//! The `taskgate` CLI through the real stack: every command, its exit codes, both outputs, and
//! the interactive prompts under a pseudo-terminal. The CLI is built on the official Rust SDK's
//! client, so each test here is also an interop test of a client nobody here wrote.

use std::time::Duration;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use taskgate_tests::cli::{Cli, Ran};
use taskgate_tests::{Scrape, Stack, eventually};

const PATIENCE: Duration = Duration::from_secs(30);

fn cli(stack: &Stack, gateway: usize) -> Cli {
    Cli::new(stack.gateways[gateway].url.as_deref().expect("a gateway"))
}

fn assert_code(ran: &Ran, code: i32) {
    assert_eq!(ran.code, code, "exit code\nstdout: {}\nstderr: {}", ran.stdout, ran.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_follows_the_task_and_prints_its_result() {
    let stack = Stack::builder().spawn().await;
    let cli = cli(&stack, 0);

    let ran = cli.run(&["call", "sleep", "--arg", "ms=300"]).await;
    assert_code(&ran, 0);
    assert!(ran.stdout.starts_with("Slept 300 ms.\n"), "{ran:?}");
    assert!(ran.stdout.contains("\"sleptMs\": 300"), "structuredContent, pretty: {ran:?}");
    assert!(ran.stderr.contains("completed"), "the status lines go to stderr: {ran:?}");

    let ran = cli.run(&["--output", "json", "call", "sleep", "--json", "{\"ms\": 5}"]).await;
    assert_code(&ran, 0);
    let task = ran.json();
    assert_eq!(task["status"], "completed");
    assert_eq!(task["result"]["structuredContent"]["sleptMs"], 5);
    assert!(task["taskId"].as_str().is_some_and(|id| id.starts_with("tsk_")), "{task}");
    assert!(ran.stderr.is_empty(), "JSON mode prints nothing else: {ran:?}");

    // The tool's own outcomes map to exit codes.
    let ran = cli.run(&["call", "faulty", "--arg", "mode=tool_error"]).await;
    assert_code(&ran, 1);
    assert!(ran.stdout.contains("The tool reported an error."), "{ran:?}");
    let ran = cli.run(&["call", "faulty", "--arg", "mode=rpc_error"]).await;
    assert_code(&ran, 3);
    assert!(ran.stderr.contains("failed: the job could not run (-32602)"), "{ran:?}");

    // Bad input is refused before anything is created.
    let ran = cli.run(&["call", "sleep", "--arg", "ms=soon"]).await;
    assert_code(&ran, 2);
    assert!(ran.stderr.contains("--arg ms=soon: expected an integer"), "{ran:?}");
    let ran = cli.run(&["call", "no_such_tool"]).await;
    assert_code(&ran, 8);
    assert!(ran.stderr.contains("no tool \"no_such_tool\"") && ran.stderr.contains("sleep"), "{ran:?}");
    let ran = cli.run(&["call", "sleep", "--arg", "ms=-1"]).await;
    assert_code(&ran, 8);
    assert!(ran.stderr.contains("(-32602)") && ran.stderr.contains("hint:"), "{ran:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_answered_from_a_script_with_taskgate_answer() {
    let stack = Stack::builder().spawn().await;
    let cli = cli(&stack, 0);

    // No terminal: the call stops at the question, prints it and how to answer, and says so.
    let ran = cli.run(&["call", "generate_report", "--arg", "size=large"]).await;
    assert_code(&ran, 5);
    assert!(ran.stderr.contains("asks [approve_outline]: Approve the generated report outline?"), "{ran:?}");
    assert!(ran.stderr.contains("approve_outline --accept '{\"approved\":true}'"), "{ran:?}");
    let ran = cli.run(&["--output", "json", "call", "generate_report", "--arg", "size=large"]).await;
    assert_code(&ran, 5);
    let waiting = ran.json();
    assert_eq!(waiting["status"], "input_required", "{waiting}");
    assert!(waiting["inputRequests"]["approve_outline"].is_object(), "{waiting}");
    let id = waiting["taskId"].as_str().unwrap().to_owned();

    // A key the task is not waiting on is refused, naming the ones it is.
    let ran = cli.run(&["answer", &id, "approve_everything", "--decline"]).await;
    assert_code(&ran, 2);
    assert!(ran.stderr.contains("it waits on: approve_outline"), "{ran:?}");
    let ran = cli.run(&["answer", &id, "approve_outline", "--accept", "[true]"]).await;
    assert_code(&ran, 2);

    let ran = cli.run(&["answer", &id, "approve_outline", "--accept", "{\"approved\": true}"]).await;
    assert_code(&ran, 0);
    assert!(ran.stderr.contains("answered approve_outline"), "{ran:?}");
    let ran = cli.run(&["follow", &id]).await;
    assert_code(&ran, 0);
    assert!(ran.stdout.contains("Generated large report with approved outline."), "{ran:?}");

    let ran = cli.run(&["get", &id]).await;
    assert_code(&ran, 0);
    assert!(ran.stdout.contains("status    completed"), "{ran:?}");
    let ran = cli.run(&["--output", "json", "get", &id]).await;
    assert_eq!(ran.json()["result"]["structuredContent"], json!({"size": "large", "approved": true}));

    // A declined question ends the task as the tool decides: cancelled.
    let ran = cli.run(&["--output", "json", "call", "generate_report", "--detach"]).await;
    assert_code(&ran, 0);
    let id = ran.json()["taskId"].as_str().unwrap().to_owned();
    eventually(PATIENCE, "the question", || async {
        let ran = cli.run(&["--output", "json", "get", &id]).await;
        (ran.json()["status"] == "input_required").then_some(())
    })
    .await;
    assert_code(&cli.run(&["answer", &id, "approve_outline", "--decline"]).await, 0);
    let ran = cli.run(&["follow", &id]).await;
    assert_code(&ran, 4);
    assert!(ran.stderr.contains("cancelled: User did not approve the outline."), "{ran:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_task_is_followed_from_another_replica() {
    let stack = Stack::builder().gateways(2).spawn().await;
    let (first, second) = (cli(&stack, 0), cli(&stack, 1));

    let ran = first.run(&["call", "sleep", "--arg", "ms=4000", "--detach"]).await;
    assert_code(&ran, 0);
    let slow = ran.stdout.trim().to_owned();
    assert!(slow.starts_with("tsk_") && !slow.contains('\n'), "only the id: {ran:?}");
    let ran = first.run(&["call", "sleep", "--arg", "ms=200", "--detach"]).await;
    let quick = ran.stdout.trim().to_owned();

    // Two tasks (one named twice) followed at once through the other replica; JSON mode
    // prints each new snapshot as a line, and both end completed.
    let ran = second.run(&["--output", "json", "follow", &slow, &quick, &slow]).await;
    assert_code(&ran, 0);
    let lines = ran.json_lines();
    for id in [&slow, &quick] {
        let last = lines.iter().rev().find(|l| l["taskId"] == id.as_str()).expect("a line per task");
        assert_eq!(last["status"], "completed", "{last}");
    }
    let slow_lines: Vec<&Value> = lines.iter().filter(|l| l["taskId"] == slow.as_str()).collect();
    assert!(slow_lines.len() >= 2, "the slow task was seen before it ended: {ran:?}");
    assert!(slow_lines.windows(2).all(|w| w[0] != w[1]), "each line is a change: {ran:?}");

    // Follow used the listen stream, not polling.
    let metrics = Scrape::of(&format!("{}/metrics", stack.gateways[1].url.as_deref().unwrap())).await;
    let streamed = [("method", "subscriptions/listen"), ("outcome", "ok")];
    assert!(metrics.sum("taskgate_gateway_requests_total", &streamed) >= 1.0, "no listen stream was answered");

    // An unknown task is refused with a hint.
    let ran = second.run(&["follow", "tsk_00000000000000000000000000000000aa"]).await;
    assert_code(&ran, 8);
    assert!(ran.stderr.contains("unknown, expired, or belongs to someone else"), "{ran:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_ends_a_running_task() {
    let stack = Stack::builder().spawn().await;
    let cli = cli(&stack, 0);
    let id = cli.run(&["call", "sleep", "--arg", "ms=60000", "--detach"]).await.stdout.trim().to_owned();
    stack.wait_until_held(&id, PATIENCE).await;

    let ran = cli.run(&["cancel", &id]).await;
    assert_code(&ran, 0);
    assert!(ran.stderr.contains("cancel asked"), "{ran:?}");
    let ran = cli.run(&["follow", &id]).await;
    assert_code(&ran, 4);
    assert!(ran.stderr.contains("cancelled: Sleep was cancelled."), "{ran:?}");
    let ran = cli.run(&["--output", "json", "cancel", &id]).await;
    assert_code(&ran, 0);
    assert_eq!(ran.json()["status"], "cancelled", "a second cancel changes nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_schema_and_discover_describe_the_gateway() {
    let stack = Stack::builder().spawn().await;
    let cli = cli(&stack, 0);
    let ran = cli.run(&["tools"]).await;
    assert_code(&ran, 0);
    let row = ran.stdout.lines().find(|l| l.trim_start().starts_with("generate_report")).expect("a row");
    assert!(row.contains("task-required") && row.contains("outline approval"), "{ran:?}");
    let row = ran.stdout.lines().find(|l| l.trim_start().starts_with("noop")).expect("a row");
    assert!(row.contains("task-optional"), "{ran:?}");

    let ran = cli.run(&["--output", "json", "tools", "--schema", "sleep"]).await;
    assert_code(&ran, 0);
    assert_eq!(ran.json()["inputSchema"]["properties"]["ms"]["type"], "integer");
    let ran = cli.run(&["--output", "json", "tools"]).await;
    assert!(ran.json()["tools"].as_array().is_some_and(|t| t.len() >= 5), "{ran:?}");

    let ran = cli.run(&["discover"]).await;
    assert_code(&ran, 0);
    assert!(ran.stdout.contains("protocol      2026-07-28"), "{ran:?}");
    assert!(ran.stdout.contains("io.modelcontextprotocol/tasks"), "{ran:?}");
    let ran = cli.run(&["--output", "json", "discover"]).await;
    assert_eq!(ran.json()["protocolVersion"], "2026-07-28");

    // Nothing listening: a transport error that says where it looked.
    let ran = Cli::new(&format!("http://127.0.0.1:{}", taskgate_tests::free_port())).run(&["tools"]).await;
    assert_code(&ran, 7);
    assert!(ran.stderr.contains("check --url"), "{ran:?}");

    let ran = cli.run(&["completions", "bash"]).await;
    assert_code(&ran, 0);
    assert!(ran.stdout.contains("taskgate") && ran.stdout.contains("complete"), "a bash completion script");
}

const SECRET: &str = "0123456789abcdef0123456789abcdef-cli-test";
const AUDIENCE: &str = "https://mcp.example.test/mcp";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwt_gateway_refuses_without_a_token_and_says_what_to_set() {
    let mut stack = Stack::builder().gateways(0).spawn().await;
    let secret = stack.scratch_dir().join("hs256.secret");
    std::fs::write(&secret, SECRET).unwrap();
    let auth = ["--auth", "jwt", "--jwt-hs256-secret-file", secret.to_str().unwrap(), "--jwt-audience", AUDIENCE];
    stack.add_gateway_with_auth(&auth).await;
    let cli = cli(&stack, 0);

    let ran = cli.run(&["tools"]).await;
    assert_code(&ran, 6);
    assert!(
        ran.stderr.contains("401") && ran.stderr.contains("set --token, --token-file or TASKGATE_TOKEN"),
        "{ran:?}"
    );
    let ran = cli.run(&["--output", "json", "get", "tsk_x"]).await;
    assert_code(&ran, 6);
    let error: Value = serde_json::from_str(ran.stderr.trim()).expect("a JSON error on stderr");
    assert_eq!(error["error"]["exit"], 6);

    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let claims = json!({"sub": "alice", "tenant": "acme", "aud": AUDIENCE, "exp": now + 600});
    let token = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
    )
    .unwrap();
    let ran = cli.clone().env("TASKGATE_TOKEN", &token).run(&["call", "sleep", "--arg", "ms=10"]).await;
    assert_code(&ran, 0);
    let file = stack.scratch_dir().join("token");
    std::fs::write(&file, format!("{token}\n")).unwrap();
    let ran = cli.run(&["--token-file", file.to_str().unwrap(), "tools"]).await;
    assert_code(&ran, 0);
    // A token file on the command line wins over a token in the environment.
    let ran = cli.clone().env("TASKGATE_TOKEN", "stale").run(&["--token-file", file.to_str().unwrap(), "tools"]).await;
    assert_code(&ran, 0);
    let ran = cli.run(&["--token", "not-a-jwt", "tools"]).await;
    assert_code(&ran, 6);
    assert!(!ran.stderr.contains("not-a-jwt"), "the token is never printed: {ran:?}");
}

/// A stack whose worker serves the upstream fixture, its `echo` and `approve_twice` sync-only.
async fn inline_stack() -> Stack {
    let mut stack = Stack::builder().workers(0).spawn().await;
    let dir = stack.scratch_dir().to_owned();
    let fixture = env!("CARGO_BIN_EXE_upstream-fixture");
    let config = format!(
        "[[upstream]]\nname = \"fx\"\ncommand = {fixture:?}\nargs = [\"stdio\"]\nelicitation = \"hold\"\n\
         [upstream.tool.echo]\nexecution = \"sync-only\"\n[upstream.tool.approve_twice]\nexecution = \"sync-only\"\n"
    );
    let file = taskgate_tests::upstream::upstreams_file(&dir, "upstreams.toml", &config);
    stack.add_worker(&["--tools", "", "--upstreams", file.to_str().unwrap()]).await;
    taskgate_tests::upstream::wait_for_tool(&stack.client(0), "fx__approve_twice", PATIENCE).await;
    stack
}

/// A tool that runs inline (sync-only, from an upstream MCP server) prints the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_only_tool_is_called_inline() {
    let stack = inline_stack().await;
    let cli = cli(&stack, 0);
    let ran = cli.run(&["call", "fx__echo", "--arg", "text=inline please"]).await;
    assert_code(&ran, 0);
    assert_eq!(ran.stdout, "inline please\n", "{ran:?}");
    let ran = cli.run(&["--output", "json", "call", "fx__echo", "--arg", "text=hi"]).await;
    let done = ran.json();
    assert_eq!(done["status"], "completed");
    assert!(done.get("taskId").is_none(), "an inline answer has no task: {done}");
    assert_eq!(done["result"]["content"][0]["text"], "hi");
}

/// Runs `args` under a pseudo-terminal and hands the session to `drive` (blocking); returns the
/// exit code and what `drive` returned.
async fn on_a_terminal<T: Send + 'static>(
    cli: &Cli,
    args: &[&str],
    drive: impl FnOnce(&mut rexpect::session::PtySession) -> T + Send + 'static,
) -> (i32, T) {
    let mut command = cli.command(args);
    command.env("TERM", "xterm-256color");
    tokio::task::spawn_blocking(move || {
        let mut session = rexpect::session::spawn_command(command, Some(30_000)).expect("the CLI starts on a pty");
        let driven = drive(&mut session);
        session.exp_eof().expect("the CLI ends within the session's timeout");
        match session.process.wait().expect("the CLI ends") {
            rexpect::process::wait::WaitStatus::Exited(_, code) => (code, driven),
            other => panic!("the CLI did not exit: {other:?}"),
        }
    })
    .await
    .expect("the terminal session")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_terminal_the_question_is_asked_and_answered() {
    let stack = Stack::builder().spawn().await;
    let cli = cli(&stack, 0);
    let (code, ()) = on_a_terminal(&cli, &["call", "generate_report", "--arg", "size=large"], |s| {
        s.exp_string("Approve the generated report outline?").expect("the question");
        s.exp_string("Your answer").expect("the choice of answer");
        s.send("\r").and_then(|_| s.flush()).unwrap(); // "Answer", the default
        s.exp_string("approved").expect("the form's field");
        s.send("y").and_then(|_| s.flush()).unwrap();
        s.exp_string("Generated large report with approved outline.").expect("the result");
    })
    .await;
    assert_eq!(code, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_terminal_ctrl_c_offers_to_cancel_the_task() {
    let stack = Stack::builder().spawn().await;
    let cli = cli(&stack, 0);
    let (code, ()) = on_a_terminal(&cli, &["call", "sleep", "--arg", "ms=60000"], |s| {
        s.exp_string("Sleeping.").expect("the live status line");
        s.send_control('c').unwrap();
        s.exp_string("Keep following").expect("the question after Ctrl-C");
        s.send("j").and_then(|_| s.flush()).unwrap(); // down: "Cancel the task"
        s.send("\r").and_then(|_| s.flush()).unwrap();
        s.exp_string("cancelled: Sleep was cancelled.").expect("the task's end");
    })
    .await;
    assert_eq!(code, 4);

    // "Stop following" leaves the task running.
    let (code, id) = on_a_terminal(&cli, &["call", "sleep", "--arg", "ms=60000"], |s| {
        let (_, id) = s.exp_regex("tsk_[0-9a-f]+").expect("the task's id on its status line");
        s.exp_string("Sleeping.").expect("the live status line");
        s.send_control('c').unwrap();
        s.exp_string("Keep following").expect("the question after Ctrl-C");
        s.send("\r").and_then(|_| s.flush()).unwrap();
        s.exp_string("the task goes on").expect("how to follow again");
        id
    })
    .await;
    assert_eq!(code, 130);
    let task = cli.run(&["--output", "json", "get", &id]).await.json();
    assert_eq!(task["status"], "working", "{task}");
}

/// Without a terminal, `follow` prints a question that comes up while it follows (once), keeps
/// waiting, and ends when someone answers from elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_shows_a_question_that_comes_up_and_waits_for_its_answer() {
    // One worker that runs one task at a time, kept busy: the report waits in the queue while
    // the follow starts and opens its stream.
    let stack = Stack::builder().worker_args(&["--concurrency", "1"]).spawn().await;
    let cli = cli(&stack, 0);
    let busy = cli.run(&["call", "sleep", "--arg", "ms=60000", "--detach"]).await.stdout.trim().to_owned();
    stack.wait_until_held(&busy, PATIENCE).await;
    let ran = cli.run(&["call", "generate_report", "--arg", "size=small", "--detach"]).await;
    assert_code(&ran, 0);
    let id = ran.stdout.trim().to_owned();

    let follower = {
        let (cli, id) = (cli.clone(), id.clone());
        tokio::spawn(async move { cli.run(&["follow", &id]).await })
    };
    let metrics = format!("{}/metrics", stack.gateways[0].url.as_deref().unwrap());
    eventually(PATIENCE, "the follow's stream to open", || async {
        (Scrape::of(&metrics).await.present("taskgate_gateway_sse_streams", &[]) >= 1.0).then_some(())
    })
    .await;
    let queued = cli.run(&["--output", "json", "get", &id]).await.json();
    assert!(queued.get("inputRequests").is_none(), "not asked yet: {queued}");
    assert_code(&cli.run(&["cancel", &busy]).await, 0);
    eventually(PATIENCE, "the question", || async {
        let ran = cli.run(&["--output", "json", "get", &id]).await;
        (ran.json()["status"] == "input_required").then_some(())
    })
    .await;
    assert_code(&cli.run(&["answer", &id, "approve_outline", "--accept", "{\"approved\": true}"]).await, 0);

    let ran = tokio::time::timeout(PATIENCE, follower).await.expect("the follow ends").unwrap();
    assert_code(&ran, 0);
    assert_eq!(ran.stderr.matches("asks [approve_outline]").count(), 1, "the question, once: {ran:?}");
    assert!(ran.stdout.contains("Generated small report"), "{ran:?}");
    let streams = Scrape::of(&metrics).await;
    assert_eq!(streams.present("taskgate_gateway_sse_streams", &[]), 0.0, "no stream left open");
}

/// An inline tool that asks before it answers: each round is asked on the terminal and the call
/// sent again with the answers and the server's `requestState`; without a terminal, exit 5.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_questions_are_asked_round_by_round() {
    let stack = inline_stack().await;
    let cli = cli(&stack, 0);
    let ran = cli.run(&["call", "fx__approve_twice"]).await;
    assert_code(&ran, 5);
    assert!(ran.stderr.contains("Approve step 1?"), "{ran:?}");

    let (code, ()) = on_a_terminal(&cli, &["call", "fx__approve_twice"], |s| {
        for step in ["Approve step 1?", "Approve step 2?"] {
            s.exp_string(step).expect("the question of this round");
            s.exp_string("Your answer").expect("the choice of answer");
            s.send("\r").and_then(|_| s.flush()).unwrap();
            s.exp_string("ok").expect("the form's field");
            s.send("y").and_then(|_| s.flush()).unwrap();
        }
        s.exp_string("approved twice").expect("the result after two rounds");
    })
    .await;
    assert_eq!(code, 0);
}

/// `inspect` prints what the server holds (tenant, principal, tool, holder, an operator's
/// reason) without its control characters: a reason typed into the console cannot drive the
/// terminal of the operator who inspects the task. The JSON output keeps it as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_prints_no_terminal_escapes() {
    use crate::console::{As, Console};
    let stack = crate::console::console_stack(1).await;
    let alice = stack.client_as(0, "key-alice");
    let task = alice.create_task("generate_report", json!({})).await;
    alice.wait_for_status(&task, "input_required", PATIENCE).await;
    let console = Console::new(&stack.client(0));
    let csrf = console.get(&format!("/console/tasks/{task}"), As::Bearer("key-op")).await.csrf();
    let reason = "\u{1b}[31mred\u{1b}[0m \u{1b}]8;;https://evil.example\u{7}approver left";
    let form = [("csrf", csrf.as_str()), ("reason", reason)];
    let failed = console.post(&format!("/console/tasks/{task}/fail"), As::Bearer("key-op"), &form, None).await;
    assert_eq!(failed.status, 303, "{}", failed.body);

    let cli = Cli::new(stack.client(0).base());
    let ran = cli.run(&["inspect", &task, "--token", "key-op"]).await;
    assert_code(&ran, 0);
    assert!(!ran.stdout.contains('\u{1b}') && !ran.stdout.contains('\u{7}'), "{:?}", ran.stdout);
    assert!(ran.stdout.contains("[31mred[0m ]8;;https://evil.exampleapprover left"), "{:?}", ran.stdout);
    let json = cli.run(&["inspect", &task, "--token", "key-op", "--output", "json"]).await;
    assert_code(&json, 0);
    let last = json.json()["timeline"].as_array().and_then(|t| t.last().cloned()).unwrap_or_default();
    assert_eq!(last["why"], reason, "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_carries_an_idempotency_key_and_the_same_key_names_the_same_task() {
    let stack = Stack::builder().gateways(2).spawn().await;
    let (first, second) = (cli(&stack, 0), cli(&stack, 1));
    let keyed = ["--output", "json", "call", "sleep", "--arg", "ms=100", "--detach", "--idempotency-key", "deploy-42"];
    let ran = first.run(&keyed).await;
    assert_code(&ran, 0);
    let id = ran.json()["taskId"].as_str().unwrap().to_owned();
    assert_eq!(ran.json()["idempotencyKey"], "deploy-42", "{ran:?}");
    // Run again, through the other replica: the same task, not a second one.
    let again = second.run(&keyed).await;
    assert_code(&again, 0);
    assert_eq!(again.json()["taskId"], id.as_str(), "{again:?}");
    // Without one, each run makes a fresh key: two runs are two tasks.
    let unkeyed = ["--output", "json", "call", "sleep", "--arg", "ms=1", "--detach"];
    let (a, b) = (first.run(&unkeyed).await.json(), first.run(&unkeyed).await.json());
    assert_ne!(a["taskId"], b["taskId"]);
    let (ka, kb) = (a["idempotencyKey"].as_str().unwrap(), b["idempotencyKey"].as_str().unwrap());
    assert!(ka.starts_with("tg-") && ka != kb, "{ka} {kb}");
}
