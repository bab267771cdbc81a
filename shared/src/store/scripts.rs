//! The Lua scripts, loaded once per process. `invoke_async` sends EVALSHA and falls back to
//! EVAL (then caches) when a server does not know the script yet.

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($name:ident, $file:literal) => {
        pub(super) static $name: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!($file)));
    };
}

script!(CREATE_TASK, "scripts/create_task.lua");
script!(CLAIM_TASK, "scripts/claim_task.lua");
script!(EXTEND_LEASE, "scripts/extend_lease.lua");
script!(SET_STATUS, "scripts/set_status.lua");
script!(REQUEST_INPUT, "scripts/request_input.lua");
script!(ACCEPT_INPUT, "scripts/accept_input.lua");
script!(FINISH_TASK, "scripts/finish_task.lua");
script!(CANCEL_TASK, "scripts/cancel_task.lua");
script!(RECLAIM_TASK, "scripts/reclaim_task.lua");
script!(RELEASE_TASK, "scripts/release_task.lua");
script!(ADMIT, "scripts/admit.lua");
script!(POLL_TASK, "scripts/poll_task.lua");
script!(READ_TASK, "scripts/read_task.lua");
script!(REAP_CONSUMERS, "scripts/reap_consumers.lua");
script!(PUBLISH_TOOLS, "scripts/publish_tools.lua");
script!(READ_TOOLS, "scripts/read_tools.lua");
script!(MARK_STARTED, "scripts/mark_started.lua");
script!(HOLD_FOR_INPUT, "scripts/hold_for_input.lua");
script!(HELD_ANSWER, "scripts/held_answer.lua");
script!(SAVE_STATE, "scripts/save_state.lua");
script!(WITHDRAW_QUESTION, "scripts/withdraw_question.lua");

/// The script's label for metrics and spans (`script:<name>`), by its SHA-1.
pub(super) fn label_of(sha: &[u8]) -> Option<&'static str> {
    static NAMES: LazyLock<Vec<(String, &'static str)>> = LazyLock::new(|| {
        let names = [
            "script:create_task",
            "script:claim_task",
            "script:extend_lease",
            "script:set_status",
            "script:request_input",
            "script:accept_input",
            "script:finish_task",
            "script:cancel_task",
            "script:reclaim_task",
            "script:release_task",
            "script:admit",
            "script:poll_task",
            "script:read_task",
            "script:reap_consumers",
            "script:publish_tools",
            "script:read_tools",
            "script:mark_started",
            "script:hold_for_input",
            "script:held_answer",
            "script:save_state",
            "script:withdraw_question",
        ];
        all().iter().zip(names).map(|(script, name)| (script.get_hash().to_owned(), name)).collect()
    });
    NAMES.iter().find(|(hash, _)| hash.as_bytes() == sha).map(|(_, name)| *name)
}

/// Every script, for loading at boot so a broken one fails start-up rather than a request.
pub(super) fn all() -> [&'static Script; 21] {
    [
        &CREATE_TASK,
        &CLAIM_TASK,
        &EXTEND_LEASE,
        &SET_STATUS,
        &REQUEST_INPUT,
        &ACCEPT_INPUT,
        &FINISH_TASK,
        &CANCEL_TASK,
        &RECLAIM_TASK,
        &RELEASE_TASK,
        &ADMIT,
        &POLL_TASK,
        &READ_TASK,
        &REAP_CONSUMERS,
        &PUBLISH_TOOLS,
        &READ_TOOLS,
        &MARK_STARTED,
        &HOLD_FOR_INPUT,
        &HELD_ANSWER,
        &SAVE_STATE,
        &WITHDRAW_QUESTION,
    ]
}
