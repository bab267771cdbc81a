//! Tool descriptors and execution policy.
//!
//! A tool's code lives in the worker; its [`ToolSpec`] is data that workers publish to Redis and
//! gateways read, so the gateway can list tools, validate arguments and decide whether a call
//! becomes a task without running any tool code.

pub mod offerings;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The wire `Tool` object of `tools/list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolDescriptor {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub input_schema: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icons: Option<Value>,
    #[serde(default, rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

/// How a `tools/call` of this tool runs. 2026-07-28 has no wire field for this; the server
/// decides per call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Execution {
    /// Only as a task: a request without the Tasks extension gets -32021.
    TaskRequired,
    /// A task when the request declares the extension, else the result inline.
    TaskOptional,
    /// Always inline; the gateway waits for the worker's result.
    SyncOnly,
}

impl Execution {
    /// The `_meta` key under which a listed tool says how a call of it runs: 2026-07-28 has no
    /// wire field for it, and clients (the `taskgate` CLI among them) want to show it.
    pub const META_KEY: &'static str = "taskgate.dev/execution";

    /// `task-required`, `task-optional` or `sync-only`: the names of the upstream config.
    pub fn label(self) -> &'static str {
        match self {
            Self::TaskRequired => "task-required",
            Self::TaskOptional => "task-optional",
            Self::SyncOnly => "sync-only",
        }
    }

    pub fn from_label(label: &str) -> Option<Self> {
        [Self::TaskRequired, Self::TaskOptional, Self::SyncOnly].into_iter().find(|e| e.label() == label)
    }
}

/// Whether `name` is a valid MCP tool name: 1 to 128 characters of `A-Z a-z 0-9 _ - .`.
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Everything a gateway needs to know about a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolSpec {
    pub descriptor: ToolDescriptor,
    pub execution: Execution,
    /// Task lifetime from creation.
    pub ttl_ms: u64,
    /// Suggested minimum polling interval.
    pub poll_interval_ms: u64,
    /// The status message a new task starts with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// Input the tool needs *before* its task exists, key -> `{method, params}`. The gateway
    /// gathers it with MRTR rounds, then creates the task with the answers recorded, so the
    /// path a call takes follows from this declaration, never from timing.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pre_task_inputs: BTreeMap<String, Value>,
    /// The tool's server exchanges the caller's own token (RFC 8693), so the gateway hands a
    /// JWT-authenticated caller's token to the worker, sealed beside the task. Internal: the
    /// gateway never lists it (`tools/list` shows the descriptor and the execution only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub subject_token: bool,
    /// A new call naming, in `_meta["io.modelcontextprotocol/relatedTaskIds"]`, a failed or
    /// cancelled task of the same caller, tool and arguments starts with that task's durable
    /// steps recorded, so it runs only the steps still missing. Opt-in per tool: it is right
    /// only for a tool whose recorded steps stay valid for a new run. Internal, as
    /// `subject_token`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reuse_steps: bool,
    /// How long a call of this tool made as a task waits for the task to end before it answers
    /// (milliseconds): ended in time, the reply is the tool's result; otherwise the task's
    /// handle. `None` follows the gateway's `--complete-within-ms`; `Some(0)` always answers
    /// with the handle. Internal, as `subject_token`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complete_within_ms: Option<u64>,
}

impl ToolSpec {
    /// A spec with a name, a description and an input schema, and nothing optional.
    pub fn new(
        name: &str,
        description: &str,
        input_schema: Value,
        execution: Execution,
        ttl_ms: u64,
        poll_interval_ms: u64,
    ) -> Self {
        Self {
            descriptor: ToolDescriptor {
                name: name.into(),
                title: None,
                description: Some(description.into()),
                input_schema,
                output_schema: None,
                annotations: None,
                icons: None,
                meta: None,
            },
            execution,
            ttl_ms,
            poll_interval_ms,
            status_message: None,
            pre_task_inputs: BTreeMap::new(),
            subject_token: false,
            reuse_steps: false,
            complete_within_ms: None,
        }
    }
}
