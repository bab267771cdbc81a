//! Authentication and ownership: bearer JWTs (HS256, RS256/ES256 via JWKS file or
//! URL), API keys, challenges, protected-resource metadata, and task isolation between
//! principals and tenants.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use sha2::Digest as _;
use taskgate_tests::{Stack, standard_headers};

const SECRET: &str = "0123456789abcdef0123456789abcdef-test-only";
const AUDIENCE: &str = "https://mcp.example.test/mcp";
const ISSUER: &str = "https://issuer.example.test";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/keys").join(name)
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

fn claims(sub: &str, tenant: &str) -> Value {
    json!({"sub": sub, "tenant": tenant, "aud": AUDIENCE, "iss": ISSUER, "exp": now() + 600, "nbf": now() - 10, "scope": "tasks:run other"})
}

fn hs256(claims: &Value) -> String {
    jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &EncodingKey::from_secret(SECRET.as_bytes()).unwrap())
        .unwrap()
}

fn signed(claims: &Value, alg: Algorithm, kid: &str, pem_file: &str) -> String {
    let pem = std::fs::read(fixture(pem_file)).unwrap();
    let key = match alg {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(&pem).unwrap(),
        _ => EncodingKey::from_ec_pem(&pem).unwrap(),
    };
    let mut header = Header::new(alg);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(&header, claims, &key).unwrap()
}

async fn hs256_stack() -> Stack {
    hs256_stack_with(Stack::builder().workers(1), &[]).await
}

/// A stack of `builder`'s workers and one gateway taking HS256 tokens, with `extra` options.
async fn hs256_stack_with(builder: taskgate_tests::StackBuilder, extra: &[&str]) -> Stack {
    let stack = builder.gateways(0).spawn().await;
    let secret = stack.scratch_dir().join("hs256.secret");
    std::fs::write(&secret, SECRET).unwrap();
    let mut stack = stack;
    let mut args = vec![
        "--auth",
        "jwt",
        "--jwt-hs256-secret-file",
        secret.to_str().unwrap(),
        "--jwt-audience",
        AUDIENCE,
        "--jwt-issuer",
        ISSUER,
        "--jwt-required-scopes",
        "tasks:run",
        "--resource-url",
        AUDIENCE,
        "--authorization-servers",
        ISSUER,
    ];
    args.extend_from_slice(extra);
    stack.add_gateway_with_auth(&args).await;
    stack
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_jwts_are_checked_on_every_request() {
    let stack = hs256_stack().await;
    let ok = stack.client_as(0, &hs256(&claims("alice", "acme")));
    let r = ok.call("server/discover", json!({})).await;
    assert_eq!(r.status, 200, "{}", r.text);

    let mut expired = claims("alice", "acme");
    expired["exp"] = json!(now() - 3600);
    let mut wrong_aud = claims("alice", "acme");
    wrong_aud["aud"] = json!("https://other.example.test/mcp");
    let mut wrong_iss = claims("alice", "acme");
    wrong_iss["iss"] = json!("https://evil.example.test");
    let mut not_yet = claims("alice", "acme");
    not_yet["nbf"] = json!(now() + 3600);
    let mut no_tenant = claims("alice", "acme");
    no_tenant.as_object_mut().unwrap().remove("tenant");
    let bad_signature = {
        let token = hs256(&claims("alice", "acme"));
        let (head, sig) = token.rsplit_once('.').unwrap();
        format!("{head}.{}", sig.chars().rev().collect::<String>())
    };
    let other_secret = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims("alice", "acme"),
        &EncodingKey::from_secret(b"another-secret-another-secret-another-secret").unwrap(),
    )
    .unwrap();
    let cases = [
        ("missing", None),
        ("garbage", Some("not-a-jwt".to_owned())),
        ("bad signature", Some(bad_signature)),
        ("other secret", Some(other_secret)),
        ("expired", Some(hs256(&expired))),
        ("wrong aud", Some(hs256(&wrong_aud))),
        ("wrong iss", Some(hs256(&wrong_iss))),
        ("not yet valid", Some(hs256(&not_yet))),
        ("no tenant", Some(hs256(&no_tenant))),
    ];
    for (what, token) in cases {
        let client = match &token {
            Some(t) => stack.client_as(0, t),
            None => stack.client(0),
        };
        let body = client.envelope("server/discover", json!({}));
        let r = client.send(&standard_headers(&body), body.to_string().into_bytes()).await;
        assert_eq!(r.status, 401, "{what}: {}", r.text);
        let challenge = r.header("www-authenticate").unwrap_or_default();
        assert!(challenge.starts_with("Bearer error=\"invalid_token\""), "{what}: {challenge}");
        assert!(
            challenge
                .contains("resource_metadata=\"https://mcp.example.test/.well-known/oauth-protected-resource/mcp\""),
            "{challenge}"
        );
        assert_eq!(r.body["id"], body["id"], "{what}: the JSON-RPC error carries the request id");
        assert_eq!(r.error_code(), Some(-31401));
    }

    let mut no_scope = claims("alice", "acme");
    no_scope["scope"] = json!("other");
    let r = stack.client_as(0, &hs256(&no_scope)).call("server/discover", json!({})).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.error_code(), Some(-31403));
    let challenge = r.header("www-authenticate").unwrap();
    assert!(
        challenge.contains("error=\"insufficient_scope\"") && challenge.contains("scope=\"tasks:run\""),
        "{challenge}"
    );

    // The metadata document, at both well-known forms.
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    for path in ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"] {
        let doc: Value = http.get(format!("{}{path}", ok.base())).send().await.unwrap().json().await.unwrap();
        assert_eq!(doc["resource"], AUDIENCE);
        assert_eq!(doc["authorization_servers"], json!([ISSUER]));
    }
    // Nothing secret reaches the log.
    let log = stack.gateways[0].log();
    assert!(!log.contains(SECRET) && !log.contains(&hs256(&claims("alice", "acme"))[..40]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwks_keys_verify_rs256_and_es256_and_refuse_algorithm_confusion() {
    let mut stack = Stack::builder().workers(0).gateways(0).spawn().await;
    let jwks = fixture("jwks-a.json");
    stack
        .add_gateway_with_auth(&["--auth", "jwt", "--jwks-file", jwks.to_str().unwrap(), "--jwt-audience", AUDIENCE])
        .await;
    let rs = signed(&claims("alice", "acme"), Algorithm::RS256, "rsa-a", "rsa-a.pem");
    let es = signed(&claims("bob", "acme"), Algorithm::ES256, "ec-a", "ec-a.pem");
    for token in [&rs, &es] {
        assert_eq!(stack.client_as(0, token).call("server/discover", json!({})).await.status, 200);
    }
    // A key the set does not hold, a kid that names another key type, and HS256 signed with
    // the RSA public key as secret: all refused.
    let unknown = signed(&claims("alice", "acme"), Algorithm::RS256, "rsa-b", "rsa-b.pem");
    let wrong_key = signed(&claims("alice", "acme"), Algorithm::RS256, "rsa-a", "rsa-b.pem");
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("rsa-a".into());
    let public = std::fs::read(fixture("rsa-a.pub.pem")).unwrap();
    let confused =
        jsonwebtoken::encode(&header, &claims("alice", "acme"), &EncodingKey::from_secret(&public).unwrap()).unwrap();
    for token in [unknown, wrong_key, confused] {
        assert_eq!(stack.client_as(0, &token).call("server/discover", json!({})).await.status, 401);
    }
}

/// A JWKS endpoint whose document the test can switch, counting fetches.
async fn jwks_server(document: Arc<std::sync::Mutex<String>>, fetches: Arc<AtomicUsize>) -> String {
    let app = axum::Router::new().route(
        "/jwks.json",
        axum::routing::get(move || {
            let document = document.clone();
            let fetches = fetches.clone();
            async move {
                fetches.fetch_add(1, Ordering::SeqCst);
                let body = document.lock().unwrap().clone();
                ([(axum::http::header::CONTENT_TYPE, "application/json")], body)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/jwks.json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_kid_fetches_the_jwks_again_once() {
    let document = Arc::new(std::sync::Mutex::new(std::fs::read_to_string(fixture("jwks-a.json")).unwrap()));
    let fetches = Arc::new(AtomicUsize::new(0));
    let url = jwks_server(document.clone(), fetches.clone()).await;
    let mut stack = Stack::builder().workers(0).gateways(0).spawn().await;
    stack.add_gateway_with_auth(&["--auth", "jwt", "--jwks-url", &url, "--jwt-audience", AUDIENCE]).await;
    assert_eq!(fetches.load(Ordering::SeqCst), 1, "loaded at start");

    let rs_a = signed(&claims("alice", "acme"), Algorithm::RS256, "rsa-a", "rsa-a.pem");
    assert_eq!(stack.client_as(0, &rs_a).call("server/discover", json!({})).await.status, 200);
    assert_eq!(fetches.load(Ordering::SeqCst), 1, "a known kid needs no fetch");

    // The issuer rotates in a new key: the first token naming it triggers one fetch.
    *document.lock().unwrap() = std::fs::read_to_string(fixture("jwks-ab.json")).unwrap();
    let rs_b = signed(&claims("alice", "acme"), Algorithm::RS256, "rsa-b", "rsa-b.pem");
    assert_eq!(stack.client_as(0, &rs_b).call("server/discover", json!({})).await.status, 200);
    assert_eq!(fetches.load(Ordering::SeqCst), 2);
    assert_eq!(stack.client_as(0, &rs_b).call("server/discover", json!({})).await.status, 200);
    assert_eq!(fetches.load(Ordering::SeqCst), 2, "verified tokens are cached");

    // Made-up kids cannot make the gateway fetch on every request.
    let bogus = signed(&claims("alice", "acme"), Algorithm::RS256, "nope", "rsa-b.pem");
    for _ in 0..5 {
        assert_eq!(stack.client_as(0, &bogus).call("server/discover", json!({})).await.status, 401);
    }
    assert!(fetches.load(Ordering::SeqCst) <= 3, "{}", fetches.load(Ordering::SeqCst));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_map_to_a_tenant_and_principal() {
    let mut stack = Stack::builder().gateways(0).spawn().await;
    let file = stack.scratch_dir().join("api-keys");
    let hash = |key: &str| sha2::Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect::<String>();
    std::fs::write(&file, format!("# test keys\n{} acme alice\n{} globex bob\n", hash("key-alice"), hash("key-bob")))
        .unwrap();
    stack.add_gateway_with_auth(&["--auth", "api-keys", "--api-keys-file", file.to_str().unwrap()]).await;
    let alice = stack.client_as(0, "key-alice");
    let task_id = alice.create_task("sleep", json!({"ms": 0})).await;
    assert_eq!(alice.get_task(&task_id).await.result()["taskId"], task_id.as_str());
    let r = stack.client_as(0, "key-bob").get_task(&task_id).await;
    assert_eq!(r.body["error"]["message"], "task not found");
    let r = stack.client_as(0, "key-mallory").call("server/discover", json!({})).await;
    assert_eq!(r.status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_principals_and_tenants_see_nothing_and_change_nothing() {
    let stack = hs256_stack().await;
    let owner = stack.client_as(0, &hs256(&claims("alice", "acme")));
    let colleague = stack.client_as(0, &hs256(&claims("bob", "acme")));
    let outsider = stack.client_as(0, &hs256(&claims("alice", "globex")));
    let task_id = owner.create_task("generate_report", json!({})).await;
    let parked = owner.wait_for_status(&task_id, "input_required", Duration::from_secs(15)).await;

    for intruder in [&colleague, &outsider] {
        let unknown = taskgate_shared::task::TaskId::generate(16);
        for (method, extra) in [
            ("tasks/get", json!({})),
            (
                "tasks/update",
                json!({"inputResponses": {"approve_outline": {"action": "accept", "content": {"approved": true}}}}),
            ),
            ("tasks/cancel", json!({})),
        ] {
            let reply = |id: &str| {
                let mut params = extra.clone();
                params["taskId"] = json!(id);
                let body = json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": {
                    "taskId": id, "inputResponses": params.get("inputResponses").cloned().unwrap_or(json!({})),
                    "_meta": taskgate_tests::meta()}});
                let headers = standard_headers(&body);
                async move { intruder.send(&headers, body.to_string().into_bytes()).await }
            };
            let foreign = reply(&task_id).await;
            let missing = reply(unknown.as_str()).await;
            assert_eq!((foreign.status, &foreign.text), (missing.status, &missing.text), "{method}");
        }
        let (_, mut stream) =
            intruder.open_stream("subscriptions/listen", json!({"notifications": {"taskIds": [task_id]}})).await;
        let ack = stream.next_message(Duration::from_secs(10)).await.unwrap();
        assert_eq!(ack["params"]["notifications"]["taskIds"], json!([]));
    }
    let after = owner.get_task(&task_id).await;
    assert_eq!(after.result()["status"], "input_required");
    assert_eq!(after.result()["lastUpdatedAt"], parked["lastUpdatedAt"], "nothing changed");
}

/// Bytes Redis has sent its clients so far (`INFO stats`).
async fn redis_bytes_out(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO").arg("stats").query_async(conn).await.unwrap();
    info.lines().find_map(|l| l.strip_prefix("total_net_output_bytes:")).unwrap().trim().parse().unwrap()
}

/// Gives a task a completed status and a result of about `size` bytes, straight in its record.
async fn give_big_result(stack: &Stack, id: &taskgate_shared::task::TaskId, size: usize) {
    let result = json!({"content": [{"type": "text", "text": "r".repeat(size)}]}).to_string();
    let mut conn = stack.redis.connection().await;
    let record = stack.store().keys().task(id).record;
    let _: () = redis::cmd("HSET")
        .arg(record)
        .arg("status")
        .arg("completed")
        .arg("result")
        .arg(result)
        .query_async(&mut conn)
        .await
        .unwrap();
}

/// The owner is compared before the record is read, on every path a client names a task by: a
/// foreign task gets the bytes an unknown one gets, and Redis sends the gateway nothing of it
/// (were it read, its size would show in the time the answer takes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_task_is_never_read_before_its_owner_is_compared() {
    const BIG: usize = 512 * 1024;
    let stack = Stack::builder().workers(0).gateway_args(&["--poll-limit", "off"]).spawn().await;
    let client = stack.client(0);
    let store = stack.store();
    let mallory = taskgate_shared::task::Owner { tenant: "acme".into(), principal: "mallory".into() };
    let foreign = taskgate_tests::write_task(&store, &mallory).await;
    give_big_result(&stack, &foreign, BIG).await;
    let unknown = taskgate_shared::task::TaskId::generate(4);
    let mut conn = stack.redis.connection().await;

    // The script's own reply: nothing but "not found" for another owner. (Sent with the whole
    // prelude: a superset of the functions the store sends it with, which behave the same.)
    let script = redis::Script::new(concat!(
        include_str!("../../shared/src/store/scripts/prelude.lua"),
        include_str!("../../shared/src/store/scripts/read_task.lua")
    ));
    let keys = store.keys().task(&foreign);
    let read = |tenant: &str, principal: &str| {
        let mut call = script.key(&keys.record);
        call.key(&keys.inputs).key(&keys.outcome).arg(tenant).arg(principal);
        call
    };
    let reply: Vec<redis::Value> = read("default", "anonymous").invoke_async(&mut conn).await.unwrap();
    // (Compared by shape: a failure must not print half a megabyte.)
    assert!(matches!(reply[..], [redis::Value::Int(-1)]), "nothing of the record comes back: {} items", reply.len());
    let reply: Vec<redis::Value> = read("acme", "mallory").invoke_async(&mut conn).await.unwrap();
    assert_eq!(reply[0], redis::Value::Int(1), "the owner reads it");

    let send = |method: &'static str, params: serde_json::Value| {
        let body = json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params});
        let client = &client;
        async move { client.send(&standard_headers(&body), body.to_string().into_bytes()).await }
    };
    let meta = taskgate_tests::meta();
    for (method, extra) in [("tasks/get", json!({})), ("tasks/update", json!({"inputResponses": "not an object"}))] {
        let params = |id: &str| {
            let mut params = extra.clone();
            params["taskId"] = json!(id);
            params["_meta"] = meta.clone();
            params
        };
        let missing = send(method, params(unknown.as_str())).await;
        let before = redis_bytes_out(&mut conn).await;
        let got = send(method, params(foreign.as_str())).await;
        let sent = redis_bytes_out(&mut conn).await - before;
        assert_eq!((got.status, &got.text), (missing.status, &missing.text), "{method}");
        assert!(sent < BIG as u64 / 8, "{method}: Redis sent {sent} bytes for a foreign task");
    }
    let before = redis_bytes_out(&mut conn).await;
    let (request, mut stream) =
        client.open_stream("subscriptions/listen", json!({"notifications": {"taskIds": [foreign.as_str()]}})).await;
    let ack = stream.next_message(Duration::from_secs(10)).await.unwrap();
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([]));
    let closing = stream.next_message(Duration::from_secs(10)).await.unwrap();
    assert_eq!(closing["id"], request["id"], "closed at once, as for an unknown id");
    let sent = redis_bytes_out(&mut conn).await - before;
    assert!(sent < BIG as u64 / 8, "listen: Redis sent {sent} bytes for a foreign task");

    // The measure sees a read: the caller's own big task is sent whole.
    let mine = taskgate_tests::write_task(
        &store,
        &taskgate_shared::task::Owner { tenant: "default".into(), principal: "anonymous".into() },
    )
    .await;
    give_big_result(&stack, &mine, BIG).await;
    let before = redis_bytes_out(&mut conn).await;
    assert_eq!(client.get_task(mine.as_str()).await.result()["status"], "completed");
    assert!(redis_bytes_out(&mut conn).await - before > BIG as u64);
}

/// Tenant `a/b` with principal `c`, and tenant `a` with principal `b/c`, join alike as
/// `a/b/c`; the gateway's per-principal state must still tell them apart: listen-stream slots,
/// poll pacing (a poll held because another principal was answered lately would reveal that the
/// task exists) and the subject a `requestState` is bound to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn principals_whose_names_join_alike_share_nothing() {
    // Polls held as by default (`--poll-limit hold`), `sleep` polled every 10 s.
    let builder = Stack::builder().gateway_option("--poll-tolerance", "0.5").worker_args(&[
        "--tools",
        "demo,conformance",
        "--tool-poll-ms",
        "sleep=10000",
    ]);
    let stack = hs256_stack_with(builder, &["--listen-max-streams-per-principal", "1"]).await;
    let left = stack.client_as(0, &hs256(&claims("c", "a/b")));
    let right = stack.client_as(0, &hs256(&claims("b/c", "a")));

    // Stream slots: one each.
    let left_task = left.create_task("sleep", json!({"ms": 60_000})).await;
    let right_task = right.create_task("sleep", json!({"ms": 60_000})).await;
    let (_, left_stream) =
        left.open_stream("subscriptions/listen", json!({"notifications": {"taskIds": [left_task]}})).await;
    assert_eq!(left_stream.status, 200);
    let (_, right_stream) =
        right.open_stream("subscriptions/listen", json!({"notifications": {"taskIds": [right_task]}})).await;
    assert_eq!(right_stream.status, 200, "the other principal's stream does not count against this one");

    // Poll pacing: the owner's answered poll (interval 10 s) does not hold the other's.
    assert_eq!(left.get_task(&left_task).await.result()["status"], "working");
    let started = std::time::Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(30), right.get_task(&left_task)).await.expect("answered");
    assert_eq!(r.body["error"]["message"], "task not found");
    assert!(started.elapsed() < Duration::from_secs(5), "not held: {:?}", started.elapsed());

    // requestState: bound to one of them only.
    let elicit = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
    });
    let tool = "test_input_required_result_multi_round";
    let asked = left.call("tools/call", json!({"name": tool, "_meta": elicit})).await;
    let state = asked.result()["requestState"].as_str().expect("a requestState").to_owned();
    let answers = json!({"step1": {"action": "accept", "content": {"name": "Alice"}}});
    let r = right
        .call("tools/call", json!({"name": tool, "inputResponses": answers, "requestState": state, "_meta": elicit}))
        .await;
    assert_eq!(r.error_code(), Some(-32602), "{}", r.text);
    assert_eq!(r.body["error"]["message"], "requestState principal mismatch");
    drop((left_stream, right_stream));
}
