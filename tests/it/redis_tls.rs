//! Redis over TLS, with mutual authentication and the ACL user of `docs/redis.md`, read from
//! that page: a whole lifecycle with input and a listen stream runs through it, and every way
//! of getting it wrong keeps the gateway unready with a log line that says why, and never the
//! password.

use std::time::Duration;

use serde_json::{Value, json};
use taskgate_tests::{RedisServer, Stack};

const PATIENCE: Duration = Duration::from_secs(20);
const PASSWORD: &str = "correct-horse-battery-staple";

/// The `ACL SETUSER taskgate …` line of docs/redis.md, for `namespace` and `password`, minus
/// the rules in `without`.
fn documented_acl(namespace: &str, password: &str, without: &[&str]) -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/redis.md")).expect("docs/redis.md");
    let line = doc.lines().find(|l| l.starts_with("ACL SETUSER taskgate ")).expect("docs/redis.md has the rule set");
    let rules: Vec<String> = line
        .split_whitespace()
        .skip(2)
        .filter(|rule| !without.contains(rule))
        .map(|rule| rule.replace("NAMESPACE", namespace).replace("PASSWORD", password))
        .collect();
    assert!(rules.len() > 10, "{rules:?}");
    rules
}

async fn set_user(redis: &RedisServer, rules: &[String]) {
    let mut conn = redis.connection().await;
    let () = redis::cmd("ACL").arg("SETUSER").arg(rules).query_async(&mut conn).await.expect("ACL SETUSER");
}

/// `--redis-username taskgate --redis-password-file <file holding password>`.
fn login(stack: &Stack, password: &str) -> Vec<String> {
    let file = stack.scratch_dir().join(format!("redis-password-{}", rand::random::<u32>()));
    std::fs::write(&file, format!("{password}\n")).expect("password file");
    vec!["--redis-username".into(), "taskgate".into(), "--redis-password-file".into(), file.display().to_string()]
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lifecycle_with_input_and_a_listen_stream_runs_over_mutual_tls_as_the_documented_user() {
    let mut stack = Stack::builder().tls().gateways(0).workers(0).spawn().await;
    assert!(stack.redis_url.starts_with("rediss://"), "{}", stack.redis_url);
    set_user(&stack.redis, &documented_acl(&stack.namespace, PASSWORD, &[])).await;
    let login = login(&stack, PASSWORD);
    stack.add_gateway(&strs(&login)).await;
    stack.add_gateway(&strs(&login)).await;
    // A short lease, so that the worker's periodic passes (stale deliveries, reaping) run as
    // the ACL user during the test too.
    let worker_args = [&login[..], &["--lease-ms".to_owned(), "3000".to_owned()]].concat();
    stack.add_worker(&strs(&worker_args)).await;
    let (a, b) = (stack.client(0), stack.client(1));

    let task_id = a.create_task("generate_report", json!({"size": "small"})).await;
    let (request, mut stream) =
        b.open_stream("subscriptions/listen", json!({"notifications": {"taskIds": [&task_id]}})).await;
    assert_eq!(stream.status, 200);
    let subscription = request["id"].clone();
    let mut seen: Vec<String> = Vec::new();
    let next_status = async |stream: &mut taskgate_tests::SseStream| -> String {
        loop {
            let message = stream.next_message(PATIENCE).await.expect("the stream stays open");
            if message["method"] == "notifications/tasks" {
                assert_eq!(message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], subscription);
                return message["params"]["status"].as_str().expect("a status").to_owned();
            }
        }
    };
    loop {
        let status = next_status(&mut stream).await;
        seen.push(status.clone());
        if status == "input_required" {
            break;
        }
    }
    let answered =
        a.update_task(&task_id, json!({"approve_outline": {"action": "accept", "content": {"approved": true}}})).await;
    assert_eq!(answered.result()["resultType"], "complete", "{}", answered.text);
    while seen.last().map(String::as_str) != Some("completed") {
        seen.push(next_status(&mut stream).await);
    }
    // The first snapshot is the state when the stream opened: working, or already waiting.
    assert!(seen.contains(&"input_required".to_owned()), "{seen:?}");
    let done: Value = b.get_task(&task_id).await.result().clone();
    assert_eq!(done["status"], "completed");
    assert_eq!(done["result"]["structuredContent"], json!({"approved": true, "size": "small"}));

    // A cancel of a running task goes through the worker's signal channel.
    let sleeper = a.create_task("sleep", json!({"ms": 60_000})).await;
    stack.wait_until_held(&sleeper, PATIENCE).await;
    assert!(b.cancel_task(&sleeper).await.result().is_object());
    a.wait_for_status(&sleeper, "cancelled", PATIENCE).await;

    // The periodic passes ran, and nothing anywhere was refused for a missing permission.
    let mut conn = stack.redis.connection().await;
    taskgate_tests::eventually(PATIENCE, "the worker's stale-delivery pass (XAUTOCLAIM)", || {
        let mut conn = conn.clone();
        async move {
            let stats: String = redis::cmd("INFO").arg("commandstats").query_async(&mut conn).await.ok()?;
            stats.contains("cmdstat_xautoclaim:").then_some(())
        }
    })
    .await;
    let errors: String = redis::cmd("INFO").arg("errorstats").query_async(&mut conn).await.expect("INFO errorstats");
    assert!(!errors.contains("NOPERM"), "the documented rule set is enough: {errors}");

    // Every connection of both binaries is the TLS one, as the ACL user: none on the plain port
    // besides the harness's own.
    let clients: String = redis::cmd("CLIENT").arg("LIST").query_async(&mut conn).await.expect("CLIENT LIST");
    let ours: Vec<&str> = clients.lines().filter(|l| l.contains("user=taskgate")).collect();
    assert!(ours.len() >= 3, "gateways and worker connect as the ACL user: {clients}");
    let tls_port = stack.redis.tls_port().expect("TLS");
    assert!(ours.iter().all(|l| l.contains(&format!("laddr=127.0.0.1:{tls_port}"))), "over TLS only: {clients}");
    for service in stack.gateways.iter().chain(&stack.workers) {
        assert!(!service.log().contains(PASSWORD), "the password is never logged");
    }
}

/// Starts a gateway with `args`, and waits until it logs a failed attempt whose cause holds
/// `cause`; its readiness must be off meanwhile. Returns its log.
async fn refused(stack: &mut Stack, redis_url: &str, args: &[String], cause: &str) -> String {
    let i = stack.add_gateway_unready(redis_url, &strs(args)).await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let failure =
        |log: &str| log.lines().find(|l| l.contains("redis is not usable yet") && l.contains(cause)).map(str::to_owned);
    let (line, whole) = loop {
        let log = stack.gateways[i].log();
        if let Some(line) = failure(&log) {
            break (line, log);
        }
        assert!(tokio::time::Instant::now() < deadline, "no start-up failure saying {cause:?} in:\n{log}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let url = stack.gateways[i].url.clone().expect("a gateway");
    let ready = reqwest::get(format!("{url}/readyz")).await.expect("the gateway serves");
    assert_eq!(ready.status(), 503, "not ready while Redis cannot be used");
    assert!(line.contains("\"hint\""), "the line says what to do: {line}");
    assert!(!whole.contains(PASSWORD), "the password is never logged: {whole}");
    stack.gateways[i].kill().await;
    line
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_wrong_tls_or_acl_setting_keeps_the_gateway_unready_and_says_why() {
    let mut stack = Stack::builder().tls().gateways(0).workers(0).spawn().await;
    set_user(&stack.redis, &documented_acl(&stack.namespace, PASSWORD, &[])).await;
    // Each case gives the gateway all of its Redis settings itself.
    let pki = stack.pki.as_ref().expect("TLS");
    let tls_url = stack.redis.tls_url();
    let plain_to_tls_port = format!("redis://127.0.0.1:{}", stack.redis.tls_port().expect("TLS"));
    let ca = ["--redis-ca-file".to_owned(), pki.ca().display().to_string()];
    let other_ca = ["--redis-ca-file".to_owned(), pki.other_ca().display().to_string()];
    let client_cert = [
        "--redis-client-cert".to_owned(),
        pki.client_cert().display().to_string(),
        "--redis-client-key".to_owned(),
        pki.client_key().display().to_string(),
    ];
    let good_login = login(&stack, PASSWORD);
    let wrong_login = login(&stack, "not-the-password");

    // A plain connection to the TLS port.
    let line = refused(&mut stack, &plain_to_tls_port, &good_login, "").await;
    assert!(line.contains("TLS") || line.contains("rediss://"), "the cause points at TLS: {line}");

    // No client certificate where the server asks for one.
    refused(&mut stack, &tls_url, &[&good_login[..], &ca].concat(), "TLS handshake failed").await;

    // A CA that did not sign the server's certificate.
    refused(&mut stack, &tls_url, &[&good_login[..], &other_ca, &client_cert].concat(), "not trusted").await;

    // Everything right but the password: once from a file, once in the URL, which every
    // message shows redacted.
    refused(&mut stack, &tls_url, &[&wrong_login[..], &ca, &client_cert].concat(), "authentication failed").await;
    let port = stack.redis.tls_port().expect("TLS");
    let in_url = format!("rediss://taskgate:not-the-password@127.0.0.1:{port}");
    let line = refused(&mut stack, &in_url, &[&ca[..], &client_cert].concat(), "authentication failed").await;
    assert!(line.contains(&format!("rediss://***@127.0.0.1:{port}")), "{line}");
    let log = stack.gateways.last().expect("the gateway").log();
    assert!(!log.contains("not-the-password") && !log.contains("taskgate:"), "credentials never shown: {log}");

    // A user without one rule of the documented set: the error names the command.
    let mut conn = stack.redis.connection().await;
    let () = redis::cmd("ACL").arg("DELUSER").arg("taskgate").query_async(&mut conn).await.expect("ACL DELUSER");
    set_user(&stack.redis, &documented_acl(&stack.namespace, PASSWORD, &["+evalsha"])).await;
    let args = [&good_login[..], &ca, &client_cert].concat();
    let line = refused(&mut stack, &tls_url, &args, "may not run a command").await;
    let lower = line.to_ascii_lowercase();
    assert!(lower.contains("noperm") && lower.contains("'evalsha'"), "the missing permission is named: {line}");
}
