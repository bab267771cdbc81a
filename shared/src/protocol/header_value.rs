//! Mirrored header values (`Mcp-Name`, `Mcp-Param-*`): the `=?base64?…?=` sentinel that carries
//! values which are not plain printable ASCII.

use std::borrow::Cow;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

const PREFIX: &str = "=?base64?";
const SUFFIX: &str = "?=";

/// Why a header value could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderValueError {
    #[error("contains bytes outside printable ASCII")]
    NotPrintable,
    #[error("invalid base64 in =?base64?...?= value")]
    BadBase64,
    #[error("base64 value is not UTF-8")]
    NotUtf8,
}

/// Decodes a raw header value: trims surrounding whitespace, then strictly decodes the base64
/// sentinel when the whole value is wrapped in it. A partly wrapped value is literal.
pub fn decode(raw: &[u8]) -> Result<Cow<'_, str>, HeaderValueError> {
    if raw.iter().any(|b| !(0x20..=0x7e).contains(b) && *b != b'\t') {
        return Err(HeaderValueError::NotPrintable);
    }
    // Checked above: every byte is ASCII.
    let text = std::str::from_utf8(raw).map_err(|_| HeaderValueError::NotPrintable)?.trim_matches([' ', '\t']);
    match text.strip_prefix(PREFIX).and_then(|rest| rest.strip_suffix(SUFFIX)) {
        Some(b64) if text.len() >= PREFIX.len() + SUFFIX.len() => {
            let bytes = STANDARD.decode(b64).map_err(|_| HeaderValueError::BadBase64)?;
            String::from_utf8(bytes).map(Cow::Owned).map_err(|_| HeaderValueError::NotUtf8)
        }
        _ => Ok(Cow::Borrowed(text)),
    }
}

/// Encodes a value for a mirrored header: plain when it is printable ASCII without surrounding
/// whitespace and does not itself look like a sentinel, else wrapped.
pub fn encode(value: &str) -> String {
    let plain = value.bytes().all(|b| (0x20..=0x7e).contains(&b))
        && value.trim() == value
        && !(value.starts_with(PREFIX) && value.ends_with(SUFFIX));
    if plain { value.to_owned() } else { format!("{PREFIX}{}{SUFFIX}", STANDARD.encode(value)) }
}

#[cfg(test)]
mod tests;
