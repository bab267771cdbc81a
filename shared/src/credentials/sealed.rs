//! A sealed credential as Redis keeps it: one JSON document per holder, the names and who set
//! it when in clear (what the console and `credentials list` show), the values sealed.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD_NO_PAD as B64;
use serde::{Deserialize, Serialize};

use super::CredentialError;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sealed {
    /// The credentials key it is sealed under.
    #[serde(rename = "kid")]
    pub key_id: String,
    #[serde(with = "b64")]
    pub nonce: Vec<u8>,
    /// The values, sealed (ciphertext and tag).
    #[serde(rename = "ct", with = "b64")]
    pub sealed: Vec<u8>,
    /// The names of its values: not secret, and what a listing shows.
    pub names: Vec<String>,
    /// When and by whom (`tenant/principal`) it was set.
    #[serde(rename = "at")]
    pub set_at_ms: u64,
    #[serde(rename = "by")]
    pub set_by: String,
}

impl Sealed {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn from_json(text: &str) -> Result<Self, CredentialError> {
        serde_json::from_str(text).map_err(|err| CredentialError::Malformed(err.to_string()))
    }
}

mod b64 {
    use super::*;

    pub(super) fn serialize<S: serde::Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&B64.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        B64.decode(text).map_err(serde::de::Error::custom)
    }
}
