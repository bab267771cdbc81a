//! JSON-RPC error objects with the codes and `data` shapes of MCP 2026-07-28.

use std::borrow::Cow;

use serde_json::{Map, Value, json};

use super::{SUPPORTED_VERSIONS, TASKS_EXTENSION};

/// The error codes taskgate emits. `-32020..=-32099` belong to the spec: no other code in that
/// range may be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    ParseError,
    InvalidRequest,
    MethodNotFound,
    InvalidParams,
    Internal,
    HeaderMismatch,
    MissingRequiredClientCapability,
    UnsupportedProtocolVersion,
    /// `-31401`: no valid credentials. taskgate's own code, outside every reserved range.
    Unauthorized,
    /// `-31403`: valid credentials without a required scope.
    Forbidden,
    /// `-31429`: a tenant limit refused the request.
    RateLimited,
    /// `-31428`: the tool's upstream server acts as the caller, and no credential is stored
    /// for the caller there (`data` names the server and what to configure).
    CredentialRequired,
    /// `-32023` (Events extension): no such event type or subscription (`data.kind`).
    NotFound,
    /// `-32024` (Events extension): the principal may not do this (a webhook without
    /// authentication, a URL outside the allow-list).
    EventsForbidden,
    /// `-32025` (Events extension): a limit (`data.limit`, `data.max`).
    ResourceExhausted,
    /// `-32027` (Events extension): the callback endpoint failed verification or could not be
    /// reached (`data.reason`, a `lastError` category).
    CallbackEndpointError,
    /// A code defined by a tool (outside the ranges the spec reserves), passed through.
    Application(i64),
}

impl ErrorKind {
    /// The kind of a code read back from storage or a tool.
    pub const fn from_code(code: i64) -> Self {
        match code {
            -32700 => Self::ParseError,
            -32600 => Self::InvalidRequest,
            -32601 => Self::MethodNotFound,
            -32602 => Self::InvalidParams,
            -32020 => Self::HeaderMismatch,
            -32021 => Self::MissingRequiredClientCapability,
            -32022 => Self::UnsupportedProtocolVersion,
            -32023 => Self::NotFound,
            -32024 => Self::EventsForbidden,
            -32025 => Self::ResourceExhausted,
            -32027 => Self::CallbackEndpointError,
            -31401 => Self::Unauthorized,
            -31403 => Self::Forbidden,
            -31429 => Self::RateLimited,
            -31428 => Self::CredentialRequired,
            // Reserved ranges a tool may not use become internal errors.
            -32768..=-32000 => Self::Internal,
            other => Self::Application(other),
        }
    }

    pub const fn code(self) -> i64 {
        match self {
            Self::ParseError => -32700,
            Self::InvalidRequest => -32600,
            Self::MethodNotFound => -32601,
            Self::InvalidParams => -32602,
            Self::Internal => -32603,
            Self::HeaderMismatch => -32020,
            Self::MissingRequiredClientCapability => -32021,
            Self::UnsupportedProtocolVersion => -32022,
            Self::NotFound => -32023,
            Self::EventsForbidden => -32024,
            Self::ResourceExhausted => -32025,
            Self::CallbackEndpointError => -32027,
            Self::Unauthorized => -31401,
            Self::Forbidden => -31403,
            Self::RateLimited => -31429,
            Self::CredentialRequired => -31428,
            Self::Application(code) => code,
        }
    }
}

/// A JSON-RPC error object. Messages are fixed strings where the spec or the conformance suite pins them, so
/// clients and tests can match on them.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub kind: ErrorKind,
    pub message: Cow<'static, str>,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(kind: ErrorKind, message: impl Into<Cow<'static, str>>) -> Self {
        Self { kind, message: message.into(), data: None }
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    pub fn code(&self) -> i64 {
        self.kind.code()
    }

    pub fn parse_error(detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::ParseError, "Parse error").with_data(json!({ "detail": detail.into() }))
    }

    pub fn invalid_request(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::InvalidRequest, message)
    }

    pub fn method_not_found() -> Self {
        Self::new(ErrorKind::MethodNotFound, "method not found")
    }

    /// `initialize` is gone in 2026-07-28. Its error names the versions a dual-era client can
    /// switch to (basic/versioning.mdx).
    pub fn initialize_removed() -> Self {
        Self::new(
            ErrorKind::MethodNotFound,
            format!(
                "method not found: initialize was removed in the stateless revision; supported versions: {}",
                SUPPORTED_VERSIONS.join(", ")
            ),
        )
        .with_data(json!({ "supported": SUPPORTED_VERSIONS }))
    }

    pub fn invalid_params(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::InvalidParams, message)
    }

    /// Internal errors say nothing specific to the client; details go to the logs.
    pub fn internal() -> Self {
        Self::new(ErrorKind::Internal, "internal error")
    }

    pub fn header_mismatch(header: &'static str, reason: impl Into<String>) -> Self {
        let reason = reason.into();
        Self::new(ErrorKind::HeaderMismatch, format!("header mismatch: {header}: {reason}"))
            .with_data(json!({ "header": header, "reason": reason }))
    }

    /// `-32021` with `data.requiredCapabilities` as a ClientCapabilities object.
    pub fn missing_capability(required: Value) -> Self {
        Self::new(ErrorKind::MissingRequiredClientCapability, "missing required client capability")
            .with_data(json!({ "requiredCapabilities": required }))
    }

    pub fn missing_tasks_extension() -> Self {
        Self::missing_capability(json!({ "extensions": { TASKS_EXTENSION: {} } }))
    }

    pub fn unsupported_version(requested: &str) -> Self {
        Self::new(ErrorKind::UnsupportedProtocolVersion, "unsupported protocol version")
            .with_data(json!({ "supported": SUPPORTED_VERSIONS, "requested": requested }))
    }

    /// A request without valid credentials.
    pub fn unauthorized() -> Self {
        Self::new(ErrorKind::Unauthorized, "authentication required: missing or invalid bearer token")
    }

    /// Valid credentials that lack a required scope.
    pub fn forbidden() -> Self {
        Self::new(ErrorKind::Forbidden, "the token lacks a required scope")
    }

    /// A request a tenant limit refused: `data` names the limit and when to retry.
    pub fn rate_limited(limit: &str, retry_after_ms: u64) -> Self {
        Self::new(ErrorKind::RateLimited, "rate limit exceeded")
            .with_data(json!({ "limit": limit, "retryAfterMs": retry_after_ms }))
    }

    /// The JSON-RPC `error` member.
    pub fn to_value(&self) -> Value {
        let mut obj = Map::with_capacity(3);
        obj.insert("code".into(), self.code().into());
        obj.insert("message".into(), Value::String(self.message.to_string()));
        if let Some(data) = &self.data {
            obj.insert("data".into(), data.clone());
        }
        Value::Object(obj)
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code())
    }
}

impl std::error::Error for RpcError {}

#[cfg(test)]
mod tests;
