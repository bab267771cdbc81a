//! Per-request `_meta` validation. Capabilities are read from this request alone: nothing is
//! remembered between requests.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::params::{present, text, value};
use super::{RpcError, SUPPORTED_VERSIONS, TASKS_EXTENSION};

/// The validated `_meta` of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidMeta {
    pub protocol_version: String,
    pub capabilities: Map<String, Value>,
    /// W3C trace context, when the client sent one in `_meta`.
    pub traceparent: Option<String>,
    /// `_meta.progressToken` (a string or an integer), when the client wants progress.
    pub progress_token: Option<Value>,
    /// `_meta["io.modelcontextprotocol/logLevel"]`: the least severe log level the client wants
    /// as `notifications/message` (deprecated, but honoured).
    pub log_level: Option<String>,
    /// `_meta["io.taskgate/idempotencyKey"]`: the body's form of the `Idempotency-Key` header,
    /// for clients that cannot set a header per request. Checked where it is used.
    pub idempotency_key: Option<String>,
    /// `_meta["io.modelcontextprotocol/relatedTaskIds"]`: task ids the client says this call
    /// relates to, advisory (an Agents working group draft extending the Tasks extension).
    /// Duplicates removed, in the order first sent; empty when absent or empty. Nothing here
    /// says whether they exist or whose they are: the call checks them as `tasks/get` would.
    pub related_task_ids: Vec<String>,
}

impl ValidMeta {
    /// True when `clientCapabilities.extensions` declares the Tasks extension (its value is not
    /// inspected: the extension defines no settings).
    pub fn declares_tasks(&self) -> bool {
        self.capabilities
            .get("extensions")
            .and_then(Value::as_object)
            .is_some_and(|ext| ext.contains_key(TASKS_EXTENSION))
    }
}

/// The `_meta` members taskgate reads, borrowed raw; the rest are skipped unread.
#[derive(Deserialize)]
struct Members<'a> {
    #[serde(rename = "io.modelcontextprotocol/protocolVersion", default, borrow, deserialize_with = "present")]
    version: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/clientCapabilities", default, borrow, deserialize_with = "present")]
    capabilities: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/clientInfo", default, borrow, deserialize_with = "present")]
    client_info: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    traceparent: Option<&'a RawValue>,
    #[serde(rename = "progressToken", default, borrow, deserialize_with = "present")]
    progress_token: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/logLevel", default, borrow, deserialize_with = "present")]
    log_level: Option<&'a RawValue>,
    #[serde(rename = "io.taskgate/idempotencyKey", default, borrow, deserialize_with = "present")]
    idempotency_key: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/relatedTaskIds", default, borrow, deserialize_with = "present")]
    related_task_ids: Option<&'a RawValue>,
}

/// The `_meta` member that carries an idempotency key.
pub const IDEMPOTENCY_KEY_META: &str = "io.taskgate/idempotencyKey";

/// The `_meta` member of a `tools/call` result answered in the call's own reply although a
/// task was made for it: the task's id, so the caller can still read the task with `tasks/get`
/// or name it in `relatedTaskIds`. (The 2025-11-25 `io.modelcontextprotocol/related-task` key
/// is gone from the Tasks extension, so taskgate's own prefix carries it.)
pub const TASK_ID_META: &str = "io.taskgate/taskId";

/// The `_meta` member that names a call's related tasks (read on `tools/call`, passed on to an
/// upstream server's `tools/call` with the caller's own ids only).
pub const RELATED_TASK_IDS_META: &str = "io.modelcontextprotocol/relatedTaskIds";

/// Validates `params._meta` in the order the conformance suite expects: `_meta`, version string, version support,
/// capabilities, then `clientInfo` when present.
///
/// `check_headers` runs after the version is known to be a string and before its support is
/// checked, so a client whose `MCP-Protocol-Version` header disagrees with the body learns
/// that (-32020) rather than that the body's version is unsupported.
pub fn validate(
    meta: Option<&RawValue>,
    check_headers: impl FnOnce(&str) -> Result<(), RpcError>,
) -> Result<ValidMeta, RpcError> {
    let missing = || RpcError::invalid_params("missing request _meta");
    let meta = meta.filter(|raw| raw.get().starts_with('{')).ok_or_else(missing)?;
    let meta: Members<'_> =
        serde_json::from_str(meta.get()).map_err(|err| RpcError::invalid_params(format!("invalid _meta: {err}")))?;
    let version = text(meta.version).ok_or_else(|| RpcError::invalid_params("missing protocol version"))?;
    check_headers(&version)?;
    if !SUPPORTED_VERSIONS.contains(&version.as_ref()) {
        return Err(RpcError::unsupported_version(&version));
    }
    // Decoded straight into the map a task keeps: no tree of the whole request, no clone.
    let capabilities: Map<String, Value> = meta
        .capabilities
        .and_then(|raw| serde_json::from_str(raw.get()).ok())
        .ok_or_else(|| RpcError::invalid_params("missing client capabilities"))?;
    if let Some(info) = meta.client_info {
        validate_client_info(&value(Some(info)).unwrap_or_default())?;
    }
    let progress_token = value(meta.progress_token).filter(|t| t.is_string() || t.is_i64() || t.is_u64());
    let idempotency_key = match meta.idempotency_key {
        None => None,
        Some(raw) => Some(
            text(Some(raw))
                .ok_or_else(|| RpcError::invalid_params(format!("{IDEMPOTENCY_KEY_META} must be a string")))?
                .into_owned(),
        ),
    };
    let related_task_ids = match meta.related_task_ids {
        None => Vec::new(),
        Some(raw) => related_ids(raw)?,
    };
    Ok(ValidMeta {
        protocol_version: version.into_owned(),
        capabilities,
        traceparent: text(meta.traceparent).map(Cow::into_owned),
        progress_token,
        log_level: text(meta.log_level).map(Cow::into_owned),
        idempotency_key,
        related_task_ids,
    })
}

/// The related task ids as sent, duplicates dropped, the first [`MAX_RELATED_TASK_IDS`]
/// distinct ones kept (the rest are ignored, not refused): an array of strings, or a `_meta`
/// error (a client bug is better found than hidden; `null` is not an array either).
fn related_ids(raw: &RawValue) -> Result<Vec<String>, RpcError> {
    let refused = || RpcError::invalid_params(format!("{RELATED_TASK_IDS_META} must be an array of task id strings"));
    let ids: Vec<Cow<'_, str>> = serde_json::from_str(raw.get()).map_err(|_| refused())?;
    let mut kept: Vec<String> = Vec::new();
    for id in ids {
        if kept.len() == MAX_RELATED_TASK_IDS {
            // Still read to the end: a non-string past the cap is refused all the same.
            continue;
        }
        if !kept.iter().any(|k| k.as_str() == id.as_ref()) {
            kept.push(id.into_owned());
        }
    }
    Ok(kept)
}

/// How many distinct related task ids one call uses; entries past them are ignored.
pub const MAX_RELATED_TASK_IDS: usize = 16;

/// `_meta.traceparent` alone, for the request's span before the method runs. Most requests
/// carry none, and those are not parsed for it.
pub fn traceparent(meta: Option<&RawValue>) -> Option<Cow<'_, str>> {
    let meta = meta.filter(|raw| raw.get().contains("\"traceparent\""))?;
    text(serde_json::from_str::<Members<'_>>(meta.get()).ok()?.traceparent)
}

/// `clientInfo` is an `Implementation`: string `name` and `version` are required, and the
/// optional descriptive fields must be strings when present.
fn validate_client_info(info: &Value) -> Result<(), RpcError> {
    let invalid = || RpcError::invalid_params("invalid client info");
    let info = info.as_object().ok_or_else(invalid)?;
    for required in ["name", "version"] {
        if !info.get(required).is_some_and(Value::is_string) {
            return Err(invalid());
        }
    }
    for optional in ["title", "description", "websiteUrl"] {
        if info.get(optional).is_some_and(|v| !v.is_string()) {
            return Err(invalid());
        }
    }
    if info.get("icons").is_some_and(|v| !v.is_array()) {
        return Err(invalid());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
