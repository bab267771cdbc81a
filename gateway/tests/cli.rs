//! The command-line contract of `taskgate-gateway`.

use std::process::Command;

fn gateway(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_taskgate-gateway"))
        .args(args)
        .env_remove("TASKGATE_AUTH")
        .env_remove("TASKGATE_LISTEN")
        .output()
        .expect("the binary runs")
}

#[test]
fn auth_must_be_chosen_explicitly() {
    let out = gateway(&["--listen", "127.0.0.1:0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--auth"));
}

#[test]
fn anonymous_mode_is_refused_on_a_public_address() {
    let out = gateway(&["--auth", "none", "--listen", "0.0.0.0:0", "--log-format", "text"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("refused on the non-loopback address"), "{out:?}");
}

#[test]
fn namespaces_cannot_break_hash_tags() {
    let out = gateway(&["--auth", "none", "--namespace", "a{b}", "--log-format", "text"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--namespace"));
}
