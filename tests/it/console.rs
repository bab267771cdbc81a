//! The operator console through the real binaries: who reaches it and how far, the task
//! index it lists, the timeline every transition writes, the audited actions, CSRF, and the
//! escaping of what tools return. The browser's own view is `console_browser`.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::Digest as _;
use taskgate_tests::{McpClient, Scrape, Stack};

const PATIENCE: Duration = Duration::from_secs(20);

/// A console user: a bearer token, a login cookie, or nobody.
#[derive(Clone, Copy)]
pub(crate) enum As<'a> {
    Nobody,
    Bearer(&'a str),
    Cookie(&'a str),
}

/// Plain HTTP to the console, redirects not followed (so a test sees each 303 and cookie).
pub(crate) struct Console {
    base: String,
    http: reqwest::Client,
}

pub(crate) struct Page {
    pub(crate) status: u16,
    pub(crate) headers: reqwest::header::HeaderMap,
    pub(crate) body: String,
}

impl Page {
    pub(crate) fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }

    /// The CSRF token of the page's forms.
    pub(crate) fn csrf(&self) -> String {
        let at = self.body.find(r#"name="csrf" value=""#).expect("a form with a CSRF token") + 19;
        self.body[at..].split('"').next().unwrap().to_owned()
    }
}

impl Console {
    pub(crate) fn new(client: &McpClient) -> Self {
        let http =
            reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).build().expect("client");
        Self { base: client.base().to_owned(), http }
    }

    fn with(&self, request: reqwest::RequestBuilder, who: As<'_>) -> reqwest::RequestBuilder {
        match who {
            As::Nobody => request,
            As::Bearer(token) => request.bearer_auth(token),
            As::Cookie(cookie) => request.header("cookie", cookie),
        }
    }

    async fn read(response: reqwest::Response) -> Page {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        Page { status, headers, body: response.text().await.expect("a body") }
    }

    pub(crate) async fn get(&self, path: &str, who: As<'_>) -> Page {
        let request = self.with(self.http.get(format!("{}{path}", self.base)), who);
        Self::read(request.send().await.expect("GET")).await
    }

    /// A form POST; `origin` is the page it claims to come from (`None`: a client that says
    /// nothing, as a script would).
    pub(crate) async fn post(&self, path: &str, who: As<'_>, form: &[(&str, &str)], origin: Option<&str>) -> Page {
        let body: String = form_urlencoded::Serializer::new(String::new()).extend_pairs(form).finish();
        let mut request = self
            .with(self.http.post(format!("{}{path}", self.base)), who)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        Self::read(request.send().await.expect("POST")).await
    }

    pub(crate) fn origin(&self) -> String {
        self.base.clone()
    }

    /// The task's timeline, from the console's JSON view.
    pub(crate) async fn timeline(&self, task: &str, who: As<'_>) -> Vec<Value> {
        let page = self.get(&format!("/console/api/tasks/{task}"), who).await;
        assert_eq!(page.status, 200, "{}", page.body);
        let body: Value = serde_json::from_str(&page.body).expect("JSON");
        body["timeline"].as_array().cloned().unwrap_or_default()
    }
}

pub(crate) fn hash(key: &str) -> String {
    sha2::Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// A stack whose gateway serves the console behind API keys: `key-op` (an operator),
/// `key-admin` (acme's tenant admin), `key-alice` (acme) and `key-bob` (globex).
pub(crate) async fn console_stack(workers: usize) -> Stack {
    let mut stack = Stack::builder().gateways(0).workers(workers).spawn().await;
    let file = api_keys(&stack);
    stack.add_gateway_with_auth(&["--auth", "api-keys", "--api-keys-file", &file, "--console"]).await;
    stack
}

/// Writes the console's API keys into the stack's scratch directory; returns the file's path.
pub(crate) fn api_keys(stack: &Stack) -> String {
    let file = stack.scratch_dir().join("api-keys");
    let keys = format!(
        "{} ops op taskgate:operator\n{} acme admin taskgate:tenant-admin,tasks:run\n{} acme alice\n{} globex bob\n",
        hash("key-op"),
        hash("key-admin"),
        hash("key-alice"),
        hash("key-bob")
    );
    std::fs::write(&file, keys).unwrap();
    file.to_str().unwrap().to_owned()
}

/// Signs in through the form; returns the cookie to send back.
pub(crate) async fn sign_in(console: &Console, token: &str) -> String {
    let page = console.post("/console/login", As::Nobody, &[("token", token)], Some(&console.origin())).await;
    assert_eq!(page.status, 303, "{}", page.body);
    let cookie = page.header("set-cookie").to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(cookie.contains(attribute), "{attribute} in {cookie}");
    }
    cookie.split(';').next().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_is_off_unless_asked_for_and_costs_nothing_then() {
    let stack = Stack::builder().spawn().await;
    let console = Console::new(&stack.client(0));
    assert_eq!(console.get("/console/", As::Nobody).await.status, 404);
    assert_eq!(console.get("/console/login", As::Nobody).await.status, 404);
    // Without it, a task keeps no timeline and no index entry: Redis memory per task is as it was.
    let task = stack.client(0).create_task("noop", json!({})).await;
    stack.client(0).wait_for_status(&task, "completed", PATIENCE).await;
    let store = stack.store();
    let id = taskgate_shared::task::TaskId::parse(&task).unwrap();
    let mut conn = store.conn();
    let timeline: i64 = redis::cmd("EXISTS").arg(store.keys().task(&id).timeline).query_async(&mut conn).await.unwrap();
    let indexed: i64 =
        redis::cmd("ZCARD").arg(store.keys().task_index(id.shard(), None)).query_async(&mut conn).await.unwrap();
    assert_eq!((timeline, indexed), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_console_scopes_get_in_and_a_tenant_admin_sees_only_its_tenant() {
    let stack = console_stack(1).await;
    let console = Console::new(&stack.client(0));

    // Nobody, and a token without a console scope.
    let page = console.get("/console/", As::Nobody).await;
    assert_eq!(page.status, 401);
    assert!(page.body.contains(r#"action="/console/login""#), "the sign-in form: {}", page.body);
    assert_eq!(console.get("/console/tasks", As::Bearer("key-alice")).await.status, 403);
    assert_eq!(console.get("/console/tasks", As::Bearer("key-nobody")).await.status, 401);
    let refused = console.post("/console/login", As::Nobody, &[("token", "key-alice")], Some(&console.origin())).await;
    assert_eq!(refused.status, 401);
    assert!(refused.header("set-cookie").is_empty());
    let elsewhere =
        console.post("/console/login", As::Nobody, &[("token", "key-op")], Some("https://evil.example")).await;
    assert_eq!(elsewhere.status, 403, "a sign-in posted from another site");

    // Every page carries the strict policy.
    let cookie = sign_in(&console, "key-op").await;
    let page = console.get("/console/", As::Cookie(&cookie)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let csp = page.header("content-security-policy");
    assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(page.body.contains("ops/op"), "who is signed in");
    assert!(!page.body.contains("<script>") && !page.body.contains("style="), "no inline script or style");

    // A tenant admin: its tenant's tasks, read-only; another tenant's ids are unknown.
    let acme = stack.client_as(0, "key-alice").create_task("sleep", json!({"ms": 60_000})).await;
    let globex = stack.client_as(0, "key-bob").create_task("sleep", json!({"ms": 60_000})).await;
    let admin = sign_in(&console, "key-admin").await;
    for path in ["/console/tasks", "/console/tasks?tenant=globex"] {
        let list = console.get(path, As::Cookie(&admin)).await;
        assert_eq!(list.status, 200);
        assert!(list.body.contains(&acme) && !list.body.contains(&globex), "{path}: {}", list.body);
    }
    assert_eq!(console.get(&format!("/console/tasks/{globex}"), As::Cookie(&admin)).await.status, 404);
    assert_eq!(console.get(&format!("/console/api/tasks/{globex}"), As::Cookie(&admin)).await.status, 404);
    let own = console.get(&format!("/console/tasks/{acme}"), As::Cookie(&admin)).await;
    assert_eq!(own.status, 200);
    assert!(!own.body.contains("/cancel\""), "no actions offered to a read-only viewer");
    let csrf = console.get("/console/", As::Cookie(&admin)).await.csrf();
    let cancel = console
        .post(&format!("/console/tasks/{acme}/cancel"), As::Cookie(&admin), &[("csrf", &csrf), ("reason", "x")], None)
        .await;
    assert_eq!(cancel.status, 403, "actions need the operator scope");

    // The operator sees both tenants.
    let list = console.get("/console/tasks", As::Cookie(&cookie)).await;
    assert!(list.body.contains(&acme) && list.body.contains(&globex), "{}", list.body);
    let only_globex = console.get("/console/tasks?tenant=globex", As::Cookie(&cookie)).await;
    assert!(!only_globex.body.contains(&acme) && only_globex.body.contains(&globex));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeline_records_every_run_and_the_operators_actions_with_their_reasons() {
    let stack = console_stack(1).await;
    let console = Console::new(&stack.client(0));
    let op = As::Bearer("key-op");
    let alice = stack.client_as(0, "key-alice");

    // working -> input_required -> working -> completed, over two runs.
    let task = alice.create_task("generate_report", json!({"size": "small"})).await;
    alice.wait_for_status(&task, "input_required", PATIENCE).await;
    alice.update_task(&task, json!({"approve_outline": {"action": "accept", "content": {"approved": true}}})).await;
    alice.wait_for_status(&task, "completed", PATIENCE).await;
    let timeline = console.timeline(&task, op).await;
    let events: Vec<&str> = timeline.iter().map(|e| e["ev"].as_str().unwrap()).collect();
    assert_eq!(events, ["created", "claimed", "asked, parked", "answered", "claimed", "finished"], "{timeline:?}");
    let states: Vec<&str> = timeline.iter().map(|e| e["to"].as_str().unwrap()).collect();
    assert_eq!(states, ["working", "working", "input_required", "working", "working", "completed"]);
    let (first, second) = (timeline[1]["fence"].as_i64().unwrap(), timeline[4]["fence"].as_i64().unwrap());
    assert!(0 < first && first < second, "one fence per run, growing: {timeline:?}");
    assert!(timeline[1]["holder"].as_str().is_some_and(|h| !h.is_empty()), "{timeline:?}");
    assert_eq!(timeline[5]["holder"], timeline[4]["holder"], "the run that finished it");
    let at: Vec<i64> = timeline.iter().map(|e| e["at"].as_i64().unwrap()).collect();
    assert!(at.windows(2).all(|w| w[0] <= w[1]), "in order: {at:?}");

    // Cancel: refused without the CSRF token or from another site, then done and audited.
    let running = alice.create_task("sleep", json!({"ms": 60_000})).await;
    stack.wait_until_held(&running, PATIENCE).await;
    let page = console.get(&format!("/console/tasks/{running}"), op).await;
    let csrf = page.csrf();
    let path = format!("/console/tasks/{running}/cancel");
    let without = console.post(&path, op, &[("reason", "stuck")], Some(&console.origin())).await;
    assert_eq!(without.status, 403, "no CSRF token");
    let forged = console.post(&path, op, &[("csrf", "forged"), ("reason", "stuck")], Some(&console.origin())).await;
    assert_eq!(forged.status, 403, "a wrong CSRF token");
    let cross = console.post(&path, op, &[("csrf", &csrf), ("reason", "stuck")], Some("https://evil.example")).await;
    assert_eq!(cross.status, 403, "posted from another site");
    assert_eq!(alice.get_task(&running).await.result()["status"], "working", "nothing happened");
    let untouched = console.timeline(&running, op).await;
    assert!(untouched.iter().all(|e| e["ev"] != "cancel requested"), "no cancel was flagged: {untouched:?}");
    let done =
        console.post(&path, op, &[("csrf", &csrf), ("reason", "stuck on a dead host")], Some(&console.origin())).await;
    assert_eq!(done.status, 303, "{}", done.body);
    alice.wait_for_status(&running, "cancelled", PATIENCE).await;
    let timeline = console.timeline(&running, op).await;
    let request = timeline.iter().find(|e| e["ev"] == "cancel requested").expect("the operator's request");
    assert_eq!((request["by"].as_str(), request["why"].as_str()), (Some("ops/op"), Some("stuck on a dead host")));
    assert_eq!(timeline.last().unwrap()["to"], "cancelled", "{timeline:?}");
    let log = stack.gateways[0].log();
    assert!(
        log.lines().any(|l| l.contains("console: task cancelled") && l.contains("ops/op") && l.contains(&running)),
        "the audit log line"
    );

    // Fail: the client sees the operator's message; the timeline says who and why.
    let parked = alice.create_task("generate_report", json!({})).await;
    alice.wait_for_status(&parked, "input_required", PATIENCE).await;
    let path = format!("/console/tasks/{parked}/fail");
    let failed = console.post(&path, op, &[("csrf", &csrf), ("reason", "the approver left")], None).await;
    assert_eq!(failed.status, 303, "{}", failed.body);
    let got = alice.get_task(&parked).await.result().clone();
    assert_eq!(got["status"], "failed");
    assert!(got["error"]["message"].as_str().unwrap().contains("the approver left"), "{got}");
    assert!(got.get("inputRequests").is_none(), "{got}");
    let last = console.timeline(&parked, op).await.pop().unwrap();
    assert_eq!(
        (last["ev"].as_str(), last["by"].as_str(), last["why"].as_str()),
        (Some("failed by an operator"), Some("ops/op"), Some("the approver left"))
    );
    // Terminal: a second action changes nothing.
    let again = console.post(&path, op, &[("csrf", &csrf), ("reason", "again")], None).await;
    assert_eq!(again.status, 303);
    assert_eq!(console.timeline(&parked, op).await.len(), 4, "created, claimed, asked, failed");
    // The gateway counts the operator's fail as the transition it is, once.
    let base = stack.gateways[0].url.clone().unwrap();
    let metrics = Scrape::of(&format!("{base}/metrics")).await;
    let failed = [("from", "input_required"), ("to", "failed")];
    assert_eq!(metrics.get("taskgate_task_transitions_total", &failed), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_requests_and_arguments_are_redacted_until_revealed() {
    let stack = console_stack(1).await;
    let console = Console::new(&stack.client(0));
    let alice = stack.client_as(0, "key-alice");
    let task = alice.create_task("generate_report", json!({"size": "large"})).await;
    alice.wait_for_status(&task, "input_required", PATIENCE).await;
    let page = console.get(&format!("/console/tasks/{task}"), As::Bearer("key-op")).await;
    assert!(page.body.contains("approve_outline"), "the key is shown");
    assert!(!page.body.contains("Approve the generated report outline"), "the request's content is not");
    assert!(!page.body.contains("large"), "nor the arguments");
    let shown = console.get(&format!("/console/tasks/{task}?reveal=1"), As::Bearer("key-op")).await;
    assert!(shown.body.contains("Approve the generated report outline") && shown.body.contains("large"));
    assert!(stack.gateways[0].log().contains("sensitive fields shown"), "the reveal is logged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_list_pages_through_every_task_once_and_filters_by_state() {
    let stack = Stack::builder().gateway_args(&["--console"]).spawn().await;
    let client = stack.client(0);
    let console = Console::new(&client);
    let mut created = HashSet::new();
    for _ in 0..120 {
        created.insert(client.create_task("noop", json!({})).await);
    }
    let parked = client.create_task("generate_report", json!({})).await;
    client.wait_for_status(&parked, "input_required", PATIENCE).await;
    created.insert(parked.clone());

    assert!(console.get("/console/tasks", As::Nobody).await.body.contains("--auth none"), "the open console's banner");
    let seen = walk(&console).await;
    assert_eq!(seen.len(), created.len(), "each task once");
    assert_eq!(seen.iter().cloned().collect::<HashSet<_>>(), created);

    let waiting = console.get("/console/tasks?status=input_required", As::Nobody).await;
    assert_eq!(task_links(&waiting.body), std::slice::from_ref(&parked));
    let by_tool = console.get("/console/tasks?tool=generate_report", As::Nobody).await;
    assert_eq!(task_links(&by_tool.body), [parked]);
    assert_eq!(console.get("/console/tasks?status=bogus", As::Nobody).await.status, 400);
    assert_eq!(console.get("/console/tasks?after=garbage", As::Nobody).await.status, 400);
    // An open console answers loopback host names only: a rebound name gets nothing.
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let rebound =
        http.get(format!("{}/console/tasks", client.base())).header("host", "attacker.example").send().await.unwrap();
    assert_eq!(rebound.status(), 403, "DNS rebinding");
    let overview = console.get("/console/", As::Nobody).await;
    let tally = overview.body.split(r#"id="overview""#).nth(1).and_then(|t| t.split("</section>").next()).unwrap();
    assert!(tally.contains("<code>noop</code>") && tally.contains("<code>generate_report</code>"), "{tally}");
}

/// The task ids a list page links to, in order.
fn task_links(body: &str) -> Vec<String> {
    body.split(r#"href="/console/tasks/"#).skip(1).map(|rest| rest.split('"').next().unwrap().to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_prune_expired_tasks_from_their_shards_indexes() {
    let stack = Stack::builder().gateway_args(&["--console"]).spawn().await;
    let store = stack.store();
    let mut conn = store.conn();
    let stale = taskgate_shared::task::TaskId::generate(16);
    // An entry whose task expired long ago, in every shard's index.
    for shard in 0..16u8 {
        let key = store.keys().task_index(shard, None);
        let () = redis::cmd("ZADD").arg(&key).arg(1).arg(stale.as_str()).query_async(&mut conn).await.unwrap();
    }
    // One create in sixteen prunes (those whose id ends in 0): create until one has.
    let client = stack.client(0);
    let mut pruning = None;
    for _ in 0..400 {
        let task = client.create_task("noop", json!({})).await;
        let id = taskgate_shared::task::TaskId::parse(&task).unwrap();
        let key = store.keys().task_index(id.shard(), None);
        let score: Option<i64> = redis::cmd("ZSCORE").arg(&key).arg(&task).query_async(&mut conn).await.unwrap();
        let expires: i64 =
            redis::cmd("PEXPIRETIME").arg(store.keys().task(&id).record).query_async(&mut conn).await.unwrap();
        assert_eq!(score, Some(expires), "every task is indexed by its record's expiry");
        let stale_left: Option<i64> =
            redis::cmd("ZSCORE").arg(&key).arg(stale.as_str()).query_async(&mut conn).await.unwrap();
        assert_eq!(stale_left.is_none(), task.ends_with('0'), "only a create whose id ends in 0 prunes: {task}");
        if task.ends_with('0') {
            pruning = Some(id.shard());
            break;
        }
    }
    let shard = pruning.expect("an id ending in 0 within 400 creates");
    let other = store.keys().task_index((shard + 1) % 16, None);
    let stale_elsewhere: Option<i64> =
        redis::cmd("ZSCORE").arg(&other).arg(stale.as_str()).query_async(&mut conn).await.unwrap();
    assert_eq!(stale_elsewhere, Some(1), "a shard keeps its expired entries until one of its creates prunes");
    // Readers skip them meanwhile: the list shows live tasks only.
    let page = Console::new(&client).get("/console/tasks?status=working", As::Nobody).await;
    assert!(!page.body.contains(stale.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_tool_returns_is_shown_escaped() {
    let stack = crate::upstream::fixture_stack(console_stack(0).await).await;
    let console = Console::new(&stack.client(0));
    let alice = stack.client_as(0, "key-alice");
    let task = alice
        .create_task("fx__echo", json!({"text": "<script>alert('owned')</script><img src=x onerror=alert(1)>"}))
        .await;
    alice.wait_for_status(&task, "completed", PATIENCE).await;
    let page = console.get(&format!("/console/tasks/{task}"), As::Bearer("key-op")).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("&lt;script&gt;alert('owned')&lt;/script&gt;&lt;img"), "{}", page.body);
    assert!(!page.body.contains("<script>alert") && !page.body.contains("<img src=x"), "{}", page.body);

    // The overview names the live worker, its slots, and its upstream server's connection.
    let overview = console.get("/console/", As::Bearer("key-op")).await;
    let workers = overview.body.split(r#"id="workers""#).nth(1).expect("the workers table");
    assert!(workers.contains("0 / "), "no slot busy: {workers}");
    assert!(workers.contains(r#"class="upstream up""#) && workers.contains("<code>fx</code> 1/1"), "{workers}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_shows_the_same_timeline() {
    let stack = console_stack(1).await;
    let alice = stack.client_as(0, "key-alice");
    let task = alice.create_task("generate_report", json!({"size": "small"})).await;
    alice.wait_for_status(&task, "input_required", PATIENCE).await;
    let cli = taskgate_tests::cli::Cli::new(stack.client(0).base());

    let ran = cli.run(&["inspect", &task, "--token", "key-op", "--output", "json"]).await;
    assert_eq!(ran.code, 0, "{ran:?}");
    let body = ran.json();
    let events: Vec<&str> = body["timeline"].as_array().unwrap().iter().map(|e| e["ev"].as_str().unwrap()).collect();
    assert_eq!(events, ["created", "claimed", "asked, parked"]);
    assert_eq!(body["inputKeys"], json!(["approve_outline"]));
    assert!(!ran.stdout.contains("Approve the generated"), "no input content: {}", ran.stdout);

    let human = cli.run(&["inspect", &task, "--token", "key-op"]).await;
    assert_eq!(human.code, 0, "{human:?}");
    assert!(human.stdout.contains("asked, parked") && human.stdout.contains("input_required"), "{}", human.stdout);
    // A token without a console scope, none, and another tenant's admin.
    assert_eq!(cli.run(&["inspect", &task, "--token", "key-alice"]).await.code, 6);
    assert_eq!(cli.run(&["inspect", &task]).await.code, 6);
    let globex = stack.client_as(0, "key-bob").create_task("sleep", json!({"ms": 0})).await;
    assert_eq!(cli.run(&["inspect", &globex, "--token", "key-admin"]).await.code, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_links_to_its_trace_when_a_trace_viewer_is_configured() {
    let stack = Stack::builder()
        .gateway_args(&["--console", "--console-trace-url", "https://traces.example/trace/{trace_id}"])
        .spawn()
        .await;
    let client = stack.client(0);
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let mut meta = taskgate_tests::meta();
    meta["traceparent"] = json!(format!("00-{trace_id}-00f067aa0ba902b7-01"));
    let created = client.call("tools/call", json!({"name": "sleep", "arguments": {"ms": 0}, "_meta": meta})).await;
    let task = created.result()["taskId"].as_str().expect("a task").to_owned();
    let page = Console::new(&client).get(&format!("/console/tasks/{task}"), As::Nobody).await;
    assert!(page.body.contains(&format!(r#"href="https://traces.example/trace/{trace_id}""#)), "{}", page.body);

    // Without a traceparent there is nothing to link to.
    let untraced = client.create_task("sleep", json!({"ms": 0})).await;
    let page = Console::new(&client).get(&format!("/console/tasks/{untraced}"), As::Nobody).await;
    assert!(!page.body.contains("traces.example"), "{}", page.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_list_and_the_overview_work_on_a_cluster() {
    let stack = Stack::builder().cluster(3).gateway_args(&["--console"]).spawn().await;
    let client = stack.client(0);
    let mut created = HashSet::new();
    for _ in 0..20 {
        created.insert(client.create_task("noop", json!({})).await);
    }
    let console = Console::new(&client);
    let page = console.get("/console/tasks", As::Nobody).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(task_links(&page.body).into_iter().collect::<HashSet<_>>(), created);
    let overview = console.get("/console/", As::Nobody).await;
    assert_eq!(overview.status, 200, "{}", overview.body);
    assert!(overview.body.contains(r#"id="workers""#), "the live worker: {}", overview.body);
}

/// Walks the list from its first page by its "Next page" links; every task id shown, in order.
async fn walk(console: &Console) -> Vec<String> {
    let mut seen = Vec::new();
    let mut path = "/console/tasks".to_owned();
    loop {
        let page = console.get(&path, As::Nobody).await;
        assert_eq!(page.status, 200, "{}", page.body);
        seen.extend(task_links(&page.body));
        match page.body.split(r#"rel="next" href=""#).nth(1) {
            Some(rest) => path = rest.split('"').next().unwrap().replace("&amp;", "&"),
            None => return seen,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_that_expire_in_the_same_millisecond_are_each_listed_once() {
    // One queue shard, and every index entry moved to one expiry: more ties than a page holds.
    let stack = Stack::builder().env("TASKGATE_QUEUE_SHARDS", "1").gateway_args(&["--console"]).spawn().await;
    let client = stack.client(0);
    let mut created = HashSet::new();
    for _ in 0..130 {
        created.insert(client.create_task("noop", json!({})).await);
    }
    let store = stack.store();
    let key = store.keys().task_index(0, None);
    let mut conn = store.conn();
    let far = i64::try_from(taskgate_shared::task::now_ms()).unwrap() + 3_600_000;
    for id in &created {
        let () = redis::cmd("ZADD").arg(&key).arg("XX").arg(far).arg(id).query_async(&mut conn).await.unwrap();
    }
    let seen = walk(&Console::new(&client)).await;
    assert_eq!(seen.len(), created.len(), "each task once");
    assert_eq!(seen.into_iter().collect::<HashSet<_>>(), created);
}
