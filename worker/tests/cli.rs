//! The command-line contract of `taskgate-worker`.

use std::process::Command;

#[test]
fn unknown_tool_packs_are_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_taskgate-worker"))
        .args(["--tools", "demo,nope", "--log-format", "text"])
        .output()
        .expect("the binary runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown tool pack \"nope\""), "{out:?}");
}

#[test]
fn lease_and_concurrency_are_bounded() {
    for args in [["--lease-ms", "10"], ["--concurrency", "0"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_taskgate-worker")).args(args).output().expect("runs");
        assert!(!out.status.success(), "{args:?}");
    }
}

#[test]
fn tool_overrides_must_name_served_tools() {
    for bad in ["nope=100", "sleep", "sleep=0", "sleep=abc"] {
        let out = Command::new(env!("CARGO_BIN_EXE_taskgate-worker"))
            .args(["--tool-ttl-ms", bad, "--log-format", "text"])
            .output()
            .expect("runs");
        assert!(!out.status.success(), "{bad}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("invalid tool override"), "{bad}: {out:?}");
    }
}

#[test]
fn a_bad_upstreams_file_is_refused_naming_the_line_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("upstreams.toml");
    std::fs::write(&file, "[[upstream]]\nname = \"ok\"\ncommand = \"x\"\ninstances = 0\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_taskgate-worker"))
        .args(["--upstreams", file.to_str().unwrap(), "--log-format", "text"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("upstreams.toml:4") && stderr.contains("`instances`"), "{stderr}");
}
