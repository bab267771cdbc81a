//! Per-request `_meta` validation. Capabilities are read from this request alone: nothing is
//! remembered between requests.

use serde_json::{Map, Value};

use super::{RpcError, SUPPORTED_VERSIONS, TASKS_EXTENSION, meta_keys};

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

/// Validates `params._meta` in the order the conformance suite expects: `_meta`, version string, version support,
/// capabilities, then `clientInfo` when present.
///
/// `check_headers` runs after the version is known to be a string and before its support is
/// checked, so a client whose `MCP-Protocol-Version` header disagrees with the body learns
/// that (-32020) rather than that the body's version is unsupported.
pub fn validate(
    params: &Map<String, Value>,
    check_headers: impl FnOnce(&str) -> Result<(), RpcError>,
) -> Result<ValidMeta, RpcError> {
    let meta = params
        .get("_meta")
        .and_then(Value::as_object)
        .ok_or_else(|| RpcError::invalid_params("missing request _meta"))?;
    let version = meta
        .get(meta_keys::PROTOCOL_VERSION)
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("missing protocol version"))?;
    check_headers(version)?;
    if !SUPPORTED_VERSIONS.contains(&version) {
        return Err(RpcError::unsupported_version(version));
    }
    let capabilities = meta
        .get(meta_keys::CLIENT_CAPABILITIES)
        .and_then(Value::as_object)
        .ok_or_else(|| RpcError::invalid_params("missing client capabilities"))?;
    if let Some(info) = meta.get(meta_keys::CLIENT_INFO) {
        validate_client_info(info)?;
    }
    let traceparent = meta.get("traceparent").and_then(Value::as_str).map(str::to_owned);
    let progress_token = meta.get("progressToken").filter(|t| t.is_string() || t.is_i64() || t.is_u64()).cloned();
    let log_level = meta.get(meta_keys::LOG_LEVEL).and_then(Value::as_str).map(str::to_owned);
    Ok(ValidMeta {
        protocol_version: version.to_owned(),
        capabilities: capabilities.clone(),
        traceparent,
        progress_token,
        log_level,
    })
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
