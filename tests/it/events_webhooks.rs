//! Webhook delivery of the Events extension (docs/events.md, Part 3), black-box: real
//! gateways and workers, a real redis-server, and an HTTPS receiver on loopback whose
//! certificate the gateways trust through `--events-webhook-ca-file`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use taskgate_tests::credentials::key_file;
use taskgate_tests::webhook_receiver::{Answer, Receiver, Recorded};
use taskgate_tests::{McpClient, Stack, eventually};

const PATIENCE: Duration = Duration::from_secs(60);
const EVENT: &str = "taskgate.task.status";

fn hash(key: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// A `whsec_` secret of 32 bytes of `byte`.
fn secret(byte: u8) -> String {
    format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode([byte; 32]))
}

/// Principals by API key: `alice` and `bob` of tenant `acme`, `carol` of tenant `other`.
fn api_keys(stack: &Stack) -> String {
    let file = stack.scratch_dir().join("api-keys");
    let lines: String = [("alice", "acme"), ("bob", "acme"), ("carol", "other")]
        .iter()
        .map(|(who, tenant)| format!("{} {tenant} {who}\n", hash(&format!("key-{who}"))))
        .collect();
    std::fs::write(&file, lines).unwrap();
    file.to_str().unwrap().to_owned()
}

/// The webhook flags of a gateway, with `extra` after them.
fn webhook_args(stack: &Stack, receiver: Option<&Receiver>, extra: &[&str]) -> Vec<String> {
    let key = key_file(stack.scratch_dir(), "k1", 9);
    let mut args: Vec<String> = vec![
        "--auth".into(),
        "api-keys".into(),
        "--api-keys-file".into(),
        api_keys(stack),
        "--credentials-key".into(),
        key,
        "--events".into(),
        "--events-webhooks".into(),
        "--events-webhook-ports".into(),
        "any".into(),
    ];
    if let Some(receiver) = receiver {
        args.extend(["--events-webhook-ca-file".into(), receiver.ca_file()]);
    }
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

async fn add_gateway(stack: &mut Stack, receiver: Option<&Receiver>, extra: &[&str]) -> usize {
    let args = webhook_args(stack, receiver, extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    stack.add_gateway_with_auth(&args).await
}

fn client(stack: &Stack, gateway: usize, who: &str) -> McpClient {
    stack.client_as(gateway, &format!("key-{who}"))
}

async fn subscribe(client: &McpClient, url: &str, secret: &str, arguments: Value) -> taskgate_tests::Reply {
    client
        .call(
            "events/subscribe",
            json!({ "name": EVENT, "arguments": arguments, "delivery": { "mode": "webhook", "url": url, "secret": secret } }),
        )
        .await
}

/// Standard Webhooks verification, written here apart from the gateway's signer.
fn verify(secret: &str, request: &Recorded) -> bool {
    let key = base64::engine::general_purpose::STANDARD.decode(secret.strip_prefix("whsec_").unwrap()).unwrap();
    let (Some(id), Some(timestamp), Some(signatures)) =
        (request.header("webhook-id"), request.header("webhook-timestamp"), request.header("webhook-signature"))
    else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(&request.body);
    let expected = format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes()));
    signatures.split(' ').any(|s| s == expected)
}

/// The deliveries of events (not control envelopes) to `path`, by `webhook-id`.
fn events_to(receiver: &Receiver, path: &str) -> BTreeMap<String, Recorded> {
    receiver
        .requests_to(path)
        .into_iter()
        .filter(|r| r.json().get("type").is_none())
        .filter_map(|r| Some((r.header("webhook-id")?.to_owned(), r)))
        .collect()
}

#[tokio::test]
async fn ssrf_refused_at_subscribe_and_redirects_never_followed() {
    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let receiver = Receiver::start().await;
    // No --events-webhook-allow-private: loopback is not allowed, whatever its spelling.
    let g = add_gateway(&mut stack, Some(&receiver), &[]).await;
    let alice = client(&stack, g, "alice");
    let port = receiver.port;
    for url in [
        format!("https://127.0.0.1:{port}/hook"),
        format!("https://[::1]:{port}/hook"),
        format!("https://[::ffff:127.0.0.1]:{port}/hook"),
        format!("https://10.1.2.3:{port}/hook"),
    ] {
        let reply = subscribe(&alice, &url, &secret(1), json!({})).await;
        assert_eq!(reply.error_code(), Some(-32602), "{url}: {}", reply.text);
    }
    // A name that resolves to loopback: refused by the resolver during the handshake.
    let reply = subscribe(&alice, &format!("https://localhost:{port}/hook"), &secret(1), json!({})).await;
    assert_eq!(reply.error_code(), Some(-32027), "{}", reply.text);
    assert_eq!(reply.error()["data"]["reason"], "connection_refused", "{}", reply.text);
    let reply = subscribe(&alice, &format!("http://example.com:{port}/hook"), &secret(1), json!({})).await;
    assert_eq!(reply.error_code(), Some(-32602), "{}", reply.text);
    let reply = subscribe(&alice, "https://example.com/hook", "not-a-secret", json!({})).await;
    assert_eq!(reply.error_code(), Some(-32602), "{}", reply.text);
    assert!(receiver.requests().is_empty(), "nothing reached the receiver: {:?}", receiver.requests());

    // With loopback allowed, a redirect is not followed: the handshake fails.
    let g2 = add_gateway(&mut stack, Some(&receiver), &["--events-webhook-allow-private", "127.0.0.0/8"]).await;
    let alice = client(&stack, g2, "alice");
    receiver.answer("/moved", Answer::Redirect(receiver.url("/target")));
    let reply = subscribe(&alice, &receiver.url("/moved"), &secret(1), json!({})).await;
    assert_eq!(reply.error_code(), Some(-32027), "{}", reply.text);
    assert_eq!(reply.error()["data"]["reason"], "http_4xx", "{}", reply.text);
    assert!(receiver.requests_to("/target").is_empty(), "the redirect was followed");
    // A receiver that does not echo the challenge.
    receiver.answer("/silent", Answer::NoEcho);
    let reply = subscribe(&alice, &receiver.url("/silent"), &secret(1), json!({})).await;
    assert_eq!(reply.error()["data"]["reason"], "challenge_failed", "{}", reply.text);
    // And one that does: the handshake was signed with the new secret.
    let reply = subscribe(&alice, &receiver.url("/ok"), &secret(2), json!({})).await;
    assert!(reply.result()["id"].as_str().is_some_and(|id| id.starts_with("sub_")), "{}", reply.text);
    let handshake = receiver.requests_to("/ok");
    assert_eq!(handshake.len(), 1);
    assert!(verify(&secret(2), &handshake[0]) && !verify(&secret(3), &handshake[0]));
    assert_eq!(handshake[0].header("x-mcp-subscription-id"), reply.result()["id"].as_str());
}

#[tokio::test]
async fn subscriptions_are_idempotent_capped_and_need_a_principal() {
    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let receiver = Receiver::start().await;
    let g = add_gateway(
        &mut stack,
        Some(&receiver),
        &[
            "--events-webhook-allow-private",
            "127.0.0.0/8",
            "--events-webhook-max-per-principal",
            "2",
            "--events-webhook-min-ttl-ms",
            "60000",
            "--events-delivery",
            "off",
        ],
    )
    .await;
    let alice = client(&stack, g, "alice");
    let first = subscribe(&alice, &receiver.url("/a"), &secret(1), json!({})).await;
    let id = first.result()["id"].as_str().expect("an id").to_owned();
    assert!(first.result()["refreshBefore"].is_string(), "{}", first.text);
    assert!(first.result().get("deliveryStatus").is_none(), "a new subscription: {}", first.text);
    // The same key again: the same id, a refresh with its status, and no new handshake.
    let again = alice
        .call(
            "events/subscribe",
            json!({ "name": EVENT, "arguments": {}, "ttlMs": 1, "delivery": { "mode": "webhook", "url": receiver.url("/a"), "secret": secret(4) } }),
        )
        .await;
    assert_eq!(again.result()["id"], id.as_str(), "{}", again.text);
    assert_eq!(again.result()["deliveryStatus"]["active"], true, "{}", again.text);
    assert_eq!(receiver.requests_to("/a").len(), 1, "a verified (principal, url) is not challenged again");
    // ttlMs 1 is raised to the minimum.
    let before = again.result()["refreshBefore"].as_str().unwrap();
    let granted =
        taskgate_shared::task::parse_iso8601_ms(before).unwrap() as i64 - taskgate_shared::task::now_ms() as i64;
    assert!((50_000..=61_000).contains(&granted), "{granted} ms");
    // The principal's cap.
    assert!(subscribe(&alice, &receiver.url("/b"), &secret(1), json!({})).await.result()["id"].is_string());
    let third = subscribe(&alice, &receiver.url("/c"), &secret(1), json!({})).await;
    assert_eq!(third.error_code(), Some(-32025), "{}", third.text);
    assert_eq!(third.error()["data"]["limit"], "subscriptions");
    assert_eq!(third.error()["data"]["max"], 2);
    // Another principal has a cap of its own, and a different id for the same URL.
    let bob = client(&stack, g, "bob");
    let bobs = subscribe(&bob, &receiver.url("/a"), &secret(1), json!({})).await;
    assert_ne!(bobs.result()["id"], id.as_str(), "{}", bobs.text);
    // Unsubscribe, then it is gone.
    let params = json!({ "name": EVENT, "arguments": {}, "delivery": { "url": receiver.url("/a") } });
    let gone = alice.call("events/unsubscribe", params.clone()).await;
    assert_eq!(gone.result()["resultType"], "complete", "{}", gone.text);
    assert_eq!(alice.call("events/unsubscribe", params).await.error_code(), Some(-32023));
    // Unknown event type.
    let unknown = alice
        .call("events/subscribe", json!({ "name": "nope", "delivery": { "mode": "webhook", "url": receiver.url("/a"), "secret": secret(1) } }))
        .await;
    assert_eq!(unknown.error_code(), Some(-32023), "{}", unknown.text);

    // Without authentication: Forbidden.
    let key = key_file(stack.scratch_dir(), "k1", 9);
    let anonymous = stack
        .add_gateway_with_auth(&[
            "--auth",
            "none",
            "--credentials-key",
            &key,
            "--events-webhooks",
            "--events-webhook-ports",
            "any",
        ])
        .await;
    let reply = subscribe(&stack.client(anonymous), &receiver.url("/a"), &secret(1), json!({})).await;
    assert_eq!(reply.error_code(), Some(-32024), "{}\n{}", reply.text, stack.gateways[anonymous].log());
}

/// Invariant 3 on subscriptions: an acknowledgement with an old fence is refused and moves
/// nothing; built by hand in Redis.
#[tokio::test]
async fn a_stale_fence_is_refused() {
    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let receiver = Receiver::start().await;
    let g = add_gateway(
        &mut stack,
        Some(&receiver),
        &["--events-webhook-allow-private", "127.0.0.0/8", "--events-delivery", "off"],
    )
    .await;
    let alice = client(&stack, g, "alice");
    let reply = subscribe(&alice, &receiver.url("/f"), &secret(1), json!({})).await;
    let id = reply.result()["id"].as_str().expect("an id").to_owned();
    let store = stack.store();
    let bucket = taskgate_shared::store::Store::hook_bucket_of("acme");
    let first = store.claim_hook(bucket, &id, "deliverer-a", 1).await.unwrap().expect("claimed");
    // The 1 ms lease runs out; the next claim takes it over.
    let second = taskgate_tests::eventually(Duration::from_secs(5), "the lease to run out", || async {
        store.claim_hook(bucket, &id, "deliverer-b", 60_000).await.unwrap()
    })
    .await;
    assert!(second.fence > first.fence);
    let write = taskgate_shared::store::HookWrite { position: Some("stale"), ok: true, ..Default::default() };
    let stale = store.ack_hook(bucket, &id, "deliverer-a", first.fence, &write, 3).await.unwrap();
    assert_eq!(stale, taskgate_shared::store::HookAck::Refused);
    let renewal = store.renew_hook(bucket, &id, "deliverer-a", first.fence, 60_000).await.unwrap();
    assert_eq!(renewal, taskgate_shared::store::HookRenewal::Lost);
    let mut conn = stack.redis.connection().await;
    let (record, _) = store.keys().hook_in(bucket, &id);
    let position: Option<String> = redis::cmd("HGET").arg(&record).arg("pos").query_async(&mut conn).await.unwrap();
    assert_ne!(position.as_deref(), Some("stale"), "the stale write moved nothing");
    let fresh = taskgate_shared::store::HookWrite { position: Some("fresh"), ok: true, ..Default::default() };
    let written = store.ack_hook(bucket, &id, "deliverer-b", second.fence, &fresh, 3).await.unwrap();
    assert_eq!(written, taskgate_shared::store::HookAck::Written { active: true });
    let position: Option<String> = redis::cmd("HGET").arg(&record).arg("pos").query_async(&mut conn).await.unwrap();
    assert_eq!(position.as_deref(), Some("fresh"));
}

/// The Events tests that need task events from the outbox.
mod delivered {
    use super::*;

    /// Every status change of a principal's tasks, from the tasks' own timelines: what must
    /// arrive, as (task id, status) pairs.
    pub(super) async fn expected(client: &McpClient, tasks: &[String]) -> BTreeSet<(String, String)> {
        let mut all = BTreeSet::new();
        for task in tasks {
            let status = client.get_task(task).await.result()["status"].as_str().unwrap_or_default().to_owned();
            all.insert((task.clone(), "working".to_owned()));
            all.insert((task.clone(), status));
        }
        all
    }

    pub(super) fn arrived(receiver: &Receiver, path: &str) -> BTreeSet<(String, String)> {
        events_to(receiver, path)
            .values()
            .map(|r| {
                let body = r.json();
                (
                    body["data"]["taskId"].as_str().unwrap_or_default().to_owned(),
                    body["data"]["status"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }
}

/// (a) and (d): every transition of N tasks reaches the subscription exactly once after
/// de-duplication by `webhook-id`, through an outage of the receiver (503, then refused
/// connections for at least 10 s) and the death of the gateway holding the subscription
/// mid-delivery; foreign tasks never.
#[tokio::test]
async fn every_transition_exactly_once_through_outages_and_a_killed_deliverer() {
    const TASKS: usize = 1_000;
    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let mut receiver = Receiver::start().await;
    let private = ["--events-webhook-allow-private", "127.0.0.0/8"];
    // Callers reach a gateway that does not deliver; two others deliver. The creations go as
    // fast as the machine allows: the tenant's creation rate is not what is tested here.
    let api_flags = [
        &private[..],
        &[
            "--events-delivery",
            "off",
            "--tenant-create-rps",
            "0",
            "--tenant-rps",
            "0",
            "--tenant-max-active-tasks",
            "0",
        ],
    ]
    .concat();
    let api = add_gateway(&mut stack, Some(&receiver), &api_flags).await;
    let deliverer_flags =
        [&private[..], &["--events-webhook-lease-ms", "2000", "--events-webhook-retry-base-ms", "200"]].concat();
    let deliverers = [
        add_gateway(&mut stack, Some(&receiver), &deliverer_flags).await,
        add_gateway(&mut stack, Some(&receiver), &deliverer_flags).await,
    ];
    stack.add_worker(&[]).await;
    let alice = client(&stack, api, "alice");
    let reply = subscribe(&alice, &receiver.url("/alice"), &secret(7), json!({})).await;
    let id = reply.result()["id"].as_str().expect("an id").to_owned();
    // Bob (same tenant) and Carol (another) run tasks at the same time.
    let bob = client(&stack, api, "bob");
    let carol = client(&stack, api, "carol");
    let mut mine = Vec::new();
    let mut foreign = Vec::new();
    let mut down_since = None;
    for i in 0..TASKS {
        mine.push(alice.create_task("sleep", json!({ "ms": 0 })).await);
        if i.is_multiple_of(20) {
            foreign.push(bob.create_task("sleep", json!({ "ms": 0 })).await);
            foreign.push(carol.create_task("sleep", json!({ "ms": 0 })).await);
        }
        if i == TASKS / 4 {
            receiver.answer_all(Answer::Status(503));
        }
        if i == TASKS / 3 {
            receiver.down();
            down_since = Some(tokio::time::Instant::now());
        }
        if i == TASKS / 2 {
            // The receiver stays down for at least 10 s, and until the deliverer has seen it
            // fail (the subscription's last error is a refused connection).
            let since = down_since.expect("down since a third of the run");
            eventually(PATIENCE, "a 10 s outage the deliverer has seen", || async {
                let seen = last_error_of(&stack, "acme", &id).await.as_deref() == Some("connection_refused");
                (seen && since.elapsed() >= Duration::from_secs(10)).then_some(())
            })
            .await;
            receiver.up().await;
            receiver.answer_all(Answer::Accept);
            // The gateway holding the subscription dies mid-delivery; the other takes over.
            let holder = holder_of(&stack, "acme", &id).await;
            let held_by = deliverers
                .into_iter()
                .find(|g| stack.gateways[*g].log().contains(&holder))
                .expect("one of the deliverers holds the subscription");
            stack.gateways[held_by].kill().await;
        }
    }
    for task in &mine {
        alice.wait_for_status(task, "completed", PATIENCE).await;
    }
    let want = delivered::expected(&alice, &mine).await;
    eventually(PATIENCE, "every transition delivered", || async {
        let got = delivered::arrived(&receiver, "/alice");
        (got.is_superset(&want)).then_some(())
    })
    .await;
    let got = delivered::arrived(&receiver, "/alice");
    assert_eq!(got, want, "exactly the principal's own transitions, once each after de-duplication");
    assert_eq!(events_to(&receiver, "/alice").len(), want.len(), "one webhook-id per transition");
    for request in receiver.requests_to("/alice") {
        assert!(verify(&secret(7), &request), "every delivery verifies");
        assert!(!verify(&secret(8), &request), "not under another secret");
        let mut flipped = request.clone();
        let mut body = flipped.body.to_vec();
        body[0] ^= 1;
        flipped.body = body.into();
        assert!(!verify(&secret(7), &flipped), "a flipped body byte fails");
    }
    let foreign: BTreeSet<&String> = foreign.iter().collect();
    assert!(got.iter().all(|(task, _)| !foreign.contains(task)), "no foreign task's event");
}

/// The last delivery error recorded on subscription `id` of `tenant`, if any.
async fn last_error_of(stack: &Stack, tenant: &str, id: &str) -> Option<String> {
    let store = stack.store();
    let (record, _) = store.keys().hook_in(taskgate_shared::store::Store::hook_bucket_of(tenant), id);
    let mut conn = stack.redis.connection().await;
    redis::cmd("HGET").arg(&record).arg("last_err").query_async(&mut conn).await.ok().flatten()
}

/// The deliverer holding subscription `id` of `tenant` now (its record's `holder`).
async fn holder_of(stack: &Stack, tenant: &str, id: &str) -> String {
    let store = stack.store();
    let (record, _) = store.keys().hook_in(taskgate_shared::store::Store::hook_bucket_of(tenant), id);
    let conn = stack.redis.connection().await;
    eventually(PATIENCE, "a deliverer to hold the subscription", || {
        let (record, mut conn) = (record.clone(), conn.clone());
        async move {
            let holder: Option<String> =
                redis::cmd("HGET").arg(&record).arg("holder").query_async(&mut conn).await.ok()?;
            holder.filter(|h| !h.is_empty())
        }
    })
    .await
}

/// (e): with shortened retries, an event that always fails is dead-lettered after the
/// attempts, three in a row suspend the subscription; a 410 dead-letters at once.
#[tokio::test]
async fn dead_letters_and_suspension() {
    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let receiver = Receiver::start().await;
    let flags = [
        "--events-webhook-allow-private",
        "127.0.0.0/8",
        "--events-webhook-retry-base-ms",
        "20",
        "--events-webhook-max-attempts",
        "3",
    ];
    let g = add_gateway(&mut stack, Some(&receiver), &flags).await;
    stack.add_worker(&[]).await;
    let alice = client(&stack, g, "alice");
    let reply = subscribe(&alice, &receiver.url("/failing"), &secret(5), json!({})).await;
    let id = reply.result()["id"].as_str().expect("an id").to_owned();
    receiver.answer("/failing", Answer::Status(500));
    let task = alice.create_task("sleep", json!({ "ms": 0 })).await;
    alice.wait_for_status(&task, "completed", PATIENCE).await;
    // Two events (working, completed), three attempts each; then a third task event suspends.
    let second = alice.create_task("sleep", json!({ "ms": 0 })).await;
    alice.wait_for_status(&second, "completed", PATIENCE).await;
    let store = stack.store();
    let bucket = taskgate_shared::store::Store::hook_bucket_of("acme");
    let (record, dead) = store.keys().hook_in(bucket, &id);
    let mut conn = stack.redis.connection().await;
    eventually(PATIENCE, "the subscription suspended", || {
        let (record, mut conn) = (record.clone(), conn.clone());
        async move {
            let active: Option<String> =
                redis::cmd("HGET").arg(&record).arg("active").query_async(&mut conn).await.ok()?;
            (active.as_deref() == Some("0")).then_some(())
        }
    })
    .await;
    let letters: Vec<String> = redis::cmd("LRANGE").arg(&dead).arg(0).arg(-1).query_async(&mut conn).await.unwrap();
    assert_eq!(letters.len(), 3, "{letters:?}");
    for letter in &letters {
        let letter: Value = serde_json::from_str(letter).unwrap();
        assert_eq!(letter["reason"], "http_5xx");
        assert_eq!(letter["attempts"], 3);
    }
    let attempts = events_to(&receiver, "/failing").len();
    assert_eq!(attempts, 3, "three distinct events tried, then nothing more");
    // A refresh resumes it; a 410 dead-letters at once without suspending.
    receiver.answer("/failing", Answer::Status(410));
    let refreshed = subscribe(&alice, &receiver.url("/failing"), &secret(5), json!({})).await;
    assert_eq!(refreshed.result()["deliveryStatus"]["active"], false, "{}", refreshed.text);
    let third = alice.create_task("sleep", json!({ "ms": 0 })).await;
    alice.wait_for_status(&third, "completed", PATIENCE).await;
    eventually(PATIENCE, "the 410s dead-lettered", || {
        let (dead, mut conn) = (dead.clone(), conn.clone());
        async move {
            let letters: Vec<String> =
                redis::cmd("LRANGE").arg(&dead).arg(0).arg(-1).query_async(&mut conn).await.ok()?;
            (letters.iter().filter(|l| l.contains("\"gone\"")).count() >= 2).then_some(())
        }
    })
    .await;
    let active: String = redis::cmd("HGET").arg(&record).arg("active").query_async(&mut conn).await.unwrap();
    assert_eq!(active, "1", "a 410 does not count toward suspension");
}

/// Invariant 13: a subscription left held by a deliverer that died (its lease run out) is
/// claimed by a fresh deliverer on an idle fleet; built by hand in Redis.
#[tokio::test]
async fn a_dead_deliverers_subscription_is_taken_over_on_an_idle_fleet() {
    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let receiver = Receiver::start().await;
    let private = ["--events-webhook-allow-private", "127.0.0.0/8"];
    let api = add_gateway(&mut stack, Some(&receiver), &[&private[..], &["--events-delivery", "off"]].concat()).await;
    let alice = client(&stack, api, "alice");
    let reply = subscribe(&alice, &receiver.url("/r"), &secret(1), json!({})).await;
    let id = reply.result()["id"].as_str().expect("an id").to_owned();
    let store = stack.store();
    let bucket = taskgate_shared::store::Store::hook_bucket_of("acme");
    // A deliverer claimed it, then died: its lease (1 ms) has run out, and nobody renews it.
    let dead = store.claim_hook(bucket, &id, "gw-dead", 1).await.unwrap().expect("claimed");
    assert_eq!(holder_of(&stack, "acme", &id).await, "gw-dead");
    let fresh =
        add_gateway(&mut stack, Some(&receiver), &[&private[..], &["--events-webhook-lease-ms", "2000"]].concat())
            .await;
    let holder = eventually(PATIENCE, "a live deliverer to take the subscription over", || async {
        let holder = holder_of(&stack, "acme", &id).await;
        (holder != "gw-dead").then_some(holder)
    })
    .await;
    assert!(stack.gateways[fresh].log().contains(&holder), "the new gateway holds it");
    // And it keeps it: renewals hold the lease with the newer fence; the dead one's is stale.
    let write = taskgate_shared::store::HookWrite { position: Some("stale"), ..Default::default() };
    let stale = store.ack_hook(bucket, &id, "gw-dead", dead.fence, &write, 3).await.unwrap();
    assert_eq!(stale, taskgate_shared::store::HookAck::Refused);
    let index = store.keys().hook_index(bucket);
    let conn = stack.redis.connection().await;
    let lease = |conn: redis::aio::MultiplexedConnection| {
        let (index, id) = (index.clone(), id.clone());
        async move {
            let mut conn = conn;
            let score: Option<f64> = redis::cmd("ZSCORE").arg(&index).arg(&id).query_async(&mut conn).await.ok()?;
            score
        }
    };
    let first = lease(conn.clone()).await.expect("a lease");
    eventually(PATIENCE, "the lease renewed", || {
        let conn = conn.clone();
        async move { lease(conn).await.filter(|now| *now > first).map(|_| ()) }
    })
    .await;
    assert_eq!(holder_of(&stack, "acme", &id).await, holder, "renewed by the same holder, not lost");
}

/// The console's webhooks page: a subscription whose receiver always fails is listed as
/// suspended with its dead letters, by host (never the URL's path or query, nor the secret);
/// a tenant admin of another tenant does not see it; an operator ends it, audited.
#[tokio::test]
async fn the_console_lists_subscriptions_with_dead_letters_and_an_operator_ends_one() {
    use crate::console::{As, Console};

    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let receiver = Receiver::start().await;
    let flags = [
        "--events-webhook-allow-private",
        "127.0.0.0/8",
        "--events-webhook-retry-base-ms",
        "20",
        "--events-webhook-max-attempts",
        "3",
        "--console",
    ];
    let args = webhook_args(&stack, Some(&receiver), &flags);
    // The console's scopes: an operator, and a tenant admin of another tenant than alice's.
    let keys: String =
        [("alice", "acme", ""), ("op", "ops", "taskgate:operator"), ("admin", "other", "taskgate:tenant-admin")]
            .iter()
            .map(|(who, tenant, scopes)| {
                format!("{} {tenant} {who} {scopes}", hash(&format!("key-{who}"))).trim_end().to_owned() + "\n"
            })
            .collect();
    std::fs::write(stack.scratch_dir().join("api-keys"), keys).unwrap();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let g = stack.add_gateway_with_auth(&args).await;
    stack.add_worker(&[]).await;
    let alice = client(&stack, g, "alice");
    let path = "/hooks/tok-PATHSECRET7";
    let url = receiver.url(&format!("{path}?key=QUERYSECRET7"));
    let hook_secret = secret(6);
    let reply = subscribe(&alice, &url, &hook_secret, json!({})).await;
    let id = reply.result()["id"].as_str().unwrap_or_else(|| panic!("an id: {}", reply.text)).to_owned();
    receiver.answer(path, Answer::Status(500));
    for _ in 0..2 {
        let task = alice.create_task("sleep", json!({ "ms": 0 })).await;
        alice.wait_for_status(&task, "completed", PATIENCE).await;
    }

    let console = Console::new(&alice);
    let op = As::Bearer("key-op");
    let page = eventually(PATIENCE, "the console shows it suspended", || {
        let console = &console;
        async move {
            let page = console.get("/console/webhooks", op).await;
            (page.status == 200 && page.body.contains("suspended")).then_some(page)
        }
    })
    .await;
    let body = &page.body;
    assert!(body.contains(&id), "{body}");
    assert!(body.contains(&receiver.url("")), "the scheme, host and port: {body}");
    for hidden in
        ["PATHSECRET7", "QUERYSECRET7", "/hooks/", hook_secret.as_str(), hook_secret.trim_start_matches("whsec_")]
    {
        assert!(!body.contains(hidden), "{hidden} shown: {body}");
    }
    // The dead letters, by event id, as the deliverer wrote them.
    let store = stack.store();
    let (_, dead) = store.keys().hook_in(taskgate_shared::store::Store::hook_bucket_of("acme"), &id);
    let mut conn = stack.redis.connection().await;
    let letters: Vec<String> = redis::cmd("LRANGE").arg(&dead).arg(0).arg(-1).query_async(&mut conn).await.unwrap();
    assert_eq!(letters.len(), 3, "{letters:?}");
    for letter in &letters {
        let letter: Value = serde_json::from_str(letter).unwrap();
        let event_id = letter["eventId"].as_str().unwrap();
        assert!(body.contains(event_id), "dead letter {event_id} listed: {body}");
    }
    assert!(body.contains("http_5xx"), "the reason: {body}");

    // Another tenant's admin sees nothing of it, and may not end it.
    let admin = As::Bearer("key-admin");
    let theirs = console.get("/console/webhooks", admin).await;
    assert_eq!(theirs.status, 200, "{}", theirs.body);
    assert!(!theirs.body.contains(&id) && !theirs.body.contains("acme"), "{}", theirs.body);
    let end = format!("/console/webhooks/{id}/end");
    let csrf = page.csrf();
    let admins_csrf = theirs.csrf();
    let refused = console
        .post(&end, admin, &[("csrf", &admins_csrf), ("tenant", "acme"), ("reason", "x")], Some(&console.origin()))
        .await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let forged = console
        .post(&end, op, &[("csrf", "forged"), ("tenant", "acme"), ("reason", "x")], Some(&console.origin()))
        .await;
    assert_eq!(forged.status, 403, "a wrong CSRF token");

    // The operator ends it: gone for its subscriber, off the page, and in the audit log.
    let ended = console
        .post(&end, op, &[("csrf", &csrf), ("tenant", "acme"), ("reason", "receiver is gone")], Some(&console.origin()))
        .await;
    assert_eq!(ended.status, 303, "{}", ended.body);
    let params = json!({ "name": EVENT, "arguments": {}, "delivery": { "url": url } });
    let gone = alice.call("events/unsubscribe", params).await;
    assert_eq!(gone.error_code(), Some(-32023), "{}", gone.text);
    let after = console.get("/console/webhooks", op).await;
    assert!(!after.body.contains(&id), "{}", after.body);
    let log = stack.gateways[0].log();
    assert!(
        log.lines()
            .any(|l| l.contains("console: webhook subscription ended") && l.contains("ops/op") && l.contains(&id)),
        "the audit log line"
    );
}

/// A subscription whose sealed secret does not open on its deliverer (a damaged record, or a
/// replica whose key ring lacks the sealing key) is parked with the cause on its record rather
/// than claimed and dropped on every pass, and nothing is sent unsigned; built by hand in Redis.
#[tokio::test]
async fn a_secret_that_does_not_open_parks_the_subscription() {
    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let receiver = Receiver::start().await;
    let private = ["--events-webhook-allow-private", "127.0.0.0/8"];
    let api = add_gateway(&mut stack, Some(&receiver), &[&private[..], &["--events-delivery", "off"]].concat()).await;
    stack.add_worker(&[]).await;
    let alice = client(&stack, api, "alice");
    let reply = subscribe(&alice, &receiver.url("/p"), &secret(1), json!({})).await;
    let id = reply.result()["id"].as_str().expect("an id").to_owned();
    let store = stack.store();
    let bucket = taskgate_shared::store::Store::hook_bucket_of("acme");
    let (record, _) = store.keys().hook_in(bucket, &id);
    let index = store.keys().hook_index(bucket);
    let mut conn = stack.redis.connection().await;
    let () =
        redis::cmd("HSET").arg(&record).arg("secret").arg(r#"{"damaged":true}"#).query_async(&mut conn).await.unwrap();
    let task = alice.create_task("sleep", json!({ "ms": 0 })).await;
    alice.wait_for_status(&task, "completed", PATIENCE).await;
    let deliverer =
        add_gateway(&mut stack, Some(&receiver), &[&private[..], &["--events-webhook-lease-ms", "2000"]].concat())
            .await;
    eventually(PATIENCE, "the cause written on the record", || {
        let (mut conn, record) = (conn.clone(), record.clone());
        async move {
            let cause: Option<String> =
                redis::cmd("HGET").arg(&record).arg("last_err").query_async(&mut conn).await.ok()?;
            (cause.as_deref() == Some("secret")).then_some(())
        }
    })
    .await;
    let now = taskgate_shared::task::now_ms() as f64;
    let parked: f64 = redis::cmd("ZSCORE").arg(&index).arg(&id).query_async(&mut conn).await.unwrap();
    assert!(parked > now + 30_000.0, "parked for a while, not free at once: {parked} at {now}");
    let holder: Option<String> = redis::cmd("HGET").arg(&record).arg("holder").query_async(&mut conn).await.unwrap();
    assert_eq!(holder, None, "released");
    assert!(events_to(&receiver, "/p").is_empty(), "nothing sent without a signature");
    assert!(stack.gateways[deliverer].log().contains("parked"), "{}", stack.gateways[deliverer].log());
}

/// A dead letter written again after the first write's reply was lost is kept once and
/// counted once toward suspension; another letter is counted.
#[tokio::test]
async fn a_dead_letter_sent_again_is_kept_once() {
    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let receiver = Receiver::start().await;
    let private = ["--events-webhook-allow-private", "127.0.0.0/8"];
    let api = add_gateway(&mut stack, Some(&receiver), &[&private[..], &["--events-delivery", "off"]].concat()).await;
    let alice = client(&stack, api, "alice");
    let reply = subscribe(&alice, &receiver.url("/d"), &secret(1), json!({})).await;
    let id = reply.result()["id"].as_str().expect("an id").to_owned();
    let store = stack.store();
    let bucket = taskgate_shared::store::Store::hook_bucket_of("acme");
    let claim = store.claim_hook(bucket, &id, "gw-x", 60_000).await.unwrap().expect("claimed");
    let (record, dead) = store.keys().hook_in(bucket, &id);
    let mut conn = stack.redis.connection().await;
    let letters = [r#"{"eventId":"e1","reason":"timeout"}"#, r#"{"eventId":"e2","reason":"timeout"}"#];
    for (letter, run) in [(letters[0], "1"), (letters[0], "1"), (letters[1], "2")] {
        let write = taskgate_shared::store::HookWrite { dead_letter: Some((letter, true)), ..Default::default() };
        let written = store.ack_hook(bucket, &id, "gw-x", claim.fence, &write, 3).await.unwrap();
        assert_eq!(written, taskgate_shared::store::HookAck::Written { active: true });
        let counted: String = redis::cmd("HGET").arg(&record).arg("dead_run").query_async(&mut conn).await.unwrap();
        assert_eq!(counted, run);
    }
    let kept: Vec<String> = redis::cmd("LRANGE").arg(&dead).arg(0).arg(-1).query_async(&mut conn).await.unwrap();
    assert_eq!(kept, [letters[1], letters[0]]);
}

/// What the Standard Webhooks reference library (Python, pinned by scripts/interop-clients)
/// says of each `(secret, request)`: true when it verifies.
async fn reference_verifies(cases: &[(String, Recorded)]) -> Vec<bool> {
    let input: Vec<Value> = cases
        .iter()
        .map(|(secret, request)| {
            json!({
                "secret": secret,
                "body": base64::engine::general_purpose::STANDARD.encode(&request.body),
                "headers": request.headers,
            })
        })
        .collect();
    let script = "import base64, json, sys\n\
        from standardwebhooks.webhooks import Webhook, WebhookVerificationError\n\
        out = []\n\
        for case in json.load(sys.stdin):\n\
        \x20   try:\n\
        \x20       Webhook(case['secret']).verify(base64.b64decode(case['body']), case['headers'])\n\
        \x20       out.append(True)\n\
        \x20   except WebhookVerificationError:\n\
        \x20       out.append(False)\n\
        print(json.dumps(out))\n";
    let mut child = tokio::process::Command::new(taskgate_tests::interop::python())
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python runs");
    let mut stdin = child.stdin.take().expect("stdin");
    tokio::io::AsyncWriteExt::write_all(&mut stdin, Value::from(input).to_string().as_bytes()).await.unwrap();
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    assert!(output.status.success(), "the reference verifier ran");
    serde_json::from_slice(&output.stdout).expect("a JSON list of verdicts")
}

/// Deliveries verify with the Standard Webhooks reference library, which rejects another
/// secret and a flipped body byte; after a refresh with a new secret, deliveries carry two
/// signatures during the rotation grace, each verifying on its own.
#[tokio::test]
async fn the_reference_library_verifies_and_a_refresh_signs_with_both_secrets() {
    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let receiver = Receiver::start().await;
    let g = add_gateway(&mut stack, Some(&receiver), &["--events-webhook-allow-private", "127.0.0.0/8"]).await;
    stack.add_worker(&[]).await;
    let alice = client(&stack, g, "alice");
    let reply = subscribe(&alice, &receiver.url("/v"), &secret(3), json!({})).await;
    let id = reply.result()["id"].as_str().expect("an id").to_owned();
    let delivered = |task: String| {
        let receiver = &receiver;
        async move {
            eventually(PATIENCE, "the task's completion delivered", || {
                let task = task.clone();
                async move {
                    events_to(receiver, "/v").into_values().find(|r| {
                        r.json()["data"]["taskId"] == task.as_str() && r.json()["data"]["status"] == "completed"
                    })
                }
            })
            .await
        }
    };
    let before = alice.create_task("sleep", json!({ "ms": 0 })).await;
    let first = delivered(before).await;
    let refreshed = subscribe(&alice, &receiver.url("/v"), &secret(4), json!({})).await;
    assert_eq!(refreshed.result()["id"], id.as_str(), "a refresh keeps the id");
    let after = alice.create_task("sleep", json!({ "ms": 0 })).await;
    let second = delivered(after).await;

    let mut flipped = first.clone();
    let mut body = flipped.body.to_vec();
    body[0] ^= 1;
    flipped.body = body.into();
    let cases = [
        (secret(3), first.clone()),
        (secret(5), first.clone()),
        (secret(3), flipped),
        (secret(4), second.clone()),
        (secret(3), second.clone()),
    ];
    assert_eq!(reference_verifies(&cases).await, [true, false, false, true, true]);
    assert_eq!(first.header("webhook-signature").unwrap().split(' ').count(), 1, "one secret, one signature");
    assert_eq!(second.header("webhook-signature").unwrap().split(' ').count(), 2, "old and new during the grace");
    assert!(verify(&secret(4), &second) && verify(&secret(3), &second));
}

/// A held subscription is woken by a change of its owner's tasks (the event hub's owner
/// watch) rather than found by its backstop re-read (2.5 s at the soonest after the last
/// read): each task's events arrive well within that, round after round.
#[tokio::test]
async fn a_quiet_subscription_is_woken_by_a_change() {
    let mut stack = Stack::builder().gateways(0).spawn().await;
    let receiver = Receiver::start().await;
    let g = add_gateway(&mut stack, Some(&receiver), &["--events-webhook-allow-private", "127.0.0.0/8"]).await;
    let alice = client(&stack, g, "alice");
    let reply = subscribe(&alice, &receiver.url("/w"), &secret(3), json!({})).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(reply.result()["id"].is_string(), "{}", reply.text);
    // The first task's events come once a claim pass has taken the subscription.
    alice.create_task("sleep", json!({ "ms": 0 })).await;
    eventually(PATIENCE, "the first task's two events", || async {
        (events_to(&receiver, "/w").len() >= 2).then_some(())
    })
    .await;
    for round in 0..3 {
        let before = events_to(&receiver, "/w").len();
        let created = tokio::time::Instant::now();
        alice.create_task("sleep", json!({ "ms": 0 })).await;
        let arrived = eventually(PATIENCE, "the next task's two events", || async {
            (events_to(&receiver, "/w").len() >= before + 2).then(|| created.elapsed())
        })
        .await;
        assert!(arrived < Duration::from_secs(2), "round {round}: woken, not read by the backstop: {arrived:?}");
    }
}
