//! The upstream fixture's OAuth side (`upstream-fixture http --oauth`), which the per-identity
//! upstream tests stand on: its token endpoint refreshes (RFC 6749 §6) and exchanges (RFC 8693)
//! tokens, its `/mcp` lets in only live ones, and it records which bearer each request carried,
//! also through the real worker and gateway.

use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use taskgate_tests::eventually;
use taskgate_tests::upstream::{HttpFixture, fixture_log, wait_for_tool};

use crate::upstream::{FIXTURE, PATIENCE, Transport, run, stack_from};

/// Posts a form to the token endpoint; returns the status and the JSON answer.
async fn token(fixture: &HttpFixture, form: &[(&str, &str)]) -> (u16, Value) {
    let body: String = form_urlencoded::Serializer::new(String::new()).extend_pairs(form).finish();
    let reply = reqwest::Client::new()
        .post(fixture.token_url())
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .expect("the token endpoint");
    let status = reply.status().as_u16();
    (status, reply.json().await.expect("a JSON answer"))
}

/// An MCP `initialize` to the fixture's `/mcp` with `bearer`; returns the HTTP status.
async fn initialize(fixture: &HttpFixture, bearer: Option<&str>) -> u16 {
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "probe", "version": "1" } } });
    let mut request =
        reqwest::Client::new().post(&fixture.url).header("accept", "application/json, text/event-stream").json(&body);
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    request.send().await.expect("the fixture answers").status().as_u16()
}

/// An unsigned JWT with these claims (the fixture never verifies one).
fn jwt(claims: Value) -> String {
    let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    format!("{}.{}.unsigned", b64(&json!({ "alg": "none" })), b64(&claims))
}

#[tokio::test]
async fn the_oauth_fixture_refreshes_exchanges_and_lets_in_only_live_tokens() {
    let envs = [
        ("FIXTURE_REFRESH_TOKENS", "seed-a=alice, seed-b=bob"),
        ("FIXTURE_STATIC_TOKENS", "static-c=carol"),
        ("FIXTURE_TOKEN_TTL_S", "1"),
    ];
    let fixture = HttpFixture::start_oauth(FIXTURE, &envs).await;
    assert_eq!(initialize(&fixture, None).await, 401);
    assert_eq!(initialize(&fixture, Some("made-up")).await, 401);
    assert_eq!(initialize(&fixture, Some("static-c")).await, 200);

    let (status, issued) =
        token(&fixture, &[("grant_type", "refresh_token"), ("refresh_token", "seed-a"), ("client_id", "taskgate")])
            .await;
    assert_eq!(status, 200, "{issued}");
    assert_eq!(issued["token_type"], "Bearer", "{issued}");
    assert_eq!(issued["expires_in"], 1, "{issued}");
    let rotated = issued["refresh_token"].as_str().expect("a rotated refresh token");
    assert_ne!(rotated, "seed-a");
    let access = issued["access_token"].as_str().expect("an access token").to_owned();
    assert_eq!(initialize(&fixture, Some(&access)).await, 200);
    // Both the rotated and the old refresh token stay good.
    for refresh in [rotated, "seed-a"] {
        let (status, again) = token(&fixture, &[("grant_type", "refresh_token"), ("refresh_token", refresh)]).await;
        assert_eq!(status, 200, "{again}");
    }
    let (status, refused) = token(&fixture, &[("grant_type", "refresh_token"), ("refresh_token", "unknown")]).await;
    assert_eq!((status, refused["error"].as_str()), (400, Some("invalid_grant")), "{refused}");

    let subject = jwt(json!({ "sub": "ann", "tenant": "acme" }));
    let exchange = [
        ("grant_type", "urn:ietf:params:oauth:grant-type:token-exchange"),
        ("subject_token", subject.as_str()),
        ("subject_token_type", "urn:ietf:params:oauth:token-type:jwt"),
        ("audience", "https://upstream.example"),
    ];
    let (status, exchanged) = token(&fixture, &exchange).await;
    assert_eq!(status, 200, "{exchanged}");
    assert_eq!(exchanged["issued_token_type"], "urn:ietf:params:oauth:token-type:access_token", "{exchanged}");
    assert_eq!(initialize(&fixture, exchanged["access_token"].as_str()).await, 200);
    let mut opaque = exchange;
    opaque[1].1 = "not-a-jwt";
    let (status, refused) = token(&fixture, &opaque).await;
    assert_eq!((status, refused["error"].as_str()), (400, Some("invalid_grant")), "{refused}");

    // Past its one second the access token is refused, and the log says whose it was.
    eventually(Duration::from_secs(10), "the access token to expire", || async {
        (initialize(&fixture, Some(&access)).await == 401).then_some(())
    })
    .await;
    let log = fixture_log(&fixture.log);
    for line in [
        "bearer - initialize",
        "unauthorized made-up initialize",
        "bearer carol initialize",
        "token refresh alice",
        "bearer alice initialize",
        "token exchange exchanged:acme/ann https://upstream.example",
        "bearer exchanged:acme/ann initialize",
        "unauthorized expired:alice initialize",
    ] {
        assert!(log.lines().any(|l| l == line), "no line {line:?} in:\n{log}");
    }
}

/// Through the worker and gateway: the fixture names the identity of the worker's bearer in its
/// log and to `whoami_bearer`, and a task of its own that outlives a token is followed with
/// `tasks/get` polls under that identity.
#[tokio::test]
async fn the_oauth_fixture_names_the_bearer_the_worker_sends() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = HttpFixture::start_oauth(FIXTURE, &[("FIXTURE_STATIC_TOKENS", "upstream-secret=tenant-a")]).await;
    let token = dir.path().join("token");
    std::fs::write(&token, "upstream-secret\n").unwrap();
    let extra =
        format!("headers = {{ Authorization = {{ file = {:?}, prefix = \"Bearer \" }} }}\n", token.to_str().unwrap());
    let builder = taskgate_tests::Stack::builder();
    let (stack, _file, _log) = stack_from(builder, Transport::Http(&fixture.url), &extra, &[]).await;
    let client = stack.client(0);
    wait_for_tool(&client, "fx__whoami_bearer", PATIENCE).await;
    let done = run(&client, "fx__whoami_bearer", json!({})).await;
    assert_eq!(done["result"]["content"][0]["text"], "tenant-a", "{done}");
    let done = run(&client, "fx__tasked", json!({ "ms": 1500, "ask": false })).await;
    assert_eq!(done["result"]["content"][0]["text"], "task done without asking", "{done}");
    let log = fixture_log(&fixture.log);
    assert!(log.lines().any(|l| l == "bearer tenant-a tools/call"), "{log}");
    assert!(log.lines().filter(|l| *l == "bearer tenant-a tasks/get").count() >= 2, "{log}");
    assert!(!log.contains("unauthorized"), "{log}");
}
