//! The load tester against a real stack: beside the throughput it reports each process's CPU
//! time per operation (the pids it is given, Redis found by itself, and itself), consistent
//! with what `/proc` shows of those processes over the whole run; and it refuses, before any
//! traffic, a pid that is not running.

use std::time::Duration;

use serde_json::Value;
use taskgate_loadtest::cpu::cpu_time;
use taskgate_tests::{Binary, Stack};

/// A stack with the fleet limits off, as the benchmark scripts run it: these tests are about the
/// load tester, and at the defaults a fast machine meets the tenant's creation rate within the
/// run (a refusal fails `--fail-on-error`).
async fn stack() -> Stack {
    let limits_off = ["--tenant-rps", "0", "--tenant-create-rps", "0", "--tenant-max-active-tasks", "0"];
    Stack::builder().gateway_args(&limits_off).spawn().await
}

async fn loadtest(stack: &Stack, extra: &[&str]) -> std::process::Output {
    let url = format!("{}/mcp", stack.gateways[0].url.as_deref().expect("a gateway"));
    let mut args = vec![
        "--url",
        &url,
        "--redis-url",
        &stack.redis_url,
        "--scenario",
        "lifecycle",
        "--concurrency",
        "4",
        "--duration-s",
        "2",
        "--warmup-s",
        "0.3",
        "--fail-on-error",
    ];
    args.extend_from_slice(extra);
    tokio::process::Command::new(Binary::Loadtest.path()).args(&args).output().await.expect("the load tester runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_reports_cpu_per_operation_for_every_process() {
    let stack = stack().await;
    let (gateway, worker) = (stack.gateways[0].pid(), stack.workers[0].pid());
    let report_file = stack.scratch_dir().join("report.json");
    let gateway_before = cpu_time(Some(gateway)).unwrap();
    let out = loadtest(
        &stack,
        &[
            "--cpu-pid",
            &format!("gateway={gateway}"),
            "--cpu-pid",
            &format!("worker={worker}"),
            "--json",
            report_file.to_str().unwrap(),
        ],
    )
    .await;
    let gateway_spent = cpu_time(Some(gateway)).unwrap() - gateway_before;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("cpu µs/op"), "{stdout}");

    let report: Value = serde_json::from_str(&std::fs::read_to_string(&report_file).unwrap()).unwrap();
    let ok = report["ok"].as_u64().expect("ok");
    assert!(ok > 0, "{report}");
    let duration = Duration::from_secs_f64(report["duration_s"].as_f64().unwrap());
    for role in ["gateway", "worker", "redis", "loadtest"] {
        let per_op = report["cpu_us_per_op"][role].as_f64().unwrap_or_else(|| panic!("no {role} in {report}"));
        let cores = report["cpu_cores"][role].as_f64().unwrap();
        assert!(per_op > 0.0 && cores > 0.0, "{role}: {per_op} µs/op, {cores} cores");
        assert!(cores <= 2.0 * std::thread::available_parallelism().unwrap().get() as f64, "{role}: {cores} cores");
    }
    // The measured window lies within the whole run and is most of it: what the gateway spent
    // in it, per the report, is at most what it spent in all (to the 10 ms tick), and most of it.
    let in_window = Duration::from_secs_f64(report["cpu_us_per_op"]["gateway"].as_f64().unwrap() * ok as f64 / 1e6);
    assert!(in_window <= gateway_spent + Duration::from_millis(10), "{in_window:?} > {gateway_spent:?}");
    assert!(in_window * 4 >= gateway_spent, "{in_window:?} of {gateway_spent:?} over {duration:?}");
}

/// Beside `redis-benchmark`'s throughput on the same Redis, Redis's own CPU per request under
/// it, and the gateway's CPU per operation over it: a ratio that holds from one machine to
/// another, where microseconds do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compared_with_redis_benchmark_it_reports_redis_cpu_per_request_and_the_normalised_ratio() {
    let stack = stack().await;
    let gateway = stack.gateways[0].pid();
    let report_file = stack.scratch_dir().join("report.json");
    let cpu_pid = format!("gateway={gateway}");
    let out =
        loadtest(&stack, &["--compare-redis", "--cpu-pid", &cpu_pid, "--json", report_file.to_str().unwrap()]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&report_file).unwrap()).unwrap();
    for test in ["get", "set"] {
        let redis_us = report["redis_benchmark_cpu_us_per_op"][test].as_f64().unwrap_or_else(|| panic!("{report}"));
        // A GET or SET costs Redis a few microseconds of CPU; 0 or 1000 would be a misreading.
        assert!((0.1..100.0).contains(&redis_us), "{test}: {redis_us} µs");
        let gateway_us = report["cpu_us_per_op"]["gateway"].as_f64().unwrap();
        let ratio = report["ratios"][format!("gateway cpu per lifecycle / redis cpu per {test}")].as_f64().unwrap();
        assert!((ratio - gateway_us / redis_us).abs() < 1e-9, "{report}");
        assert!(report["ratios"][format!("lifecycle / redis {test}")].as_f64().unwrap() > 0.0, "{report}");
    }
    assert!(stdout.contains("cpu µs/request"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pid_that_is_not_running_is_refused_before_any_traffic() {
    let stack = stack().await;
    let out = loadtest(&stack, &["--cpu-pid", "gateway=999999999"]).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("gateway (pid 999999999)"), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("throughput"), "no run was made");
}

/// HTTP/2 over cleartext with prior knowledge, as a proxy in front of the gateway speaks it, on
/// the same listener as HTTP/1.1: every request and stream of a lifecycle (create, listen,
/// terminal) multiplexed on two connections. A server that answered in HTTP/1.1 would fail the
/// load tester's handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycles_run_over_http2_with_prior_knowledge() {
    let stack = stack().await;
    let report_file = stack.scratch_dir().join("report.json");
    let args = ["--http2", "--connections", "2", "--arguments", r#"{"bytes": 300}"#, "--json"];
    let out = loadtest(&stack, &[&args[..], &[report_file.to_str().unwrap()]].concat()).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&report_file).unwrap()).unwrap();
    assert_eq!((report["http"].as_str(), report["connections"].as_u64()), (Some("HTTP/2"), Some(2)), "{report}");
    assert!(report["ok"].as_u64().unwrap() > 0, "{report}");
}
