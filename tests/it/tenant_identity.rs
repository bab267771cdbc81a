//! Each tenant acts as itself behind the gateway: a `per = "tenant"` upstream runs a child (or
//! an HTTP session) per tenant with that tenant's stored credential, never another's; a tenant
//! with none gets the typed error; instances are bounded per worker. Real gateway, worker and
//! Redis, with the hermetic fixture server.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use taskgate_tests::credentials::{key_file, store_credential};
use taskgate_tests::upstream::{HttpFixture, fixture_log, upstreams_file, wait_for_tool};
use taskgate_tests::{McpClient, Scrape, Stack, eventually, free_port};

use crate::upstream::{FIXTURE, PATIENCE, terminal};

fn hash(key: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// A stack with no worker, whose gateway takes `key-<tenant>` for each tenant.
async fn tenants_stack(tenants: &[&str]) -> Stack {
    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let file = stack.scratch_dir().join("api-keys");
    let keys: String = tenants.iter().map(|t| format!("{} {t} {t}-user\n", hash(&format!("key-{t}")))).collect();
    std::fs::write(&file, keys).unwrap();
    stack.add_gateway_with_auth(&["--auth", "api-keys", "--api-keys-file", file.to_str().unwrap()]).await;
    stack
}

/// The fixture over stdio as `fx`, one child per tenant: `FIXTURE_WHO` and the working
/// directory come from the tenant's credential.
fn per_tenant_stdio(log: &Path) -> String {
    format!(
        "[[upstream]]\nname = \"fx\"\nper = \"tenant\"\ncommand = {FIXTURE:?}\nargs = [\"stdio\"]\n\
         env = {{ FIXTURE_LOG = {:?}, FIXTURE_WHO = {{ credential = \"who\", catalogue = \"listing\" }} }}\n\
         cwd = {{ credential = \"dir\", catalogue = \"/\" }}\n",
        log.to_str().unwrap()
    )
}

async fn whoami(client: &McpClient) -> Value {
    let task = client.create_task("fx__whoami", json!({})).await;
    let done = terminal(client, &task).await;
    assert_eq!(done["status"], "completed", "{done}");
    serde_json::from_str(done["result"]["content"][0]["text"].as_str().expect("a text answer")).expect("JSON")
}

/// The fixture children the worker `pid` runs now.
fn fixture_children(pid: u32) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
        .filter(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            // `pid (comm) state ppid …`: the command may hold spaces, so read after the last ')'.
            let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)).unwrap_or("");
            let cmdline = std::fs::read_to_string(e.path().join("cmdline")).unwrap_or_default();
            ppid == pid.to_string() && cmdline.contains("upstream-fixture")
        })
        .count()
}

#[tokio::test]
async fn each_tenant_reaches_its_own_child_with_its_own_credential_and_a_tenant_without_one_is_told_what_to_store() {
    let mut stack = tenants_stack(&["a", "b", "c"]).await;
    let dir = stack.scratch_dir().to_owned();
    let (dir_a, dir_b) = (dir.join("files-a"), dir.join("files-b"));
    std::fs::create_dir_all(&dir_a).unwrap();
    std::fs::create_dir_all(&dir_b).unwrap();
    let key = key_file(&dir, "k1", 7);
    let store = stack.store();
    let (secret_a, secret_b) = ("a-secret-4f1d2c", "b-secret-9e8a77");
    store_credential(&store, &[("k1", 7)], "a", None, "fx", &[("who", secret_a), ("dir", dir_a.to_str().unwrap())])
        .await;
    store_credential(&store, &[("k1", 7)], "b", None, "fx", &[("who", secret_b), ("dir", dir_b.to_str().unwrap())])
        .await;
    let file = upstreams_file(&dir, "upstreams.toml", &per_tenant_stdio(&dir.join("fixture.log")));
    stack.add_worker(&["--tools", "", "--upstreams", file.to_str().unwrap(), "--credentials-key", &key]).await;
    let (a, b, c) = (stack.client_as(0, "key-a"), stack.client_as(0, "key-b"), stack.client_as(0, "key-c"));
    wait_for_tool(&a, "fx__whoami", PATIENCE).await;

    let first_a = whoami(&a).await;
    let first_b = whoami(&b).await;
    assert_eq!(first_a["env"]["FIXTURE_WHO"], secret_a, "{first_a}");
    assert_eq!(first_a["cwd"], dir_a.to_str().unwrap(), "{first_a}");
    assert_eq!(first_b["env"]["FIXTURE_WHO"], secret_b, "{first_b}");
    assert_eq!(first_b["cwd"], dir_b.to_str().unwrap(), "{first_b}");
    assert_ne!(first_a["pid"], first_b["pid"], "each tenant has a child of its own");
    let again_a = whoami(&a).await;
    assert_eq!(again_a["pid"], first_a["pid"], "a tenant's next call reuses its child");

    // A tenant with no credential: the typed error, naming what to store and nothing secret.
    let task = c.create_task("fx__whoami", json!({})).await;
    let done = terminal(&c, &task).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], -31428, "{done}");
    let message = done["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("taskgate credentials set --tenant c") && message.contains("--upstream fx"), "{done}");
    assert_eq!(done["error"]["data"]["needs"], json!(["dir", "who"]), "{done}");
    assert_eq!(done["error"]["data"]["upstream"], "fx", "{done}");

    // Neither credential shows in a log, a task or an error.
    for (name, log) in [("worker", stack.workers[0].log()), ("gateway", stack.gateways[0].log())] {
        assert!(!log.contains(secret_a) && !log.contains(secret_b), "the {name} log shows a credential");
    }
    for secret in [secret_a, secret_b] {
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(&mut store.conn()).await.unwrap();
        for key in keys.iter().filter(|k| k.contains(":record") || k.contains(":args") || k.contains(":timeline")) {
            let dump: Option<Vec<u8>> = redis::cmd("DUMP").arg(key).query_async(&mut store.conn()).await.unwrap();
            let dump = String::from_utf8_lossy(&dump.unwrap_or_default()).into_owned();
            assert!(!dump.contains(secret), "{key} holds a credential");
        }
    }
}

/// `meta()` with URL-mode elicitation declared beside form mode.
fn meta_with_url_mode() -> Value {
    let mut meta = taskgate_tests::meta();
    meta["io.modelcontextprotocol/clientCapabilities"]["elicitation"] = json!({ "form": {}, "url": {} });
    meta
}

#[tokio::test]
async fn a_caller_without_a_credential_is_asked_to_connect_and_goes_on_once_it_has_one() {
    let mut stack = tenants_stack(&["c", "d"]).await;
    let dir = stack.scratch_dir().to_owned();
    let dir_c = dir.join("files-c");
    std::fs::create_dir_all(&dir_c).unwrap();
    let key = key_file(&dir, "k1", 7);
    let store = stack.store();
    let table = per_tenant_stdio(&dir.join("fixture.log"))
        + "connect_url = \"https://portal.example/connect/{upstream}?tenant={tenant}&who={principal}\"\n";
    let file = upstreams_file(&dir, "upstreams.toml", &table);
    stack.add_worker(&["--tools", "", "--upstreams", file.to_str().unwrap(), "--credentials-key", &key]).await;
    let (c, d) = (stack.client_as(0, "key-c"), stack.client_as(0, "key-d"));
    wait_for_tool(&c, "fx__whoami", PATIENCE).await;

    // A client that takes URL-mode elicitation is asked to connect, with its own names filled in.
    let call = json!({ "name": "fx__whoami", "arguments": {}, "_meta": meta_with_url_mode() });
    let reply = c.call("tools/call", call.clone()).await;
    let task = reply.result()["taskId"].as_str().expect("a task").to_owned();
    let waiting = c.wait_for_status(&task, "input_required", PATIENCE).await;
    let question = &waiting["inputRequests"]["taskgate.connect"];
    assert_eq!(question["method"], "elicitation/create", "{waiting}");
    assert_eq!(question["params"]["mode"], "url", "{waiting}");
    assert_eq!(question["params"]["url"], "https://portal.example/connect/fx?tenant=c&who=c-user", "{waiting}");

    // The tenant connects (the portal stores its credential), accepts, and the call goes on as it.
    store_credential(
        &store,
        &[("k1", 7)],
        "c",
        None,
        "fx",
        &[("who", "c-connected"), ("dir", dir_c.to_str().unwrap())],
    )
    .await;
    let answered = c.update_task(&task, json!({ "taskgate.connect": { "action": "accept" } })).await;
    assert_eq!(answered.status, 200, "{:?}", answered.body);
    let done = terminal(&c, &task).await;
    assert_eq!(done["status"], "completed", "{done}");
    let who: Value = serde_json::from_str(done["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(who["env"]["FIXTURE_WHO"], "c-connected", "{who}");

    // Accepting without connecting is asked once only: the run after it is refused, typed.
    let reply = d.call("tools/call", call).await;
    let task = reply.result()["taskId"].as_str().expect("a task").to_owned();
    d.wait_for_status(&task, "input_required", PATIENCE).await;
    d.update_task(&task, json!({ "taskgate.connect": { "action": "accept" } })).await;
    let done = terminal(&d, &task).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], -31428, "{done}");

    // A client without URL mode is never asked for what it cannot show: refused at once.
    let task = d.create_task("fx__whoami", json!({})).await;
    let done = terminal(&d, &task).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], -31428, "{done}");
}

#[tokio::test]
async fn at_most_max_instances_children_run_and_every_call_completes() {
    let mut stack = tenants_stack(&["a", "b", "c"]).await;
    let dir = stack.scratch_dir().to_owned();
    let key = key_file(&dir, "k1", 3);
    let store = stack.store();
    for tenant in ["a", "b", "c"] {
        store_credential(&store, &[("k1", 3)], tenant, None, "fx", &[("who", tenant), ("dir", "/")]).await;
    }
    // Children slow to exit, so one stopped for another's start is still there to be counted.
    let table = per_tenant_stdio(&dir.join("fixture.log")).replace("env = {", "env = { FIXTURE_LINGER_MS = \"300\",");
    let file = upstreams_file(&dir, "upstreams.toml", &table);
    let metrics = free_port();
    let metrics_addr = format!("127.0.0.1:{metrics}");
    stack
        .add_worker(&[
            "--tools",
            "",
            "--upstreams",
            file.to_str().unwrap(),
            "--credentials-key",
            &key,
            "--max-instances",
            "2",
            "--metrics-listen",
            &metrics_addr,
        ])
        .await;
    let pid = stack.workers[0].pid();
    let clients: Vec<McpClient> = ["a", "b", "c"].iter().map(|t| stack.client_as(0, &format!("key-{t}"))).collect();
    wait_for_tool(&clients[0], "fx__whoami", PATIENCE).await;

    let watching = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let most = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let watcher = {
        let (watching, most) = (watching.clone(), most.clone());
        tokio::spawn(async move {
            while watching.load(std::sync::atomic::Ordering::SeqCst) {
                most.fetch_max(fixture_children(pid), std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    for round in 0..3 {
        for (tenant, client) in ["a", "b", "c"].iter().zip(&clients) {
            let who = whoami(client).await;
            assert_eq!(who["env"]["FIXTURE_WHO"], *tenant, "round {round}: {who}");
        }
    }
    watching.store(false, std::sync::atomic::Ordering::SeqCst);
    watcher.await.unwrap();
    // The listing child, and at most two tenants' children.
    let most = most.load(std::sync::atomic::Ordering::SeqCst);
    assert!(most <= 3, "{most} fixture children at once: the listing one and at most 2 instances");
    let scrape = Scrape::of(&format!("http://{metrics_addr}/metrics")).await;
    assert!(scrape.get("taskgate_upstream_instances", &[("upstream", "fx")]) <= 2.0);
    let evicted = scrape.get("taskgate_upstream_instances_stopped_total", &[("upstream", "fx"), ("why", "lru")]);
    assert!(evicted >= 6.0, "three tenants in turn over two slots evict on every call after the first two: {evicted}");
    eventually(PATIENCE, "at most three children left", || async { (fixture_children(pid) <= 3).then_some(()) }).await;
}

/// The text of a task's result (the first content block), whatever its status.
fn result_text(done: &Value) -> String {
    done["result"]["content"][0]["text"].as_str().unwrap_or_default().to_owned()
}

async fn run(client: &McpClient, tool: &str, arguments: Value) -> Value {
    let task = client.create_task(tool, arguments).await;
    terminal(client, &task).await
}

#[tokio::test]
async fn two_tenants_share_the_filesystem_server_and_each_sees_only_its_own_directory() {
    let (node, entry) = taskgate_tests::upstream::filesystem_server();
    let mut stack = tenants_stack(&["a", "b", "c"]).await;
    let dir = stack.scratch_dir().to_owned();
    let (root_a, root_b, empty) = (dir.join("root-a"), dir.join("root-b"), dir.join("empty"));
    for (root, file) in [(&root_a, "a.txt"), (&root_b, "b.txt")] {
        std::fs::create_dir_all(root).unwrap();
        std::fs::write(root.join(file), format!("{file} of its own tenant")).unwrap();
    }
    std::fs::create_dir_all(&empty).unwrap();
    let key = key_file(&dir, "k1", 5);
    let store = stack.store();
    store_credential(&store, &[("k1", 5)], "a", None, "files", &[("root", root_a.to_str().unwrap())]).await;
    store_credential(&store, &[("k1", 5)], "b", None, "files", &[("root", root_b.to_str().unwrap())]).await;
    let table = format!(
        "[[upstream]]\nname = \"files\"\nper = \"tenant\"\ncommand = {:?}\nargs = [{:?}, {{ credential = \"root\", catalogue = {:?} }}]\n",
        node.to_str().unwrap(),
        entry.to_str().unwrap(),
        empty.to_str().unwrap()
    );
    let file = upstreams_file(&dir, "upstreams.toml", &table);
    stack.add_worker(&["--tools", "", "--upstreams", file.to_str().unwrap(), "--credentials-key", &key]).await;
    let (a, b, c) = (stack.client_as(0, "key-a"), stack.client_as(0, "key-b"), stack.client_as(0, "key-c"));
    wait_for_tool(&a, "files__read_text_file", PATIENCE).await;

    let own = run(&a, "files__read_text_file", json!({ "path": root_a.join("a.txt") })).await;
    assert_eq!(result_text(&own), "a.txt of its own tenant", "{own}");
    let own = run(&b, "files__read_text_file", json!({ "path": root_b.join("b.txt") })).await;
    assert_eq!(result_text(&own), "b.txt of its own tenant", "{own}");
    let foreign = run(&a, "files__read_text_file", json!({ "path": root_b.join("b.txt") })).await;
    assert!(result_text(&foreign).contains("Access denied"), "tenant a read tenant b's file: {foreign}");
    let allowed = run(&b, "files__list_allowed_directories", json!({})).await;
    let text = result_text(&allowed);
    assert!(text.contains(root_b.to_str().unwrap()) && !text.contains(root_a.to_str().unwrap()), "{allowed}");

    let refused = run(&c, "files__list_allowed_directories", json!({})).await;
    assert_eq!(refused["status"], "failed", "{refused}");
    assert_eq!(refused["error"]["code"], -31428, "{refused}");
    assert_eq!(refused["error"]["data"]["needs"], json!(["root"]), "{refused}");
}

#[tokio::test]
async fn each_tenants_http_calls_carry_its_own_bearer_and_no_log_or_task_shows_it() {
    let (token_a, token_b) = ("tok-a-77f31c", "tok-b-11d90e");
    let tokens = format!("{token_a}=tenant-a,{token_b}=tenant-b,tok-list=listing");
    let fixture = HttpFixture::start_oauth(FIXTURE, &[("FIXTURE_STATIC_TOKENS", tokens.as_str())]).await;
    let mut stack = tenants_stack(&["a", "b"]).await;
    let dir = stack.scratch_dir().to_owned();
    let key = key_file(&dir, "k1", 9);
    let store = stack.store();
    store_credential(&store, &[("k1", 9)], "a", None, "fx", &[("token", token_a)]).await;
    store_credential(&store, &[("k1", 9)], "b", None, "fx", &[("token", token_b)]).await;
    let table = format!(
        "[[upstream]]\nname = \"fx\"\nper = \"tenant\"\nurl = {:?}\n\
         headers = {{ Authorization = {{ credential = \"token\", prefix = \"Bearer \", catalogue = \"Bearer tok-list\" }} }}\n",
        fixture.url
    );
    let file = upstreams_file(&dir, "upstreams.toml", &table);
    stack.add_worker(&["--tools", "", "--upstreams", file.to_str().unwrap(), "--credentials-key", &key]).await;
    let (a, b) = (stack.client_as(0, "key-a"), stack.client_as(0, "key-b"));
    wait_for_tool(&a, "fx__whoami_bearer", PATIENCE).await;

    for _ in 0..2 {
        let done = run(&a, "fx__whoami_bearer", json!({})).await;
        assert_eq!(result_text(&done), "tenant-a", "{done}");
        let done = run(&b, "fx__whoami_bearer", json!({})).await;
        assert_eq!(result_text(&done), "tenant-b", "{done}");
    }
    let log = fixture_log(&fixture.log);
    let calls: Vec<&str> = log.lines().filter(|l| l.starts_with("bearer ") && l.ends_with(" tools/call")).collect();
    assert_eq!(calls.len(), 4, "{log}");
    assert_eq!(calls.iter().filter(|l| **l == "bearer tenant-a tools/call").count(), 2, "{log}");
    assert_eq!(calls.iter().filter(|l| **l == "bearer tenant-b tools/call").count(), 2, "{log}");
    assert!(!log.contains("bearer listing tools/call"), "the listing connection ran a call: {log}");
    for (name, log) in [("worker", stack.workers[0].log()), ("gateway", stack.gateways[0].log())] {
        assert!(!log.contains(token_a) && !log.contains(token_b), "the {name} log shows a token");
    }
}

#[tokio::test]
async fn a_task_that_outlives_its_access_token_completes_on_refreshed_tokens() {
    let envs = [
        ("FIXTURE_REFRESH_TOKENS", "rt-a-seed=tenant-a"),
        ("FIXTURE_TOKEN_TTL_S", "2"),
        ("FIXTURE_STATIC_TOKENS", "tok-list=listing"),
        ("FIXTURE_CLIENT_ID", "taskgate"),
    ];
    let fixture = HttpFixture::start_oauth(FIXTURE, &envs).await;
    let mut stack = tenants_stack(&["a"]).await;
    let dir = stack.scratch_dir().to_owned();
    let key = key_file(&dir, "k1", 4);
    let store = stack.store();
    store_credential(&store, &[("k1", 4)], "a", None, "fx", &[("refresh_token", "rt-a-seed")]).await;
    let table = format!(
        "[[upstream]]\nname = \"fx\"\nper = \"tenant\"\nurl = {:?}\n\
         headers = {{ Authorization = {{ credential = \"access_token\", prefix = \"Bearer \", catalogue = \"Bearer tok-list\" }} }}\n\
         oauth = {{ token_url = {:?}, client_id = \"taskgate\", refresh_before_ms = 1000 }}\n",
        fixture.url,
        fixture.token_url()
    );
    let file = upstreams_file(&dir, "upstreams.toml", &table);
    stack.add_worker(&["--tools", "", "--upstreams", file.to_str().unwrap(), "--credentials-key", &key]).await;
    let a = stack.client_as(0, "key-a");
    wait_for_tool(&a, "fx__tasked", PATIENCE).await;

    // The upstream task runs 6 s; each access token lives 2 s; the worker polls it throughout.
    let done = run(&a, "fx__tasked", json!({ "ms": 6000, "ask": false })).await;
    assert_eq!(done["status"], "completed", "{done}");
    let log = fixture_log(&fixture.log);
    let refreshes = log.lines().filter(|l| *l == "token refresh tenant-a").count();
    assert!(refreshes >= 3, "a 6 s task on 2 s tokens needs at least three: {refreshes}\n{log}");
    assert!(!log.lines().any(|l| l.starts_with("unauthorized ")), "a request went out on a stale token: {log}");
    assert!(log.lines().any(|l| l == "bearer tenant-a tasks/get"), "{log}");
    // The refreshed tokens were stored, sealed: the record now names an access token.
    let key_name = store.keys().credentials("a");
    let record: String = redis::cmd("HGET").arg(&key_name).arg("fx").query_async(&mut store.conn()).await.unwrap();
    assert!(record.contains("\"access_token\"") && !record.contains("rt-a-seed"), "{record}");
}

const JWT_SECRET: &str = "0123456789abcdef0123456789abcdef-exchange-test";
const JWT_AUDIENCE: &str = "https://mcp.example.test/mcp";
const JWT_ISSUER: &str = "https://issuer.example.test";

/// An HS256 JWT for `sub` of tenant `acme`, valid for ten minutes.
fn acme_jwt(sub: &str) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let claims = json!({
        "sub": sub, "tenant": "acme", "aud": JWT_AUDIENCE, "iss": JWT_ISSUER,
        "exp": now + 600, "nbf": now - 10, "jti": format!("{:032x}", rand::random::<u128>()),
    });
    let key = jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()).unwrap();
    jsonwebtoken::encode(&jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256), &claims, &key).unwrap()
}

/// Every value in the namespace, whatever the key's type, as text.
async fn every_value(store: &taskgate_shared::store::Store, namespace: &str) -> Vec<(String, String)> {
    let mut conn = store.conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{namespace}*")).query_async(&mut conn).await.unwrap();
    let mut values = Vec::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE").arg(&key).query_async(&mut conn).await.unwrap();
        let text = match kind.as_str() {
            "string" => {
                redis::cmd("GET").arg(&key).query_async::<Option<String>>(&mut conn).await.unwrap().unwrap_or_default()
            }
            "hash" => format!(
                "{:?}",
                redis::cmd("HGETALL").arg(&key).query_async::<Vec<String>>(&mut conn).await.unwrap_or_default()
            ),
            "list" => format!(
                "{:?}",
                redis::cmd("LRANGE").arg(&key).arg(0).arg(-1).query_async::<Vec<String>>(&mut conn).await.unwrap()
            ),
            "set" => {
                format!("{:?}", redis::cmd("SMEMBERS").arg(&key).query_async::<Vec<String>>(&mut conn).await.unwrap())
            }
            "zset" => format!(
                "{:?}",
                redis::cmd("ZRANGE").arg(&key).arg(0).arg(-1).query_async::<Vec<String>>(&mut conn).await.unwrap()
            ),
            "stream" => format!(
                "{:?}",
                redis::cmd("XRANGE").arg(&key).arg("-").arg("+").query_async::<redis::Value>(&mut conn).await.unwrap()
            ),
            _ => continue,
        };
        values.push((key, text));
    }
    values
}

/// A stack with a gateway (index 0) taking HS256 JWTs of [`acme_jwt`] and no worker, and the
/// `--credentials-key` it and the workers share.
async fn exchange_stack() -> (Stack, String) {
    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let dir = stack.scratch_dir().to_owned();
    let key = key_file(&dir, "k1", 6);
    let secret = dir.join("hs256.secret");
    std::fs::write(&secret, JWT_SECRET).unwrap();
    stack
        .add_gateway_with_auth(&[
            "--auth",
            "jwt",
            "--jwt-hs256-secret-file",
            secret.to_str().unwrap(),
            "--jwt-audience",
            JWT_AUDIENCE,
            "--jwt-issuer",
            JWT_ISSUER,
            "--resource-url",
            JWT_AUDIENCE,
            "--authorization-servers",
            JWT_ISSUER,
            "--credentials-key",
            &key,
        ])
        .await;
    (stack, key)
}

/// A `per = "principal"` entry `name` for the HTTP fixture that exchanges the caller's token at
/// the fixture's token endpoint; `extra` goes into its `oauth` table.
fn exchange_entry(name: &str, fixture: &HttpFixture, extra: &str) -> String {
    format!(
        "[[upstream]]\nname = \"{name}\"\nper = \"principal\"\nurl = {:?}\n\
         headers = {{ Authorization = {{ credential = \"access_token\", prefix = \"Bearer \", catalogue = \"Bearer tok-list\" }} }}\n\
         oauth = {{ token_url = {:?}, client_id = \"taskgate\", grant = \"token_exchange\", audience = \"https://fx.example\"{extra} }}\n",
        fixture.url,
        fixture.token_url()
    )
}

#[tokio::test]
async fn a_token_exchange_server_acts_as_each_principal_with_its_exchanged_token_and_never_sees_the_callers_own() {
    let envs = [
        ("FIXTURE_STATIC_TOKENS", "tok-list=listing"),
        ("FIXTURE_CLIENT_ID", "taskgate"),
        ("FIXTURE_TOKEN_TTL_S", "60"),
    ];
    let fixture = HttpFixture::start_oauth(FIXTURE, &envs).await;
    let (mut stack, key) = exchange_stack().await;
    let dir = stack.scratch_dir().to_owned();
    // A second gateway taking an API key of the same principal: nothing to exchange there.
    let api_keys = dir.join("api-keys");
    std::fs::write(&api_keys, format!("{} acme alice\n", hash("key-alice"))).unwrap();
    stack
        .add_gateway_with_auth(&[
            "--auth",
            "api-keys",
            "--api-keys-file",
            api_keys.to_str().unwrap(),
            "--credentials-key",
            &key,
        ])
        .await;
    let table = exchange_entry("fx", &fixture, "") + "[upstream.tool.tasked]\nttl_ms = 120000\n";
    let file = upstreams_file(&dir, "upstreams.toml", &table);
    let metrics = format!("127.0.0.1:{}", free_port());
    stack
        .add_worker(&[
            "--tools",
            "",
            "--upstreams",
            file.to_str().unwrap(),
            "--credentials-key",
            &key,
            "--metrics-listen",
            &metrics,
        ])
        .await;
    let (alice_jwt, bob_jwt) = (acme_jwt("alice"), acme_jwt("bob"));
    let (alice, bob) = (stack.client_as(0, &alice_jwt), stack.client_as(0, &bob_jwt));
    wait_for_tool(&alice, "fx__whoami_bearer", PATIENCE).await;

    // As tasks, twice each: the first exchanges, the second reuses the exchanged token.
    for _ in 0..2 {
        let done = run(&alice, "fx__whoami_bearer", json!({})).await;
        assert_eq!(result_text(&done), "exchanged:acme/alice", "{done}");
        let done = run(&bob, "fx__whoami_bearer", json!({})).await;
        assert_eq!(result_text(&done), "exchanged:acme/bob", "{done}");
    }
    // Inline (no Tasks extension): the hidden task carries the token as well.
    let params = json!({ "name": "fx__whoami_bearer", "arguments": {}, "_meta": taskgate_tests::meta_without_tasks() });
    let inline = alice.call("tools/call", params).await;
    assert_eq!(inline.result()["content"][0]["text"], "exchanged:acme/alice", "{}", inline.text);
    // A keyed call, and its retry: the same task, run once.
    let mut params = json!({ "name": "fx__whoami_bearer", "arguments": {}, "_meta": taskgate_tests::meta() });
    params["_meta"]["io.taskgate/idempotencyKey"] = json!("exchange-key-1");
    let first = alice.call("tools/call", params.clone()).await;
    let keyed = first.result()["taskId"].as_str().expect("a task").to_owned();
    let done = terminal(&alice, &keyed).await;
    assert_eq!(result_text(&done), "exchanged:acme/alice", "{done}");
    let other = bob.call("tools/call", params.clone()).await;
    let other = other.result()["taskId"].as_str().expect("a task").to_owned();
    assert_ne!(other, keyed, "another caller's key is another task");
    let done = terminal(&bob, &other).await;
    assert_eq!(result_text(&done), "exchanged:acme/bob", "{done}");
    let retry = alice.call("tools/call", params).await;
    assert_eq!(retry.result()["taskId"].as_str(), Some(keyed.as_str()), "{}", retry.text);

    let log = fixture_log(&fixture.log);
    let calls: Vec<&str> = log.lines().filter(|l| l.starts_with("bearer ") && l.ends_with(" tools/call")).collect();
    assert_eq!(calls.iter().filter(|l| **l == "bearer exchanged:acme/alice tools/call").count(), 4, "{log}");
    assert_eq!(calls.iter().filter(|l| **l == "bearer exchanged:acme/bob tools/call").count(), 3, "{log}");
    assert_eq!(calls.len(), 7, "every call went out on an exchanged token: {log}");
    let exchanges =
        |who: &str| log.lines().filter(|l| *l == format!("token exchange {who} https://fx.example")).count();
    assert_eq!(exchanges("exchanged:acme/alice"), 1, "alice's token is exchanged once and cached: {log}");
    assert_eq!(exchanges("exchanged:acme/bob"), 1, "{log}");
    assert!(!log.contains("unauthorized "), "{log}");
    let scrape = Scrape::of(&format!("http://{metrics}/metrics")).await;
    let exchanged =
        scrape.get("taskgate_upstream_credential_refreshes_total", &[("upstream", "fx"), ("outcome", "exchanged")]);
    assert_eq!(exchanged, 2.0);

    // An API key brings no token to exchange: the typed error, saying what is needed.
    let by_key = stack.client_as(1, "key-alice");
    let done = run(&by_key, "fx__whoami_bearer", json!({})).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], -31428, "{done}");
    assert_eq!(done["error"]["data"]["needs"], json!(["subject_token"]), "{done}");
    assert_eq!(done["error"]["data"]["principal"], "alice", "{done}");
    assert!(done["error"]["message"].as_str().unwrap_or_default().contains("call again"), "{done}");

    // A task whose caller's token is gone by the time it runs again (here: removed while it
    // waits for an answer) is refused the same way.
    let task = alice.create_task("fx__tasked", json!({ "ms": 100 })).await;
    let parked = alice.wait_for_status(&task, "input_required", PATIENCE).await;
    assert!(parked["inputRequests"].get("t1.go").is_some(), "{parked}");
    let store = stack.store();
    let subject_key = store.keys().task(&taskgate_shared::task::TaskId::parse(&task).unwrap()).subject;
    // It lives as long as the task (2 minutes here) or the JWT (10 minutes), whichever is less.
    let pttl = |key: String| {
        let store = store.clone();
        async move { redis::cmd("PTTL").arg(key).query_async::<i64>(&mut store.conn()).await.unwrap() }
    };
    let short = pttl(subject_key.clone()).await;
    assert!((100_000..=120_000).contains(&short), "the task's TTL bounds it: {short}");
    let keyed_subject = store.keys().task(&taskgate_shared::task::TaskId::parse(&keyed).unwrap()).subject;
    let long = pttl(keyed_subject).await;
    assert!((500_000..=600_000).contains(&long), "the JWT's lifetime bounds it: {long}");
    let removed: i64 = redis::cmd("DEL").arg(&subject_key).query_async(&mut store.conn()).await.unwrap();
    assert_eq!(removed, 1, "the gateway wrote the sealed token beside the task");
    alice.update_task(&task, json!({ "t1.go": { "action": "accept", "content": { "go": true } } })).await;
    let done = terminal(&alice, &task).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], -31428, "{done}");

    // The callers' own tokens went nowhere in clear: not to the upstream, not into a log, a
    // task or any Redis value.
    let secrets = [alice_jwt.as_str(), bob_jwt.as_str()];
    let signatures: Vec<&str> = secrets.iter().map(|t| t.rsplit('.').next().unwrap()).collect();
    let log = fixture_log(&fixture.log);
    for secret in secrets.iter().chain(&signatures) {
        assert!(!log.contains(secret), "the upstream saw a caller's own token: {log}");
    }
    let logs = [
        ("worker", stack.workers[0].log()),
        ("jwt gateway", stack.gateways[0].log()),
        ("api-key gateway", stack.gateways[1].log()),
    ];
    for (name, text) in &logs {
        for secret in secrets.iter().chain(&signatures) {
            assert!(!text.contains(secret), "the {name} log shows a caller's token");
        }
    }
    let values = every_value(&store, &stack.namespace).await;
    assert!(values.iter().any(|(k, _)| k.ends_with(":subject")), "a sealed token is kept beside a task");
    for (key, value) in &values {
        for secret in secrets.iter().chain(&signatures) {
            assert!(!value.contains(secret), "{key} holds a caller's token in clear");
        }
    }
}

#[tokio::test]
async fn a_task_outlives_its_exchanged_token_on_the_refresh_token_issued_with_it_or_on_a_new_exchange() {
    let mut envs = vec![
        ("FIXTURE_STATIC_TOKENS", "tok-list=listing"),
        ("FIXTURE_CLIENT_ID", "taskgate"),
        ("FIXTURE_TOKEN_TTL_S", "2"),
    ];
    let without_refresh = HttpFixture::start_oauth(FIXTURE, &envs).await;
    envs.push(("FIXTURE_EXCHANGE_REFRESH", "1"));
    let with_refresh = HttpFixture::start_oauth(FIXTURE, &envs).await;
    let (mut stack, key) = exchange_stack().await;
    let dir = stack.scratch_dir().to_owned();
    let table = exchange_entry("fx", &with_refresh, ", refresh_before_ms = 1000")
        + &exchange_entry("fy", &without_refresh, ", refresh_before_ms = 1000");
    let file = upstreams_file(&dir, "upstreams.toml", &table);
    stack.add_worker(&["--tools", "", "--upstreams", file.to_str().unwrap(), "--credentials-key", &key]).await;
    let alice = stack.client_as(0, &acme_jwt("alice"));
    wait_for_tool(&alice, "fx__tasked", PATIENCE).await;
    wait_for_tool(&alice, "fy__tasked", PATIENCE).await;

    // Each upstream task runs 5 s on 2 s tokens, polled throughout in one session.
    let arguments = json!({ "ms": 5000, "ask": false });
    let (refreshed, exchanged) =
        tokio::join!(run(&alice, "fx__tasked", arguments.clone()), run(&alice, "fy__tasked", arguments));
    assert_eq!(refreshed["status"], "completed", "{refreshed}");
    assert_eq!(exchanged["status"], "completed", "{exchanged}");

    let log = fixture_log(&with_refresh.log);
    let count = |log: &str, line: &str| log.lines().filter(|l| *l == line).count();
    assert_eq!(count(&log, "token exchange exchanged:acme/alice https://fx.example"), 1, "{log}");
    let refreshes = count(&log, "token refresh exchanged:acme/alice");
    assert!(refreshes >= 2, "the refresh token issued with the exchanged one renews it: {refreshes}\n{log}");
    assert!(!log.contains("unauthorized "), "a request went out on a stale token: {log}");
    assert!(log.lines().any(|l| l == "bearer exchanged:acme/alice tasks/get"), "{log}");

    let log = fixture_log(&without_refresh.log);
    let exchanges = count(&log, "token exchange exchanged:acme/alice https://fx.example");
    assert!(exchanges >= 3, "with no refresh token, the caller's token is exchanged again: {exchanges}\n{log}");
    assert!(!log.contains("token refresh"), "{log}");
    assert!(!log.contains("unauthorized "), "a request went out on a stale token: {log}");
}
