//! Per-tenant upstream credentials as operators manage them: the admin API and the
//! `taskgate credentials` commands against the real gateway, who may touch which tenant, the
//! console's listing, and key rotation. A value goes in once and never comes back out: not in
//! a reply, the listing, the console, the gateway's log, or Redis in clear.

use std::time::Duration;

use serde_json::{Value, json};
use taskgate_tests::Stack;
use taskgate_tests::cli::Cli;

use crate::console::{As, Console, api_keys};

const PATIENCE: Duration = Duration::from_secs(20);
/// What the tests store: it must show up nowhere.
const SECRET: &str = "ghp-very-secret-3f9a1c";
const OTHER_SECRET: &str = "files-root-secret-77b2";

/// Writes a 32-byte key (as hex) into the stack's scratch directory; returns `ID=file:PATH`.
fn key(stack: &Stack, id: &str, byte: u8) -> String {
    let path = stack.scratch_dir().join(format!("key-{id}-{byte}"));
    std::fs::write(&path, format!("{}\n", format!("{byte:02x}").repeat(32))).unwrap();
    format!("{id}=file:{}", path.display())
}

/// A gateway behind the console's API keys (`key-op` an operator, `key-admin` acme's tenant
/// admin, `key-alice` of acme without a scope, `key-bob` of globex), with these credentials
/// keys; returns its index.
async fn gateway(stack: &mut Stack, keys: &[String]) -> usize {
    let file = api_keys(stack);
    let mut args = vec!["--auth", "api-keys", "--api-keys-file", &file, "--console"];
    for key in keys {
        args.extend(["--credentials-key", key.as_str()]);
    }
    stack.add_gateway_with_auth(&args).await
}

fn base(stack: &Stack, gateway: usize) -> String {
    stack.gateways[gateway].url.clone().expect("a gateway URL")
}

/// Plain HTTP to the admin API.
struct Admin {
    base: String,
    http: reqwest::Client,
}

impl Admin {
    fn new(stack: &Stack, gateway: usize) -> Self {
        Self { base: base(stack, gateway), http: reqwest::Client::builder().no_proxy().build().unwrap() }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("the admin API answers");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({status}): {text}")))
    }

    async fn list(&self, token: &str, query: &str) -> Value {
        let (status, body) =
            self.call(reqwest::Method::GET, &format!("/admin/credentials{query}"), Some(token), None).await;
        assert_eq!(status, 200, "{body}");
        body
    }
}

/// The raw HASH of `tenant`'s credentials, as Redis keeps it.
async fn raw(stack: &Stack, tenant: &str) -> Vec<(String, String)> {
    let store = stack.store();
    let key = store.keys().credentials(tenant);
    redis::cmd("HGETALL").arg(&key).query_async(&mut store.conn()).await.unwrap()
}

async fn log_shows(stack: &Stack, gateway: usize, what: &str) -> String {
    taskgate_tests::eventually(PATIENCE, what, || {
        let log = stack.gateways[gateway].log();
        async move { log.contains(what).then_some(log) }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_set_listed_and_deleted_and_their_values_never_shown() {
    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let k1 = key(&stack, "k1", 0x11);
    let g = gateway(&mut stack, std::slice::from_ref(&k1)).await;
    let cli = Cli::new(&base(&stack, g)).env("TASKGATE_TOKEN", "key-op").env("GH_TOKEN", SECRET);
    let value_file = stack.scratch_dir().join("root-value");
    std::fs::write(&value_file, format!("{OTHER_SECRET}\n")).unwrap();

    let set = cli
        .run(&[
            "--output",
            "json",
            "credentials",
            "set",
            "--tenant",
            "acme",
            "--upstream",
            "github",
            "--value-env",
            "token=GH_TOKEN",
        ])
        .await;
    assert_eq!(set.code, 0, "{set:?}");
    let entry = set.json();
    assert_eq!(
        (&entry["tenant"], &entry["principal"], &entry["upstream"], &entry["names"], &entry["keyId"], &entry["setBy"]),
        (&json!("acme"), &Value::Null, &json!("github"), &json!(["token"]), &json!("k1"), &json!("ops/op")),
        "{entry}"
    );
    let file_arg = format!("root={}", value_file.display());
    let set = cli
        .run(&[
            "credentials",
            "set",
            "--tenant",
            "acme",
            "--principal",
            "alice",
            "--upstream",
            "files",
            "--value-file",
            &file_arg,
            "--value",
            "mode=read-only",
        ])
        .await;
    assert_eq!(set.code, 0, "{set:?}");
    assert!(set.stdout.contains("acme/alice files") && set.stdout.contains("mode, root"), "{set:?}");
    let set =
        cli.run(&["credentials", "set", "--tenant", "globex", "--upstream", "github", "--value", "token=gx"]).await;
    assert_eq!(set.code, 0, "{set:?}");

    // The CLI's listing, as a table and as JSON: names and keys, never a value.
    let human = cli.run(&["credentials", "list"]).await;
    assert_eq!(human.code, 0, "{human:?}");
    for shown in ["acme", "globex", "github", "files", "alice", "root", "token", "k1", "ops/op"] {
        assert!(human.stdout.contains(shown), "{shown} in {human:?}");
    }
    let listed = cli.run(&["--output", "json", "credentials", "list", "--tenant", "acme"]).await.json();
    let rows = listed["credentials"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{listed}");
    assert_eq!((&rows[0]["upstream"], &rows[0]["principal"]), (&json!("files"), &json!("alice")), "{listed}");
    assert_eq!(rows[0]["names"], json!(["mode", "root"]), "{listed}");
    assert!(rows[1]["setAt"].as_str().unwrap().ends_with('Z'), "RFC 3339: {listed}");

    // A tenant admin's listing is its own tenant's.
    let admin = Admin::new(&stack, g);
    let own = admin.list("key-admin", "").await;
    let tenants: Vec<&str> =
        own["credentials"].as_array().unwrap().iter().map(|e| e["tenant"].as_str().unwrap()).collect();
    assert_eq!(tenants, ["acme", "acme"], "{own}");

    // The console's page: which upstreams have a credential, for whom, never a value.
    let console = Console::new(&stack.client(g));
    let page = console.get("/console/credentials", As::Bearer("key-op")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    for shown in ["acme", "globex", "github", "files", "alice", "root", "k1", "ops/op"] {
        assert!(page.body.contains(shown), "{shown} on the page");
    }
    let page = console.get("/console/credentials", As::Bearer("key-admin")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("acme") && !page.body.contains("globex"), "a tenant admin sees its own tenant");
    let overview = console.get("/console/", As::Bearer("key-op")).await;
    assert!(overview.body.contains(r#"href="/console/credentials""#), "the navigation links the page");

    // Delete: the principal's goes, the tenant's stays; deleting again says there was none.
    let deleted =
        cli.run(&["credentials", "delete", "--tenant", "acme", "--principal", "alice", "--upstream", "files"]).await;
    assert_eq!((deleted.code, deleted.stdout.trim()), (0, "deleted"), "{deleted:?}");
    let again = cli
        .run(&[
            "--output",
            "json",
            "credentials",
            "delete",
            "--tenant",
            "acme",
            "--principal",
            "alice",
            "--upstream",
            "files",
        ])
        .await;
    assert_eq!(again.json(), json!({"deleted": false}), "{again:?}");
    let listed = admin.list("key-op", "?tenant=acme").await;
    assert_eq!(listed["credentials"].as_array().unwrap().len(), 1, "{listed}");

    // Nowhere in clear: not in Redis, not in the gateway's log (which audits every change).
    let stored = raw(&stack, "acme").await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert!(stored.iter().all(|(_, record)| !record.contains(SECRET) && record.contains("\"token\"")), "{stored:?}");
    let log = log_shows(&stack, g, "credential.delete").await;
    assert!(log.contains("credential.set") && log.contains("taskgate::audit"), "the log audits sets");
    for secret in [SECRET, OTHER_SECRET, "read-only"] {
        assert!(!log.contains(secret), "{secret} in the gateway's log");
        assert!(!human.stdout.contains(secret) && !human.stderr.contains(secret), "{secret} printed");
    }

    // A gateway without a credentials key lists, but cannot seal.
    let keyless = gateway(&mut stack, &[]).await;
    let admin = Admin::new(&stack, keyless);
    assert_eq!(admin.list("key-op", "").await["credentials"].as_array().unwrap().len(), 2);
    let (status, body) = admin
        .call(
            reqwest::Method::PUT,
            "/admin/credentials/acme/github",
            Some("key-op"),
            Some(json!({"values": {"token": SECRET}})),
        )
        .await;
    assert_eq!((status, body), (503, json!({"error": "credentials key not configured (--credentials-key)"})));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_admin_reaches_its_own_tenant_only_and_every_refusal_is_audited() {
    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let k1 = key(&stack, "k1", 0x11);
    let g = gateway(&mut stack, &[k1]).await;
    let admin = Admin::new(&stack, g);
    let put = |tenant: &str, upstream: &str| format!("/admin/credentials/{tenant}/{upstream}");
    let body = || Some(json!({"principal": "alice", "values": {"token": SECRET}}));

    let (status, entry) = admin.call(reqwest::Method::PUT, &put("acme", "github"), Some("key-admin"), body()).await;
    assert_eq!(status, 200, "{entry}");
    assert_eq!((&entry["principal"], &entry["setBy"]), (&json!("alice"), &json!("acme/admin")));

    let (status, refused) = admin.call(reqwest::Method::PUT, &put("globex", "github"), Some("key-admin"), body()).await;
    assert_eq!(status, 403, "{refused}");
    assert!(refused["error"].as_str().unwrap().contains("own tenant"), "{refused}");
    let (status, _) = admin.call(reqwest::Method::DELETE, &put("globex", "github"), Some("key-admin"), None).await;
    assert_eq!(status, 403);
    let (status, _) =
        admin.call(reqwest::Method::GET, "/admin/credentials?tenant=globex", Some("key-admin"), None).await;
    assert_eq!(status, 403);
    let (status, refused) = admin.call(reqwest::Method::PUT, &put("acme", "github"), Some("key-alice"), body()).await;
    assert_eq!(status, 403, "a token without an admin scope: {refused}");
    assert!(raw(&stack, "globex").await.is_empty(), "nothing was written for globex");

    let response = reqwest::Client::new().get(format!("{}/admin/credentials", admin.base)).send().await.unwrap();
    assert_eq!(response.status(), 401);
    let challenge = response.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert!(challenge.starts_with("Bearer") && challenge.contains("resource_metadata"), "{challenge}");
    let (status, _) = admin.call(reqwest::Method::GET, "/admin/credentials", Some("key-nobody"), None).await;
    assert_eq!(status, 401);

    // What is refused as malformed, without echoing a value.
    let (status, refused) = admin.call(reqwest::Method::PUT, &put("acme", "GitHub"), Some("key-op"), body()).await;
    assert_eq!(status, 400, "{refused}");
    let (status, refused) = admin
        .call(reqwest::Method::PUT, &put("acme", "github"), Some("key-op"), Some(json!({"values": {"token": 7}})))
        .await;
    assert_eq!(status, 400, "{refused}");
    assert!(!refused.to_string().contains('7'), "the value is not echoed: {refused}");
    let (status, refused) = admin
        .call(
            reqwest::Method::PUT,
            &put("acme", "github"),
            Some("key-op"),
            Some(json!({"values": {"bad name": SECRET}})),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert!(!refused.to_string().contains(SECRET), "{refused}");
    let (status, refused) = admin
        .call(
            reqwest::Method::PUT,
            &put("acme", "github"),
            Some("key-op"),
            Some(json!({"values": {"token": "x".repeat(70_000)}})),
        )
        .await;
    assert_eq!(status, 413, "{refused}");

    // Through the CLI: refused as an authentication refusal (exit 6).
    let cli = Cli::new(&base(&stack, g)).env("TASKGATE_TOKEN", "key-admin");
    let ran =
        cli.run(&["credentials", "set", "--tenant", "globex", "--upstream", "github", "--value", "token=x"]).await;
    assert_eq!(ran.code, 6, "{ran:?}");
    let ran = cli.run(&["credentials", "list", "--tenant", "globex"]).await;
    assert_eq!(ran.code, 6, "{ran:?}");

    let log = log_shows(&stack, g, "credential.denied").await;
    let denied: Vec<&str> = log.lines().filter(|l| l.contains("credential.denied")).collect();
    assert!(denied.len() >= 5, "every refusal is audited: {denied:#?}");
    assert!(denied.iter().any(|l| l.contains("globex") && l.contains("acme/admin")), "{denied:#?}");
    assert!(!log.contains(SECRET), "no value in the log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_reseals_under_the_new_key_and_a_wrong_key_loses_nothing() {
    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let (k1, k2, k2_wrong, k3) =
        (key(&stack, "k1", 0x11), key(&stack, "k2", 0x22), key(&stack, "k2", 0x99), key(&stack, "k3", 0x33));
    let g = gateway(&mut stack, std::slice::from_ref(&k1)).await;
    let admin = Admin::new(&stack, g);
    for (principal, upstream) in [(None, "github"), (Some("alice"), "files")] {
        let body = json!({"principal": principal, "values": {"token": SECRET}});
        let (status, entry) = admin
            .call(reqwest::Method::PUT, &format!("/admin/credentials/acme/{upstream}"), Some("key-op"), Some(body))
            .await;
        assert_eq!((status, &entry["keyId"]), (200, &json!("k1")), "{entry}");
    }
    let key_ids = |listing: Value| -> Vec<String> {
        listing["credentials"].as_array().unwrap().iter().map(|e| e["keyId"].as_str().unwrap().to_owned()).collect()
    };

    // The new key first, the old one kept: old records still list (and open) under k1.
    stack.gateways[g].kill().await;
    let g = gateway(&mut stack, &[k2.clone(), k1.clone()]).await;
    let admin = Admin::new(&stack, g);
    assert_eq!(key_ids(admin.list("key-op", "").await), ["k1", "k1"]);
    let cli = Cli::new(&base(&stack, g)).env("TASKGATE_TOKEN", "key-op");
    let ran = cli.run(&["--output", "json", "credentials", "rewrap"]).await;
    assert_eq!((ran.code, ran.json()), (0, json!({"rewrapped": 2, "failed": []})), "{ran:?}");
    assert_eq!(key_ids(admin.list("key-op", "").await), ["k2", "k2"]);
    let ran = cli.run(&["--output", "json", "credentials", "rewrap"]).await;
    assert_eq!(ran.json(), json!({"rewrapped": 0, "failed": []}), "nothing left to do");
    let log = log_shows(&stack, g, "credential.rewrap").await;
    assert!(!log.contains(SECRET));

    // The old key can go: a gateway with k2 alone lists and seals.
    stack.gateways[g].kill().await;
    let g = gateway(&mut stack, std::slice::from_ref(&k2)).await;
    let admin = Admin::new(&stack, g);
    assert_eq!(key_ids(admin.list("key-op", "").await), ["k2", "k2"]);

    // A wrong key under k2's id: nothing opens, every record is reported, and none is touched.
    let before = raw(&stack, "acme").await;
    stack.gateways[g].kill().await;
    let g = gateway(&mut stack, &[k3, k2_wrong]).await;
    let cli = Cli::new(&base(&stack, g)).env("TASKGATE_TOKEN", "key-op");
    let ran = cli.run(&["--output", "json", "credentials", "rewrap"]).await;
    assert_eq!(ran.code, 3, "a record left behind is a failure: {ran:?}");
    let reply = ran.json();
    assert_eq!(reply["rewrapped"], 0, "{reply}");
    let failed = reply["failed"].as_array().unwrap();
    assert_eq!(failed.len(), 2, "{reply}");
    for f in failed {
        assert_eq!(f["tenant"], "acme", "{reply}");
        assert!(f["error"].as_str().unwrap().contains("does not open under key \"k2\""), "{reply}");
    }
    assert!(!ran.stdout.contains(SECRET));
    assert_eq!(raw(&stack, "acme").await, before, "the records are byte-identical");
    let human = cli.run(&["credentials", "rewrap"]).await;
    assert!(
        human.stdout.contains("not sealed again: acme github") && human.stdout.contains("acme/alice files"),
        "{human:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_credentials_key_stops_the_gateway_without_showing_the_key() {
    let stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let path = stack.scratch_dir().join("short-key");
    std::fs::write(&path, "too-short-key-material").unwrap();
    let output = tokio::process::Command::new(taskgate_tests::Binary::Gateway.path())
        .args(["--auth", "none", "--redis-url", &stack.redis_url, "--listen", "127.0.0.1:0"])
        .args(["--credentials-key", &format!("k1=file:{}", path.display())])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("bad --credentials-key") && stderr.contains("32 bytes"), "{stderr}");
    assert!(!stderr.contains("too-short-key-material"), "{stderr}");
}
