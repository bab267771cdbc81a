//! The Lua scripts, loaded once per process. `invoke_async` sends EVALSHA and falls back to
//! EVAL (then caches) when a server does not know the script yet.
//!
//! The table below is the only list: it makes each script's handle, its metric label
//! (`script:<file>`) and the list loaded at boot. Every script starts with `prelude.lua`, the
//! helpers they share.

use std::sync::LazyLock;

use redis::Script;

macro_rules! scripts {
    ($($name:ident => $file:literal,)*) => {
        $(
            pub(super) static $name: LazyLock<Script> =
                LazyLock::new(|| Script::new(concat!(
                    include_str!("scripts/prelude.lua"),
                    include_str!(concat!("scripts/", $file, ".lua"))
                )));
        )*

        /// Every script with its label, for loading at boot (so a broken one fails start-up
        /// rather than a request) and for naming commands in metrics and spans.
        pub(super) fn all() -> &'static [(&'static LazyLock<Script>, &'static str)] {
            static ALL: &[(&LazyLock<Script>, &str)] = &[$((&$name, concat!("script:", $file)),)*];
            ALL
        }
    };
}

scripts! {
    CREATE_TASK => "create_task",
    CLAIM_TASK => "claim_task",
    EXTEND_LEASE => "extend_lease",
    SET_STATUS => "set_status",
    REQUEST_INPUT => "request_input",
    ACCEPT_INPUT => "accept_input",
    FINISH_TASK => "finish_task",
    CANCEL_TASK => "cancel_task",
    RECLAIM_TASK => "reclaim_task",
    RELEASE_TASK => "release_task",
    ADMIT => "admit",
    POLL_TASK => "poll_task",
    READ_TASK => "read_task",
    REAP_CONSUMERS => "reap_consumers",
    PUBLISH_TOOLS => "publish_tools",
    READ_TOOLS => "read_tools",
    MARK_STARTED => "mark_started",
    HOLD_FOR_INPUT => "hold_for_input",
    HELD_ANSWER => "held_answer",
    SAVE_STATE => "save_state",
    WITHDRAW_QUESTION => "withdraw_question",
    FAIL_TASK => "fail_task",
    RECORD_STEP => "record_step",
    PASS_WAKEUP => "pass_wakeup",
}

/// The script's label for metrics and spans (`script:<name>`), by its SHA-1.
pub(super) fn label_of(sha: &[u8]) -> Option<&'static str> {
    static HASHES: LazyLock<Vec<(String, &'static str)>> =
        LazyLock::new(|| all().iter().map(|(script, label)| (script.get_hash().to_owned(), *label)).collect());
    HASHES.iter().find(|(hash, _)| hash.as_bytes() == sha).map(|(_, label)| *label)
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_script_has_a_distinct_hash_and_label() {
        let all = super::all();
        for (i, (script, label)) in all.iter().enumerate() {
            assert_eq!(super::label_of(script.get_hash().as_bytes()), Some(*label));
            assert!(all[..i].iter().all(|(other, name)| other.get_hash() != script.get_hash() && name != label));
        }
        assert_eq!(super::label_of(b"0000"), None);
    }
}
