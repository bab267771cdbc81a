//! Entry points for the fuzz targets in `fuzz/`: the checks every request passes before it
//! touches Redis, callable without a running gateway. Not a stable API.

use axum::http::HeaderMap;
use serde_json::{Value, json};
use taskgate_shared::protocol::{RpcError, envelope};

use crate::mrtr::state::{Expected, StateKeys};

/// Content negotiation, the JSON-RPC envelope, the method, `_meta` and the mirrored headers, in
/// the order the gateway runs them. Every refusal must be a JSON-RPC error that serializes.
pub fn wire(headers: &HeaderMap, body: &[u8], strict_headers: bool) -> Result<(), RpcError> {
    crate::http::transport::negotiate(headers)
        .map_err(|framing| crate::error::GatewayError::Framing(framing).answer().error)?;
    let message = envelope::parse(body).map_err(|bad| bad.error)?;
    crate::mcp::admit(strict_headers, headers, &message).map(drop)
}

/// Verifies a hostile `requestState` against a fixed key: it must be refused, never panic.
pub fn request_state(token: &str) -> Result<(), RpcError> {
    let key = "fuzz:MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDE=".parse().map_err(|_| RpcError::internal())?;
    let keys = StateKeys::new(&[key]);
    let digest = crate::mrtr::state::digest(&json!({}));
    let expect = Expected { subject: "t/p", method: "tools/call", tool: "x", args_digest: &digest };
    keys.verify(token, &expect, 0).map(drop)
}

/// The error as a client would receive it.
pub fn error_json(err: &RpcError) -> Value {
    envelope::failure(&Value::Null, err)
}
