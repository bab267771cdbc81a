//! The configuration reference agrees with the binaries: every long flag and `TASKGATE_*`
//! variable a binary's `--help` names is in its table of the docs, and every one the table names
//! is in the binary. A flag added without a line in the docs, or a line left behind by a renamed
//! flag, fails here.

use std::collections::BTreeSet;
use std::path::Path;

use taskgate_tests::Binary;

/// Long flags and `TASKGATE_*` names, as two sets.
#[derive(Debug, Default, PartialEq)]
struct Names {
    flags: BTreeSet<String>,
    env: BTreeSet<String>,
}

/// The long flags that start `text`'s option lines (`--x`, `-x, --x`), and every
/// `TASKGATE_*` word anywhere: clap prints `[env: NAME=…]`, and the help of a secret names its
/// variable in prose because the secret has no flag.
fn from_help(text: &str) -> Names {
    let mut names = Names::default();
    for line in text.lines() {
        let line_start = line.trim_start();
        // `-q, --quiet` or `--quiet`, followed by its value name or its text.
        let option = match line_start.strip_prefix('-') {
            Some(short) if !short.starts_with('-') => short.split_once(", ").map_or("", |(_, long)| long),
            _ => line_start,
        };
        if let Some(flag) = option.split_whitespace().next().filter(|f| f.starts_with("--")) {
            names.flags.insert(flag.to_owned());
        }
        names.env.extend(env_words(line));
    }
    names.flags.retain(|f| f != "--help" && f != "--version");
    names
}

fn env_words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("TASKGATE_") && w.len() > "TASKGATE_".len())
        .map(str::to_owned)
}

/// The names in the table of `doc`'s section `heading`: flags from each row's first cell,
/// variables from its second.
fn from_doc(doc: &str, heading: &str) -> Names {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(doc)).expect("doc");
    let section = text
        .split("\n## ")
        .find(|s| s.starts_with(heading))
        .unwrap_or_else(|| panic!("{doc} has no section \"## {heading}\""));
    let mut names = Names::default();
    for row in section.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.split('|').collect();
        let (Some(flag), Some(env)) = (cells.get(1), cells.get(2)) else { continue };
        // Only code spans: `--x`.
        names.flags.extend(flag.split('`').skip(1).step_by(2).filter(|w| w.starts_with("--")).map(str::to_owned));
        names.env.extend(env_words(env));
    }
    assert!(!names.flags.is_empty(), "{doc} \"## {heading}\" has no table of flags");
    names
}

fn help(binary: Binary) -> Names {
    let out = std::process::Command::new(binary.path()).arg("--help").output().expect("the binary runs");
    assert!(out.status.success(), "--help failed: {}", String::from_utf8_lossy(&out.stderr));
    from_help(&String::from_utf8(out.stdout).expect("utf-8 help"))
}

fn assert_agree(binary: Binary, doc: &str, heading: &str) {
    let help = help(binary);
    let doc_names = from_doc(doc, heading);
    let missing_flags: Vec<_> = help.flags.difference(&doc_names.flags).collect();
    let stale_flags: Vec<_> = doc_names.flags.difference(&help.flags).collect();
    let missing_env: Vec<_> = help.env.difference(&doc_names.env).collect();
    let stale_env: Vec<_> = doc_names.env.difference(&help.env).collect();
    assert!(
        missing_flags.is_empty() && stale_flags.is_empty() && missing_env.is_empty() && stale_env.is_empty(),
        "{doc} \"## {heading}\" disagrees with {binary:?} --help:\n  flags not in the doc: {missing_flags:?}\n  \
         flags the binary lacks: {stale_flags:?}\n  variables not in the doc: {missing_env:?}\n  \
         variables the binary lacks: {stale_env:?}"
    );
}

#[test]
fn the_gateway_flags_are_those_of_the_configuration_reference() {
    assert_agree(Binary::Gateway, "docs/configuration.md", "Gateway");
}

#[test]
fn the_worker_flags_are_those_of_the_configuration_reference() {
    assert_agree(Binary::Worker, "docs/configuration.md", "Worker");
}

#[test]
fn the_cli_global_options_are_those_of_its_page() {
    assert_agree(Binary::Cli, "docs/cli.md", "Global options");
}

#[test]
fn the_help_parser_finds_flags_and_variables() {
    let names = from_help(
        "Options:\n      --listen <LISTEN>\n          [env: TASKGATE_LISTEN=]\n  -q, --quiet\n          \
         The secret may come from `TASKGATE_SECRET`; it is never a flag\n  -h, --help\n",
    );
    assert_eq!(names.flags, BTreeSet::from(["--listen".to_owned(), "--quiet".to_owned()]));
    assert_eq!(names.env, BTreeSet::from(["TASKGATE_LISTEN".to_owned(), "TASKGATE_SECRET".to_owned()]));
}
