//! Generates each Lua script's `Keys`, and its `Args` where the header names them, from the
//! script's opening comment, so a key or an argument is named once, in the script, and the Rust
//! side follows.
//!
//! - `KEYS[n] name: description`: the `Keys` struct (fields in the header's order), `list()`
//!   (what the handle takes, so a key added to the header and not passed fails the build), and,
//!   when every key is a field of one of the store's key sets, the constructor from it. The last
//!   entry may be `KEYS[n..] name:`, any number of keys from `n` on (a `&[String]` field; the
//!   table in `store/scripts.rs` declares such a handle `n - 1 + name`, its fixed keys and more).
//! - `ARGV[n] name: description`, `ARGV[n] name (kind): …`, `ARGV[a..b] name (kind): …` (one
//!   field that is several arguments) and `ARGV[n..] name (kind): …` (the variable tail): the
//!   `Args` struct and `push`, which adds them to a call in the header's order. A kind is one of
//!   [`KINDS`]; none is text. A header whose arguments are not all named that way (built from a
//!   domain type, optional) keeps a hand-written `Args`.
//!
//! - `call`, when the module beside the script decodes a reply by itself
//!   (`fn decode(reply: Reply) -> Result<T, StoreError>`) and leaves the call to this file: on
//!   one connection, or, for a script that queues the task on its pool's queue (a task's keys and
//!   a queue's, and a `pool` argument naming that queue's pool), through
//!   `Store::on_pool_queue`, which finds the task's pool.
//!
//! - the script's text as it is sent (`<name>.lua`): the definitions of `prelude.lua` it uses,
//!   then the script.
//!
//! Output: `$OUT_DIR/scripts/<name>.rs`, included by the script's module (`include!`), and
//! `$OUT_DIR/scripts/<name>.lua`, which `store/scripts.rs` loads.

use std::fmt::Write as _;
use std::path::Path;

/// The store's key sets a script's keys are filled from, with their fields (`store/keys.rs`).
/// `stream` is a queue's: a task's keys name its pool's queue, never the default one.
const TASK: &[&str] = &[
    "record", "inputs", "answers", "issued", "steps", "poll", "outcome", "args", "leases", "timeline", "outbox", "rel",
];
const QUEUE: &[&str] = &["stream", "ready", "fair"];
const SETS: &[(&str, &[&str])] = &[
    ("TaskKeys", TASK),
    ("TenantKeys", &["requests", "creations", "active"]),
    (
        "CatalogueKeys",
        &["specs", "live", "digests", "workers", "workers_live", "serving", "serving_since", "routes", "pools"],
    ),
];

/// One `KEYS[n] name: description` entry of a header, or `KEYS[n..] name:`, the last, for
/// any number of keys from `n` on (at least one).
struct Key {
    index: usize,
    name: String,
    doc: String,
    /// `KEYS[n..]`: the keys from `n` on, as many as the call passes.
    tail: bool,
}

/// An argument's kind: its name in the header, the field's type, how many arguments it is
/// (`None`: any number, the tail) and how `push` passes it (`{}` is the field).
const KINDS: &[(&str, &str, Option<usize>, &str)] = &[
    ("text", "&'a str", Some(1), "{}"),
    ("u64", "u64", Some(1), "{}"),
    ("u32", "u32", Some(1), "{}"),
    ("usize", "usize", Some(1), "{}"),
    ("f64", "f64", Some(1), "{}"),
    ("task", "&'a crate::task::TaskId", Some(1), "{}.as_str()"),
    ("status", "crate::task::TaskStatus", Some(1), "{}.as_str()"),
    // The task id, worker id and fencing token of a fenced write.
    ("lease", "crate::store::Lease<'a>", Some(3), "{}"),
    // The worker id and fencing token alone.
    ("holder", "crate::store::Lease<'a>", Some(2), "{}.holder()"),
    ("pair", "(&'a str, &'a str)", Some(2), "{}"),
    // Tenant, then principal.
    ("owner", "&'a crate::task::Owner", Some(2), "{}"),
    ("pairs", "&'a [(String, String)]", None, "{}"),
];

/// One `ARGV[…] name (kind): description` entry of a header.
struct Arg {
    first: usize,
    /// The last index it covers; `None` for the tail.
    last: Option<usize>,
    name: String,
    kind: &'static (&'static str, &'static str, Option<usize>, &'static str),
    doc: String,
}

fn main() {
    let dir = Path::new("src/store/scripts");
    println!("cargo::rerun-if-changed={}", dir.display());
    let mut scripts: Vec<(String, String)> = std::fs::read_dir(dir)
        .expect("the scripts directory")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "lua"))
        .filter_map(|path| {
            let name = path.file_stem()?.to_str()?.to_owned();
            (name != "prelude").then(|| (name, std::fs::read_to_string(&path).expect("a script")))
        })
        .collect();
    scripts.sort();
    let target = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("scripts");
    std::fs::create_dir_all(&target).expect("the generated scripts directory");
    let prelude = std::fs::read_to_string(dir.join("prelude.lua")).expect("the prelude");
    let parts = prelude_parts(&prelude);
    for (name, text) in &scripts {
        std::fs::write(target.join(format!("{name}.lua")), with_prelude(&parts, text)).expect("writing the script");
        let keys = header_keys(name, text);
        let args = header_args(name, text);
        // The module beside the script, to see whether it leaves its `call` to this file.
        let module = std::fs::read_to_string(dir.join(format!("{name}.rs"))).unwrap_or_default();
        let mut out = String::from("// Generated by shared/build.rs from the script's header; do not edit.\n");
        generate(&mut out, name, &keys, args.as_deref(), &module);
        std::fs::write(target.join(format!("{name}.rs")), out).expect("writing the generated module");
    }
}

/// One definition of the prelude: its text (the comment lines above it included) and the names
/// it defines (its `local function name` and `local name =` lines).
struct Part {
    text: String,
    names: Vec<String>,
}

/// The prelude cut into its definitions, in order: a part starts at a comment line, or a
/// `local` at the start of a line, that follows code.
fn prelude_parts(prelude: &str) -> Vec<Part> {
    let mut parts: Vec<Part> = Vec::new();
    let mut after_code = true;
    for line in prelude.split_inclusive('\n') {
        let comment = line.starts_with("--");
        let starts = (comment || line.starts_with("local ")) && after_code;
        if starts || parts.is_empty() {
            parts.push(Part { text: String::new(), names: Vec::new() });
        }
        let part = parts.last_mut().expect("a part");
        part.text.push_str(line);
        if let Some(rest) = line.strip_prefix("local function ").or_else(|| line.strip_prefix("local ")) {
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            part.names.push(name);
        }
        after_code = !comment;
    }
    parts
}

/// Whether `code` names `name` as a whole word, outside comment lines and quoted strings.
fn names(code: &str, name: &str) -> bool {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let quoted = |before: &str| before.matches('\'').count() % 2 == 1 || before.matches('"').count() % 2 == 1;
    code.lines().filter(|line| !line.trim_start().starts_with("--")).any(|line| {
        line.match_indices(name).any(|(at, _)| {
            !word(line[..at].chars().next_back())
                && !word(line[at + name.len()..].chars().next())
                && !quoted(&line[..at])
        })
    })
}

/// A script as it is sent: the prelude's definitions it uses (and those they use), in the
/// prelude's order, then the script. Redis runs a script's whole body at every call, so each
/// definition left out is a closure or a table a call does not build.
fn with_prelude(parts: &[Part], script: &str) -> String {
    let mut used = vec![false; parts.len()];
    let mut code = vec![script];
    while let Some(text) = code.pop() {
        for (i, part) in parts.iter().enumerate() {
            if !used[i] && part.names.iter().any(|name| names(text, name)) {
                used[i] = true;
                code.push(&part.text);
            }
        }
    }
    let mut out: String =
        parts.iter().zip(&used).filter(|(_, used)| **used).map(|(part, _)| part.text.as_str()).collect();
    out.push_str(script);
    out
}

/// The header's (the comment lines the file opens with) `KEYS[n] name:` entries, numbered 1
/// to n without a gap.
fn header_keys(script: &str, text: &str) -> Vec<Key> {
    let mut keys: Vec<Key> = Vec::new();
    for line in text.lines().take_while(|line| line.starts_with("--")) {
        let mut rest = line;
        while let Some(at) = rest.find("KEYS[") {
            rest = &rest[at + "KEYS[".len()..];
            let Some((index, tail, name, doc, next)) = entry(rest) else { continue };
            keys.push(Key { index, name, doc, tail });
            rest = next;
        }
    }
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(key.index, i + 1, "{script}.lua: KEYS[{}] {} out of order", key.index, key.name);
        assert!(!key.tail || i + 1 == keys.len(), "{script}.lua: only the last key is a tail");
    }
    keys
}

/// The header's `ARGV[…] name (kind):` entries, covering 1 to n without a gap; `None` when the
/// header names no argument that way (or takes none).
fn header_args(script: &str, text: &str) -> Option<Vec<Arg>> {
    let mut args: Vec<Arg> = Vec::new();
    for line in text.lines().take_while(|line| line.starts_with("--")) {
        let mut rest = line;
        while let Some(at) = rest.find("ARGV[") {
            rest = &rest[at + "ARGV[".len()..];
            let Some((arg, next)) = arg_entry(script, rest) else { continue };
            args.push(arg);
            rest = next;
        }
    }
    let mut next = 1;
    for arg in &args {
        assert_eq!(arg.first, next, "{script}.lua: ARGV[{}] {} out of order", arg.first, arg.name);
        let Some(last) = arg.last else {
            assert!(std::ptr::eq(arg, args.last().unwrap()), "{script}.lua: only the last argument is a tail");
            break;
        };
        assert_eq!(
            Some(last + 1 - arg.first),
            arg.kind.2,
            "{script}.lua: ARGV {} is {} arguments",
            arg.name,
            arg.kind.0
        );
        next = last + 1;
    }
    (!args.is_empty()).then_some(args)
}

/// After `ARGV[`: `n] name`, `a..b] name`, or `n..] name`, an optional ` (kind)`, then `:` and
/// the description.
fn arg_entry<'t>(script: &str, rest: &'t str) -> Option<(Arg, &'t str)> {
    let close = rest.find(']')?;
    let range = &rest[..close];
    let (first, last) = match range.split_once("..") {
        None => (range.parse().ok()?, Some(range.parse().ok()?)),
        Some((first, "")) => (first.parse().ok()?, None),
        Some((first, last)) => (first.parse().ok()?, Some(last.parse().ok()?)),
    };
    let after = rest[close + 1..].strip_prefix(' ')?;
    let name_len = after.find(|c: char| !(c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit()))?;
    let (name, mut tail) = after.split_at(name_len);
    let mut kind = "text";
    if let Some(typed) = tail.strip_prefix(" (") {
        let (word, after) = typed.split_once(')')?;
        (kind, tail) = (word, after);
    }
    let tail = tail.strip_prefix(':')?;
    if name.is_empty() {
        return None;
    }
    let kind = KINDS.iter().find(|k| k.0 == kind).unwrap_or_else(|| panic!("{script}.lua: no kind {kind:?}"));
    let end = next_arg_entry(script, tail).unwrap_or(tail.len());
    let doc = tail[..end].trim().to_owned();
    Some((Arg { first, last, name: name.to_owned(), kind, doc }, &tail[end..]))
}

/// Where the next `ARGV[…] name:` entry starts in `text` (a mention does not end a description).
fn next_arg_entry(script: &str, text: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = text[from..].find("ARGV[") {
        let start = from + at;
        if arg_entry(script, &text[start + "ARGV[".len()..]).is_some() {
            return Some(start);
        }
        from = start + 1;
    }
    None
}

/// After `KEYS[`: `n] name: description` (or `n..] name:`, a tail: whether it is one is the
/// second value), the description up to the next entry; `None` for a mention (`KEYS[2] is …`)
/// rather than an entry.
fn entry(rest: &str) -> Option<(usize, bool, String, String, &str)> {
    let close = rest.find(']')?;
    let (index, many) = match rest[..close].strip_suffix("..") {
        Some(first) => (first, true),
        None => (&rest[..close], false),
    };
    let index = index.parse().ok()?;
    let after = rest[close + 1..].strip_prefix(' ')?;
    let name_len = after.find(|c: char| !(c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit()))?;
    let (name, tail) = after.split_at(name_len);
    let tail = tail.strip_prefix(':')?;
    if name.is_empty() {
        return None;
    }
    let end = next_entry(tail).unwrap_or(tail.len());
    let doc = tail[..end].trim().trim_end_matches(['[', ']']).trim().to_owned();
    Some((index, many, name.to_owned(), doc, &tail[end..]))
}

/// Where the next `KEYS[n] name:` entry starts in `text` (a mention such as `KEYS[4] is` does not
/// end a description).
fn next_entry(text: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = text[from..].find("KEYS[") {
        let start = from + at;
        if entry(&text[start + "KEYS[".len()..]).is_some() {
            return Some(start);
        }
        from = start + 1;
    }
    None
}

fn generate(out: &mut String, script: &str, keys: &[Key], args: Option<&[Arg]>, module: &str) {
    let n = keys.len();
    let _ = writeln!(out, "    /// The keys, in the header's order.\n    pub(in crate::store) struct Keys<'a> {{");
    for key in keys {
        if !key.doc.is_empty() {
            let _ = writeln!(out, "        /// {}", key.doc);
        }
        let kind = if key.tail { "&'a [String]" } else { "&'a str" };
        let _ = writeln!(out, "        pub(in crate::store) {}: {kind},", key.name);
    }
    let _ = writeln!(out, "    }}\n");
    // Not every script builds its keys each way: what one does not use is no mistake.
    let _ = writeln!(out, "    #[allow(dead_code)]\n    impl<'a> Keys<'a> {{");
    let fields: Vec<String> = keys.iter().filter(|k| !k.tail).map(|k| format!("self.{}", k.name)).collect();
    if let Some(tail) = keys.last().filter(|k| k.tail) {
        // The keys before the tail, then the tail: what a handle of a variable count takes.
        let _ = writeln!(
            out,
            "        /// What the script's handle takes: the fixed keys, then the tail.\n        pub(in crate::store) fn list(&self) -> ([&'a str; {}], &'a [String]) {{\n            ([{}], self.{})\n        }}",
            n - 1,
            fields.join(", "),
            tail.name
        );
    } else {
        let _ = writeln!(
            out,
            "        /// What the script's handle takes.\n        pub(in crate::store) fn list(&self) -> [&'a str; {n}] {{\n            [{}]\n        }}",
            fields.join(", ")
        );
    }
    let tailed = keys.iter().any(|k| k.tail);
    let names: Vec<&str> = keys.iter().map(|k| k.name.as_str()).collect();
    let in_task = |name: &str| TASK.contains(&name);
    let in_queue = |name: &str| QUEUE.contains(&name);
    let on_queue = !tailed
        && names.iter().any(|n| in_queue(n))
        && names.iter().any(|n| in_task(n))
        && names.iter().all(|n| in_task(n) || in_queue(n));
    if on_queue {
        let fill: Vec<String> = names
            .iter()
            .map(|name| if in_queue(name) { format!("{name}: &queue.{name}") } else { format!("{name}: &task.{name}") })
            .collect();
        let _ = writeln!(
            out,
            "\n        /// The task's keys and a pool's queue on its shard.\n        pub(in crate::store) fn new(task: &'a crate::store::TaskKeys, queue: &'a crate::store::QueueKeys) -> Self {{\n            Self {{ {} }}\n        }}",
            fill.join(", ")
        );
    }
    let _ = writeln!(out, "    }}");
    let set = SETS.iter().find(|(_, fields)| names.iter().all(|name| fields.contains(name)));
    if let Some((set, _)) = set.filter(|_| !tailed) {
        let fill: Vec<String> = names.iter().map(|name| format!("{name}: &keys.{name}")).collect();
        let _ = writeln!(
            out,
            "\n    impl<'a> From<&'a crate::store::{set}> for Keys<'a> {{\n        fn from(keys: &'a crate::store::{set}) -> Self {{\n            Self {{ {} }}\n        }}\n    }}",
            fill.join(", ")
        );
    }
    let quoted: Vec<String> = names.iter().map(|name| format!("{name:?}")).collect();
    let _ = writeln!(
        out,
        "\n    /// The keys' names, in order, for the header check.\n    #[cfg(test)]\n    pub(in crate::store) const KEY_NAMES: [&str; {n}] = [{}];",
        quoted.join(", ")
    );
    if let Some(args) = args {
        let start = out.len();
        generate_args(out, script, args);
        let decoded = module
            .split_once("fn decode(reply: Reply) -> Result<")
            .and_then(|(_, rest)| rest.split_once(", StoreError> {"))
            .map(|(decoded, _)| decoded);
        let decoded = decoded.filter(|_| !module.contains("async fn call("));
        let pooled = on_queue.then(|| pool_call(script, args)).flatten();
        if let (Some(decoded), Some(task_id)) = (decoded, pooled) {
            let _ = writeln!(
                out,
                r#"
/// Sends the script through [`Store::on_pool_queue`](crate::store::Store::on_pool_queue), which
/// finds the task's pool: `args.pool`'s queue is tried first, the record's if it names another.
pub(in crate::store) async fn call(
    store: &crate::store::Store,
    task: &crate::store::TaskKeys,
    args: Args<'_>,
) -> Result<{decoded}, crate::store::StoreError> {{
    // The pool tried is the one whose queue the keys name.
    let build = |queue: &crate::store::QueueKeys, pool: &str| invocation(&Keys::new(task, queue), &Args {{ pool, ..args }});
    store.on_pool_queue({task_id}, args.pool, build, decode).await
}}"#
            );
        } else if let Some(decoded) = decoded {
            let _ = writeln!(
                out,
                r#"
/// Sends the script and decodes its reply.
pub(in crate::store) async fn call(
    conn: &mut crate::store::Conn,
    keys: Keys<'_>,
    args: Args<'_>,
) -> Result<{decoded}, crate::store::StoreError> {{
    send(conn, keys, args, decode).await
}}"#
            );
        }
        // Arguments that borrow nothing (numbers only) take no lifetime.
        if !args.iter().any(|arg| arg.kind.1.contains("'a")) {
            let generated = out.split_off(start).replace("struct Args<'a>", "struct Args").replace("Args<'_>", "Args");
            out.push_str(&generated);
        }
    }
}

/// For a script that queues a task on its pool's queue (its keys are a task's and a queue's, and
/// its arguments name the `pool` whose queue is declared): how the generated `call` names the
/// task (its `task` argument, or its `lease`'s), `None` when it is not such a script.
fn pool_call(script: &str, args: &[Arg]) -> Option<String> {
    args.iter().find(|arg| arg.name == "pool" && arg.kind.0 == "text")?;
    let task = args.iter().find(|arg| matches!(arg.kind.0, "task" | "lease"));
    let task = task.unwrap_or_else(|| panic!("{script}.lua: a `pool` argument with no task or lease argument"));
    Some(match task.kind.0 {
        "task" => format!("args.{}", task.name),
        _ => format!("args.{}.task_id", task.name),
    })
}

fn generate_args(out: &mut String, script: &str, args: &[Arg]) {
    let _ = writeln!(
        out,
        "\n    /// The arguments, in the header's order.\n    #[derive(Clone, Copy)]\n    pub(in crate::store) struct Args<'a> {{"
    );
    for arg in args {
        if !arg.doc.is_empty() {
            let _ = writeln!(out, "        /// {}", arg.doc);
        }
        let _ = writeln!(out, "        pub(in crate::store) {}: {},", arg.name, arg.kind.1);
    }
    let _ = writeln!(out, "    }}\n\n    impl Args<'_> {{");
    let _ = writeln!(out, "        /// Adds the arguments to `call`, in the header's order.");
    let _ = writeln!(out, "        pub(in crate::store) fn push(&self, call: &mut redis::ScriptInvocation<'_>) {{");
    for arg in args {
        let value = arg.kind.3.replace("{}", &format!("self.{}", arg.name));
        let _ = writeln!(out, "            call.arg({value});");
    }
    let _ = writeln!(out, "        }}\n    }}");
    let handle = script.to_uppercase();
    let _ = writeln!(
        out,
        r#"
    /// The call: the keys in the header's order, then the arguments.
    #[allow(dead_code)]
    pub(in crate::store) fn invocation(keys: &Keys<'_>, args: &Args<'_>) -> redis::ScriptInvocation<'static> {{
        let mut call = super::{handle}.keys(keys.list());
        args.push(&mut call);
        call
    }}

    /// Sends the call and reads its reply with `decode`.
    #[allow(dead_code)]
    pub(in crate::store) async fn send<T>(
        conn: &mut crate::store::Conn,
        keys: Keys<'_>,
        args: Args<'_>,
        decode: impl FnOnce(crate::store::reply::Reply) -> Result<T, crate::store::StoreError>,
    ) -> Result<T, crate::store::StoreError> {{
        super::run(conn, &invocation(&keys, &args), decode).await
    }}"#
    );
}
