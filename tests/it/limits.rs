//! Fleet-wide limits: kept in Redis, so two replicas admit what one would.

use std::time::Duration;

use serde_json::{Value, json};
use taskgate_tests::{Reply, Stack, Topology};

taskgate_tests::on_topologies!(
    [standalone: Standalone, cluster: Cluster]
    a_lease_grants_at_most_the_burst_and_takes_back_what_was_not_used,
);

fn assert_refused(r: &Reply, limit: &str) {
    assert_eq!(r.status, 429, "{}", r.text);
    assert_eq!(r.error_code(), Some(-31429), "{}", r.text);
    assert_eq!(r.body["error"]["message"], "rate limit exceeded");
    assert_eq!(r.body["error"]["data"]["limit"], limit);
    let retry: u64 = r.header("retry-after").expect("Retry-After").parse().unwrap();
    assert!(retry >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_rate_is_shared_by_replicas() {
    // 1 request per second with a burst of 4: 4 at once, wherever they land.
    let stack = Stack::builder()
        .gateways(2)
        .workers(0)
        .gateway_args(&["--tenant-rps", "1", "--tenant-burst", "4"])
        .spawn()
        .await;
    let (a, b) = (stack.client(0), stack.client(1));
    let mut admitted = 0;
    let mut refused = None;
    for i in 0..10 {
        let client = if i % 2 == 0 { &a } else { &b };
        let r = client.call("server/discover", json!({})).await;
        if r.status == 200 {
            admitted += 1;
        } else {
            refused = Some(r);
        }
    }
    assert_eq!(admitted, 4, "two replicas together admit the burst once");
    assert_refused(&refused.unwrap(), "requests");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creation_rate_and_active_task_cap_are_shared_by_replicas() {
    let stack = Stack::builder()
        .gateways(2)
        .gateway_args(&["--tenant-create-rps", "0.5", "--tenant-create-burst", "2"])
        .spawn()
        .await;
    let (a, b) = (stack.client(0), stack.client(1));
    let sleep = json!({"name": "sleep", "arguments": {"ms": 60_000}});
    let mut created = Vec::new();
    let mut last = None;
    for i in 0..6 {
        let client = if i % 2 == 0 { &a } else { &b };
        let r = client.call("tools/call", sleep.clone()).await;
        match r.result()["taskId"].as_str() {
            Some(id) => created.push(id.to_owned()),
            None => last = Some(r),
        }
    }
    assert_eq!(created.len(), 2, "the burst, across both replicas");
    assert_refused(&last.unwrap(), "creations");

    let mut capped = Stack::builder().gateways(2).gateway_args(&["--tenant-max-active-tasks", "2"]).spawn().await;
    let (a, b) = (capped.client(0), capped.client(1));
    let first = a.create_task("sleep", json!({"ms": 60_000})).await;
    b.create_task("sleep", json!({"ms": 60_000})).await;
    let r = a.call("tools/call", sleep.clone()).await;
    assert_refused(&r, "active_tasks");
    // A task that ends frees its slot.
    b.cancel_task(&first).await;
    taskgate_tests::eventually(Duration::from_secs(10), "a freed slot", || async {
        let r = a.call("tools/call", sleep.clone()).await;
        (r.result()["resultType"] == "task").then_some(())
    })
    .await;
    let _ = capped.add_gateway(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_faster_than_the_interval_gets_429_with_poll_limit_refuse() {
    let stack = Stack::builder()
        .gateway_option("--poll-tolerance", "0.5")
        .gateway_args(&["--poll-limit", "refuse"])
        .gateways(2)
        .spawn()
        .await;
    let (a, b) = (stack.client(0), stack.client(1));
    // generate_report advertises pollIntervalMs 1000: polls of an unchanged task closer than
    // 500 ms are refused, on whichever replica they land. (Let it park first: a poll after a
    // change is never early.)
    let task_id = a.create_task("generate_report", json!({})).await;
    a.wait_for_status(&task_id, "input_required", Duration::from_secs(15)).await;
    taskgate_tests::eventually(Duration::from_secs(5), "a poll to be answered", || async {
        (a.get_task(&task_id).await.status == 200).then_some(())
    })
    .await;
    let r = b.get_task(&task_id).await;
    assert_refused(&r, "poll");
    let retry_ms = r.body["error"]["data"]["retryAfterMs"].as_u64().unwrap();
    assert!((1..=500).contains(&retry_ms), "{retry_ms}");
    tokio::time::sleep(Duration::from_millis(retry_ms + 20)).await;
    assert_eq!(b.get_task(&task_id).await.status, 200, "a poll that honours the interval is served");
    // Another principal probing the id neither learns anything nor throttles the owner: an
    // unknown id is simply not found, with no poll accounting.
    let unknown = taskgate_shared::task::TaskId::generate(16);
    let r = a.get_task(unknown.as_str()).await;
    assert_eq!(r.body["error"]["message"], "task not found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_arguments_answers_and_results_are_refused() {
    let stack = Stack::builder()
        .gateway_args(&["--max-argument-bytes", "1000", "--max-input-response-bytes", "500"])
        .worker_args(&["--tools", "demo,conformance", "--max-result-bytes", "300"])
        .spawn()
        .await;
    let client = stack.client(0);
    let big = "x".repeat(2000);
    let r = client.call("tools/call", json!({"name": "dual_approval", "arguments": {"change": big}})).await;
    assert_eq!(r.body["error"]["message"], "arguments exceed the 1000-byte limit", "{}", r.text);

    let task_id = client.create_task("generate_report", json!({})).await;
    client.wait_for_status(&task_id, "input_required", Duration::from_secs(15)).await;
    let huge =
        json!({"approve_outline": {"action": "accept", "content": {"approved": true, "note": "y".repeat(1000)}}});
    let r = client.update_task(&task_id, huge).await;
    assert_eq!(r.body["error"]["message"], "inputResponses exceed the 500-byte limit");
    assert_eq!(client.get_task(&task_id).await.result()["status"], "input_required", "nothing was stored");

    // A result over the worker's cap fails the task and is never stored in part.
    let r = client
        .call(
            "tools/call",
            json!({"name": "json_schema_2020_12_tool", "arguments": {"email": "a@b.c", "name": "z".repeat(400)}}),
        )
        .await;
    assert_eq!(r.error_code(), Some(-32603), "{}", r.text);
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("the tool's result was ") && message.ends_with("over the 300-byte limit"), "{message}");
    let _: Value = r.body;
}

/// The argument limit is on what is stored and sent to a worker, whatever the request's own
/// text: arguments padded with whitespace past the limit are stored compact, within it; and
/// `completion/complete`'s `context` counts with its `ref` and `argument`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_stored_counts_against_the_argument_limit() {
    let stack = Stack::builder()
        .gateway_args(&["--max-argument-bytes", "1000"])
        .worker_args(&["--tools", "demo,conformance"])
        .spawn()
        .await;
    let client = stack.client(0);

    // 3,000 bytes as sent, 12 compact.
    let padded = format!("{{\"ms\": 60000{}}}", " ".repeat(3_000));
    let envelope = client.envelope("tools/call", json!({"name": "sleep", "arguments": {"ms": 60_000}}));
    let text = envelope.to_string().replace(r#"{"ms":60000}"#, &padded);
    assert!(text.contains(&padded));
    let r = client.send(&taskgate_tests::standard_headers(&envelope), text.into_bytes()).await;
    let task_id = r.result()["taskId"].as_str().unwrap_or_else(|| panic!("{}", r.text)).to_owned();
    let id = taskgate_shared::task::TaskId::parse(&task_id).unwrap();
    let mut conn = stack.redis.connection().await;
    let stored: String =
        redis::cmd("HGET").arg(stack.store().keys().task(&id).record).arg("args").query_async(&mut conn).await.unwrap();
    assert!(stored.len() <= 1000, "{} bytes stored", stored.len());
    assert_eq!(serde_json::from_str::<Value>(&stored).unwrap(), json!({"ms": 60_000}));

    // Completion: the worker gets ref, argument and context, and all three count.
    let reference = json!({"type": "ref/prompt", "name": "test_prompt_with_arguments"});
    let argument = json!({"name": "arg1", "value": "par"});
    taskgate_tests::eventually(Duration::from_secs(15), "completions to be offered", || async {
        let r = client.call("completion/complete", json!({"ref": reference, "argument": argument})).await;
        r.body.get("result").map(drop)
    })
    .await;
    let context = json!({"arguments": {"other": "z".repeat(2_000)}});
    let r =
        client.call("completion/complete", json!({"ref": reference, "argument": argument, "context": context})).await;
    assert_eq!(r.error_code(), Some(-32602), "{}", r.text);
    assert_eq!(r.body["error"]["message"], "ref, argument and context exceed the 1000-byte limit");
}

/// A replica leases slices of a tenant's request rate and admits from them in memory; Redis
/// grants no more than the rate, takes back what a replica did not use, and refuses a lease
/// while the tenant is at its rate.
/// On a Cluster each tenant's keys are in a slot of their own: several tenants go as one call
/// each, sent together, with the same answers.
async fn a_lease_grants_at_most_the_burst_and_takes_back_what_was_not_used(topology: Topology) {
    use taskgate_shared::store::{Leased, Rate, SliceAsk};
    let stack = topology.builder().gateways(0).workers(0).spawn().await;
    let store = stack.store();
    // One request per 10 s: nothing comes back by the clock while the test runs.
    let rate = Rate { per_second: 0.1, burst: 10 };
    let lease = |tenant, want, unused| SliceAsk { tenant, rate, want, unused };
    let one = |ask| {
        let store = store.clone();
        async move { store.lease_requests(&[ask]).await.unwrap()[0] }
    };
    assert_eq!(one(lease("acme", 8, 0)).await, Leased::Granted(8));
    assert_eq!(one(lease("acme", 8, 0)).await, Leased::Granted(2), "only the burst's rest");
    let Leased::Refused { retry_after_ms } = one(lease("acme", 8, 0)).await else {
        panic!("a tenant at its rate gets no lease");
    };
    assert!((9_000..=10_000).contains(&retry_after_ms), "{retry_after_ms}");
    // Five cells given back (with nothing asked) are there for the next lease, from any replica.
    assert!(matches!(one(lease("acme", 0, 5)).await, Leased::Refused { .. }));
    assert_eq!(one(lease("acme", 8, 0)).await, Leased::Granted(5));
    // Several tenants in one call, each against its own rate, in the order asked.
    let leases = store.lease_requests(&[lease("globex", 3, 0), lease("acme", 1, 0), lease("initech", 12, 0)]).await;
    let refused = matches!(leases.as_deref(), Ok([_, Leased::Refused { .. }, _]));
    assert!(refused, "acme is at its rate: {leases:?}");
    assert_eq!(leases.as_ref().unwrap()[0], Leased::Granted(3));
    assert_eq!(leases.as_ref().unwrap()[2], Leased::Granted(10), "the burst");
    assert_eq!(store.lease_requests(&[]).await.unwrap(), vec![], "nothing asked, nothing sent");
}

/// Three replicas hammering one tenant admit at most what one exact limiter would, plus one
/// slice per replica (the documented bound), and not much less.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_overshoot_the_request_rate_by_at_most_a_slice_each() {
    // Low enough that a loaded machine's debug build presses it from 18 loops.
    const RPS: f64 = 20.0;
    const BURST: u64 = 5;
    // 20 per second over a 250 ms slice: 5 cells a lease.
    const SLICE: u64 = 5;
    let stack = Stack::builder()
        .gateways(3)
        .workers(0)
        .gateway_args(&["--tenant-rps", "20", "--tenant-burst", "5", "--admission-slice-ms", "250"])
        .spawn()
        .await;
    let clients: Vec<_> = (0..3).map(|i| stack.client(i)).collect();
    let started = std::time::Instant::now();
    let run = Duration::from_secs(3);
    let mut loops = tokio::task::JoinSet::new();
    for i in 0..clients.len() {
        for _ in 0..6 {
            let client = stack.client(i);
            loops.spawn(async move {
                let (mut admitted, mut refused) = (0u64, 0u64);
                while started.elapsed() < run {
                    let r = client.call("server/discover", json!({})).await;
                    match r.status {
                        200 => admitted += 1,
                        429 => {
                            assert_eq!(r.body["error"]["data"]["limit"], "requests", "{}", r.text);
                            refused += 1;
                        }
                        other => panic!("{other}: {}", r.text),
                    }
                }
                (admitted, refused)
            });
        }
    }
    let (mut admitted, mut refused) = (0, 0);
    while let Some(counts) = loops.join_next().await {
        let (a, r) = counts.unwrap();
        admitted += a;
        refused += r;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let exact = BURST as f64 + RPS * elapsed;
    let bound = exact + (3 * SLICE) as f64;
    eprintln!("admitted {admitted}, refused {refused} in {elapsed:.2} s: exact limiter {exact:.0}, bound {bound:.0}");
    assert!(refused > admitted, "the run pressed the limit: {admitted} admitted, {refused} refused");
    assert!((admitted as f64) <= bound, "{admitted} admitted, more than the bound {bound:.0}");
    assert!((admitted as f64) >= RPS * elapsed * 0.5, "{admitted} admitted: the fleet starves the tenant");
    // A refused lease says when the next cell fits, and the replica refuses by itself until
    // then: most refusals never reach Redis.
    let mut refused_leases = 0.0;
    for client in &clients {
        let metrics = taskgate_tests::Scrape::of(&format!("{}/metrics", client.base())).await;
        refused_leases += metrics.sum("taskgate_gateway_request_slices_total", &[("outcome", "refused")]);
    }
    assert!(refused_leases * 2.0 <= refused as f64, "{refused_leases} refused leases for {refused} refusals");
}

/// Under its rate, a tenant's requests are admitted from slices: one lease admits several.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_its_rate_a_tenant_costs_redis_one_lease_per_slice() {
    let stack = Stack::builder().gateways(1).workers(0).spawn().await;
    let client = stack.client(0);
    // At the defaults (500 a second over 100 ms): 50 cells a lease, used until the slice lapses.
    let requests = 200;
    for _ in 0..requests {
        assert_eq!(client.call("server/discover", json!({})).await.status, 200);
    }
    let metrics = taskgate_tests::Scrape::of(&format!("{}/metrics", client.base())).await;
    let leases = metrics.sum("taskgate_gateway_request_slices_total", &[]);
    let granted = metrics.sum("taskgate_gateway_request_slices_total", &[("outcome", "granted")]);
    assert_eq!(leases, granted, "nothing refused or failed");
    assert!(granted >= 1.0 && granted * 4.0 <= f64::from(requests), "{granted} leases for {requests} requests");
}

/// A tenant well under its rate keeps a slice until it is spent or ten slice times have passed,
/// so it asks Redis about once a second per replica at the defaults, not once per slice time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_well_under_its_rate_leases_about_once_a_second() {
    let stack = Stack::builder().gateways(1).workers(0).spawn().await;
    let client = stack.client(0);
    // 40 requests a second against 500: each 100 ms slice of 50 cells would lapse with 46 unused.
    let mut pace = tokio::time::interval(Duration::from_millis(25));
    let started = std::time::Instant::now();
    for _ in 0..60 {
        pace.tick().await;
        assert_eq!(client.call("server/discover", json!({})).await.status, 200);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let metrics = taskgate_tests::Scrape::of(&format!("{}/metrics", client.base())).await;
    let granted = metrics.sum("taskgate_gateway_request_slices_total", &[("outcome", "granted")]);
    println!("{granted} leases in {elapsed:.2} s");
    // One lease per second of the run, and the first; a slice per 100 ms would be ten times that.
    assert!(granted >= 1.0 && granted <= elapsed.ceil() + 1.0, "{granted} leases in {elapsed:.2} s");
}

/// Tenants well under their rate on one replica renew their slices together: the lease of the
/// tenant that runs dry takes along the nearly spent slices of the others, so the calls to
/// Redis are far fewer than the slices leased, and every request is still admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_under_their_rate_renew_their_slices_in_one_call() {
    const TENANTS: usize = 40;
    // 100 a second over 100 ms: slices of 10 cells. Each tenant sends about 7 a second, so its
    // slice lapses (after ten slice times, 1 s) before it is spent, long after two slice times.
    let mut stack = Stack::builder().gateways(0).workers(0).spawn().await;
    let file = stack.scratch_dir().join("api-keys");
    let keys: String = (0..TENANTS).map(|i| format!("{} t{i} t{i}-user\n", sha256_hex(&format!("key-{i}")))).collect();
    std::fs::write(&file, keys).unwrap();
    let keys_file = file.to_str().unwrap();
    stack.add_gateway_with_auth(&["--auth", "api-keys", "--api-keys-file", keys_file, "--tenant-rps", "100"]).await;
    let started = tokio::time::Instant::now();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut loops = tokio::task::JoinSet::new();
    for i in 0..TENANTS {
        let (client, stop) = (stack.client_as(0, &format!("key-{i}")), stop.clone());
        loops.spawn(async move {
            // Spread over the first 150 ms, as independent clients would be.
            let first = started + Duration::from_micros(3_750 * i as u64);
            let mut pace = tokio::time::interval_at(first, Duration::from_millis(150));
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                pace.tick().await;
                let r = client.call("server/discover", json!({})).await;
                assert_eq!(r.status, 200, "{}", r.text);
            }
        });
    }
    let metrics = format!("{}/metrics", stack.client(0).base());
    let counts = |s: &taskgate_tests::Scrape| {
        let granted = s.sum("taskgate_gateway_request_slices_total", &[("outcome", "granted")]);
        (granted, s.sum("taskgate_gateway_request_slice_calls_total", &[]))
    };
    let leased = || async { counts(&taskgate_tests::Scrape::of(&metrics).await) };
    // From every tenant's first lease on (each its own call: nothing is nearly done yet), until
    // the tenants renewed their slices twice over, however long a loaded machine takes.
    let patience = Duration::from_secs(60);
    let (granted_before, calls_before) = taskgate_tests::eventually(patience, "every first lease", || async {
        let (granted, calls) = leased().await;
        (granted >= TENANTS as f64).then_some((granted, calls))
    })
    .await;
    taskgate_tests::eventually(patience, "two renewals a tenant", || async {
        (leased().await.0 - granted_before >= 2.0 * TENANTS as f64).then_some(())
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    while let Some(done) = loops.join_next().await {
        done.unwrap();
    }
    let after = taskgate_tests::Scrape::of(&metrics).await;
    let (granted, calls) = counts(&after);
    let (granted, calls) = (granted - granted_before, calls - calls_before);
    println!("{granted} slices leased in {calls} calls");
    assert_eq!(after.sum("taskgate_gateway_request_slices_total", &[]), counts(&after).0, "none refused or failed");
    assert!(calls * 4.0 <= granted, "{granted} slices leased in {calls} calls");
}

fn sha256_hex(text: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}
