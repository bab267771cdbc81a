//! The Lua scripts, loaded once per process. `invoke_async` sends EVALSHA and falls back to
//! EVAL (then caches) when a server does not know the script yet.
//!
//! Each script has one Rust module beside it (`scripts/<name>.rs` beside `<name>.lua`) holding
//! its `Args`, the meaning of its reply codes, and one `call`; nothing else in the store builds
//! an invocation or reads a raw reply code. Its `Keys` are generated from the script's header
//! (`KEYS[n] name: what it is`, by `shared/build.rs`), so a key is named once.
//!
//! The table below is the only list: it declares those modules and makes each script's
//! handles, its metric label (`script:<file>`) and the list loaded at boot. Every script starts
//! with the definitions of `prelude.lua` (the helpers they share) that it uses: Redis runs a
//! script's whole text at every call, so a helper a script does not use would cost each call.
//!
//! A handle is typed by the number of keys its script takes ([`Lua::keys`] wants exactly
//! that many), which the generated `Keys::list` gives: a key added to the header and not to the
//! table fails the build, and a test holds the script's body to the keys its header names, so
//! a key read and not declared fails the tests, never a request in a Cluster. A script whose
//! last key entry is `KEYS[n..]` (any number of keys from `n` on) has a handle declared `n - 1 + name`
//! ([`LuaMore`]): its fixed keys, then a slice.

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{Script, ScriptInvocation, Value};

use super::StoreError;
use super::reply::Reply;

/// A script taking exactly `KEYS` keys.
struct Lua<const KEYS: usize> {
    script: &'static LazyLock<Script>,
}

impl<const KEYS: usize> Lua<KEYS> {
    const fn new(script: &'static LazyLock<Script>) -> Self {
        Self { script }
    }

    /// A call with its keys in the order of the script's header; arguments follow.
    fn keys(&self, keys: [&str; KEYS]) -> ScriptInvocation<'static> {
        let script: &'static Script = self.script;
        let mut call = script.prepare_invoke();
        for key in keys {
            call.key(key);
        }
        call
    }
}

/// A script taking `FIXED` keys and then any number more (its header's last key entry is
/// `KEYS[n..]`): `finish_batch`, whose keys are the lease index of each shard its ends are on,
/// and `lease_requests`, whose keys are the request rates of the tenants it leases for.
struct LuaMore<const FIXED: usize> {
    script: &'static LazyLock<Script>,
}

impl<const FIXED: usize> LuaMore<FIXED> {
    const fn new(script: &'static LazyLock<Script>) -> Self {
        Self { script }
    }

    /// A call with its fixed keys, then the others, in the order of the script's header;
    /// arguments follow.
    fn keys(&self, (fixed, more): ([&str; FIXED], &[String])) -> ScriptInvocation<'static> {
        let script: &'static Script = self.script;
        let mut call = script.prepare_invoke();
        for key in fixed.into_iter().chain(more.iter().map(String::as_str)) {
            call.key(key);
        }
        call
    }
}

/// A handle's type by its table entry: `n` keys exactly, or `n + tail`, `n` and then any number
/// more (the header's `KEYS[n + 1..] tail:`).
macro_rules! handle {
    ($keys:literal) => { Lua<$keys> };
    ($keys:literal + $tail:ident) => { LuaMore<$keys> };
}

/// The key entries a handle's header names by its table entry (a tail is one entry).
#[cfg(test)]
macro_rules! key_entries {
    ($keys:literal) => {
        $keys
    };
    ($keys:literal + $tail:ident) => {
        $keys + 1
    };
}

/// Sends `call` and reads its reply array with `decode`: every module's `call` is this.
/// Generic over the connection so that this table, which the wire reads for its metric labels,
/// does not import the wire back.
async fn run<T>(
    conn: &mut impl ConnectionLike,
    call: &ScriptInvocation<'_>,
    decode: impl FnOnce(Reply) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let values: Vec<Value> = call.invoke_async(conn).await?;
    decode(Reply::new(values))
}

/// An owner as the scripts take it: two arguments, tenant then principal.
impl redis::ToRedisArgs for crate::task::Owner {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        (&self.tenant, &self.principal).write_redis_args(out);
    }
}

/// One script file: its text, label and the key counts of its handles.
pub(super) struct File {
    pub(super) script: &'static LazyLock<Script>,
    pub(super) label: &'static str,
    /// The file's own text (without the prelude), for the header check.
    #[cfg(test)]
    source: &'static str,
    #[cfg(test)]
    key_counts: &'static [usize],
    /// The keys its header names, in order (generated).
    #[cfg(test)]
    key_names: &'static [&'static str],
    /// The tail key its table entry names (`n + name`), if any.
    #[cfg(test)]
    tails: &'static [&'static str],
}

macro_rules! scripts {
    ($($file:ident => $($name:ident: $keys:literal $(+ $tail:ident)?),+;)*) => {
        $(pub(super) mod $file;)*

        /// Each script's text: the prelude's definitions it uses, then its file (put together
        /// by `shared/build.rs`).
        #[allow(non_upper_case_globals)]
        mod text {
            $(
                pub(super) static $file: std::sync::LazyLock<redis::Script> =
                    std::sync::LazyLock::new(|| redis::Script::new(include_str!(
                        concat!(env!("OUT_DIR"), "/scripts/", stringify!($file), ".lua")
                    )));
            )*
        }
        $($(
            static $name: handle!($keys $(+ $tail)?) = <handle!($keys $(+ $tail)?)>::new(&text::$file);
        )+)*

        /// Every script, for loading at boot (so a broken one fails start-up rather than a
        /// request) and for naming commands in metrics and spans.
        pub(super) fn all() -> &'static [File] {
            static ALL: &[File] = &[$(File {
                script: &text::$file,
                label: concat!("script:", stringify!($file)),
                #[cfg(test)]
                source: include_str!(concat!("scripts/", stringify!($file), ".lua")),
                #[cfg(test)]
                key_counts: &[$(key_entries!($keys $(+ $tail)?)),+],
                #[cfg(test)]
                key_names: &$file::KEY_NAMES,
                #[cfg(test)]
                tails: &[$($(stringify!($tail),)?)*],
            },)*];
            ALL
        }
    };
}

scripts! {
    create_task => CREATE_TASK: 11;
    claim_task => CLAIM_TASK: 10;
    claim_batch => CLAIM_BATCH: 0 + shards;
    extend_lease => EXTEND_LEASE: 2;
    set_status => SET_STATUS: 1;
    request_input => REQUEST_INPUT: 6;
    accept_input => ACCEPT_INPUT: 8;
    finish_task => FINISH_TASK: 6;
    finish_batch => FINISH_BATCH: 0 + leases;
    cancel_task => CANCEL_TASK: 5;
    reclaim_task => RECLAIM_TASK: 8;
    release_task => RELEASE_TASK: 8;
    admit => ADMIT: 3;
    lease_requests => LEASE_REQUESTS: 0 + requests;
    poll_task => POLL_TASK: 4;
    read_task => READ_TASK: 3;
    reap_consumers => REAP_CONSUMERS: 1;
    publish_tools => PUBLISH_TOOLS: 9;
    read_tools => READ_TOOLS: 3;
    mark_started => MARK_STARTED: 1;
    hold_for_input => HOLD_FOR_INPUT: 5;
    held_answer => HELD_ANSWER: 2;
    save_state => SAVE_STATE: 1;
    withdraw_question => WITHDRAW_QUESTION: 4;
    fail_task => FAIL_TASK: 5;
    record_step => RECORD_STEP: 2;
    pass_wakeup => PASS_WAKEUP: 1;
    record_reveal => RECORD_REVEAL: 1;
    upsert_hook => UPSERT_HOOK: 6;
    drop_hook => DROP_HOOK: 5;
    claim_hook => CLAIM_HOOK: 2;
    renew_hook => RENEW_HOOK: 2;
    ack_hook => ACK_HOOK: 3;
    read_outbox => READ_OUTBOX: 1;
}

/// The script's label for metrics and spans (`script:<name>`), by its SHA-1.
pub(super) fn label_of(sha: &[u8]) -> Option<&'static str> {
    static HASHES: LazyLock<Vec<(String, &'static str)>> =
        LazyLock::new(|| all().iter().map(|file| (file.script.get_hash().to_owned(), file.label)).collect());
    HASHES.iter().find(|(hash, _)| hash.as_bytes() == sha).map(|(_, label)| *label)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    /// The `n` of every `KEYS[n]` in `text`.
    fn key_indexes(text: &str) -> BTreeSet<usize> {
        text.match_indices("KEYS[")
            .filter_map(|(at, _)| {
                let rest = &text[at + "KEYS[".len()..];
                rest[..rest.find(']')?].parse().ok()
            })
            .collect()
    }

    #[test]
    fn every_script_has_a_distinct_hash_and_label() {
        let all = super::all();
        for (i, file) in all.iter().enumerate() {
            assert_eq!(super::label_of(file.script.get_hash().as_bytes()), Some(file.label));
            assert!(
                all[..i]
                    .iter()
                    .all(|other| other.script.get_hash() != file.script.get_hash() && other.label != file.label)
            );
        }
        assert_eq!(super::label_of(b"0000"), None);
    }

    /// The `name` of every `KEYS[n] name:` entry in `text`, by `n`.
    fn key_entries(text: &str) -> Vec<(usize, String)> {
        text.match_indices("KEYS[")
            .filter_map(|(at, _)| {
                let rest = &text[at + "KEYS[".len()..];
                let (index, rest) = rest.split_once("] ")?;
                // `KEYS[n..]`: the keys from `n` on, one entry.
                let index = index.strip_suffix("..").unwrap_or(index);
                let (name, _) = rest.split_once(':')?;
                let named = !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
                Some((index.parse().ok()?, name.to_owned())).filter(|_| named)
            })
            .collect()
    }

    /// The header (the comment block the file opens with) names every key, `KEYS[1] name:` to
    /// `KEYS[n] name:`, and the Rust side passes those names in that order (its `Keys` are
    /// generated from them); no handle passes more, and the body reads no key past them.
    #[test]
    fn every_script_header_names_the_keys_its_handles_pass() {
        for file in super::all() {
            let header: String =
                file.source.lines().take_while(|line| line.starts_with("--")).collect::<Vec<_>>().join("\n");
            let named: Vec<(usize, String)> =
                file.key_names.iter().enumerate().map(|(i, name)| (i + 1, (*name).to_owned())).collect();
            assert_eq!(key_entries(&header), named, "{}: its header's KEYS entries against its Keys", file.label);
            let most = *file.key_counts.iter().max().expect("every script has a handle");
            assert_eq!(most, named.len(), "{}: its largest handle passes every key the header names", file.label);
            for tail in file.tails {
                let header_tail = format!("KEYS[{}..] {tail}:", named.len());
                assert!(header.contains(&header_tail), "{}: its table's tail {tail} is not {header_tail}", file.label);
            }
            let body_most = key_indexes(file.source).into_iter().max().unwrap_or(0);
            assert!(body_most <= most, "{} reads KEYS[{body_most}], past the {most} its header names", file.label);
        }
    }

    /// Every script file is in the table, and every Rust file beside them is a script's module:
    /// no script without its typed call, and no module without its script.
    #[test]
    fn every_script_file_has_its_module_and_table_line() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/store/scripts");
        let mut lua = BTreeSet::new();
        let mut rust = BTreeSet::new();
        for entry in std::fs::read_dir(dir).expect("the scripts directory") {
            let name = entry.expect("an entry").file_name().into_string().expect("a UTF-8 name");
            if let Some(script) = name.strip_suffix(".lua").filter(|s| *s != "prelude") {
                lua.insert(script.to_owned());
            } else if let Some(module) = name.strip_suffix(".rs") {
                rust.insert(module.to_owned());
            }
        }
        let table: BTreeSet<String> =
            super::all().iter().map(|file| file.label.trim_start_matches("script:").to_owned()).collect();
        assert_eq!(lua, table, "the .lua files against the scripts! table");
        assert_eq!(rust, table, "the modules against the scripts! table");
    }

    /// Each script is sent with the prelude's functions and values it uses (a `name(` call or
    /// a `NAME` read, comment lines aside), whether its own text uses them or a prelude function
    /// sent with it does, after them its own text; and without the functions nothing in it calls.
    #[test]
    fn every_script_is_sent_with_the_prelude_functions_it_calls() {
        let prelude = include_str!("scripts/prelude.lua");
        let functions: Vec<&str> =
            prelude.lines().filter_map(|line| line.strip_prefix("local function ")?.split('(').next()).collect();
        assert!(functions.len() > 10, "the prelude's functions: {functions:?}");
        let values: Vec<&str> = prelude
            .lines()
            .filter_map(|line| line.strip_prefix("local ")?.split_once(" =").map(|(name, _)| name.trim()))
            .filter(|name| !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_'))
            .collect();
        assert!(values.contains(&"REPLY"), "the prelude's values: {values:?}");
        let uses = |line: &str, word: &str, then: &str| {
            line.match_indices(word).any(|(at, _)| {
                !line[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '.')
                    && line[at + word.len()..].starts_with(then)
            })
        };
        for file in super::all() {
            let name = file.label.trim_start_matches("script:");
            let sent = std::fs::read_to_string(format!("{}/scripts/{name}.lua", env!("OUT_DIR"))).expect("sent text");
            assert!(sent.ends_with(file.source), "{name}: its own text last");
            let code: Vec<&str> = sent.lines().filter(|line| !line.trim_start().starts_with("--")).collect();
            for function in &functions {
                if code.iter().any(|line| uses(line, function, "(")) {
                    assert!(sent.contains(&format!("local function {function}(")), "{name} calls {function}");
                }
            }
            for value in &values {
                let read = |line: &&str| {
                    !line.trim_start().starts_with(&format!("local {value} ="))
                        && [" ", ")", ",", ".", "[", "]", "}", ""].iter().any(|then| {
                            if then.is_empty() { line.trim_end().ends_with(value) } else { uses(line, value, then) }
                        })
                };
                if code.iter().any(read) {
                    assert!(sent.contains(&format!("local {value} =")), "{name} reads {value}");
                }
            }
        }
        let read = std::fs::read_to_string(format!("{}/scripts/read_task.lua", env!("OUT_DIR"))).expect("sent text");
        assert!(read.contains("local function from_aside(") && !read.contains("local function enqueue("));
    }

    #[test]
    fn the_header_check_reads_key_indexes_and_names() {
        assert_eq!(key_indexes("-- KEYS[1] a   KEYS[12] b  KEYS[x] #KEYS"), BTreeSet::from([1, 12]));
        let entries = key_entries("-- KEYS[1] record: the record   [KEYS[2] tenant_index: x] KEYS[3] is named");
        assert_eq!(entries, vec![(1, "record".to_owned()), (2, "tenant_index".to_owned())]);
        assert_eq!(key_entries("-- KEYS[1..] leases: each shard's"), vec![(1, "leases".to_owned())]);
    }

    /// The prelude's `REPLY` table, as (name, code) pairs.
    fn lua_codes() -> Vec<(String, i64)> {
        let prelude = include_str!("scripts/prelude.lua");
        let table = prelude.split("local REPLY = {").nth(1).and_then(|t| t.split('}').next()).expect("a REPLY table");
        table
            .split(',')
            .filter(|entry| !entry.trim().is_empty())
            .map(|entry| {
                let (name, value) = entry.split_once('=').expect("NAME = code");
                (name.trim().to_owned(), value.trim().parse().expect("an integer code"))
            })
            .collect()
    }

    #[test]
    fn the_lua_prelude_and_rust_agree_on_every_shared_code() {
        let rust = [
            ("NOTHING", super::super::reply::code::NOTHING),
            ("OK", super::super::reply::code::OK),
            ("NOT_FOUND", super::super::reply::code::NOT_FOUND),
            ("LEASE_LOST", super::super::reply::code::LEASE_LOST),
            ("KEY_REUSED", super::super::reply::code::KEY_REUSED),
            ("OTHER_POOL", super::super::reply::code::OTHER_POOL),
            ("OTHER_OUTBOX", super::super::reply::code::OTHER_OUTBOX),
            ("CANCELLED", super::super::reply::code::CANCELLED),
            ("FAILED", super::super::reply::code::FAILED),
            ("ALREADY_ENDED", super::super::reply::code::ALREADY_ENDED),
        ];
        let mut lua = lua_codes();
        lua.sort();
        let mut rust: Vec<(String, i64)> = rust.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect();
        rust.sort();
        assert_eq!(lua, rust);
        let mut values: Vec<i64> = rust.iter().map(|(_, c)| *c).collect();
        values.dedup();
        assert_eq!(values.len(), rust.len(), "no two shared codes have one value");
    }

    #[test]
    fn every_script_names_only_codes_the_prelude_defines() {
        let names: Vec<String> = lua_codes().into_iter().map(|(n, _)| n).collect();
        for file in super::all() {
            for used in file.source.split("REPLY.").skip(1) {
                let name: String = used.chars().take_while(|c| c.is_ascii_uppercase() || *c == '_').collect();
                assert!(names.contains(&name), "{}: REPLY.{name} is not in the prelude", file.label);
            }
        }
        let prelude = include_str!("scripts/prelude.lua");
        for used in prelude.split("REPLY.").skip(1) {
            let name: String = used.chars().take_while(|c| c.is_ascii_uppercase() || *c == '_').collect();
            assert!(names.contains(&name), "prelude: REPLY.{name} is not in the table");
        }
    }
}
