//! `requestState`: the MRTR continuation, carried by the client and trusted only after its MAC
//! checks out (the client can read it, so it holds no secrets).
//!
//! Format: `v1.<key id>.<base64url(payload JSON)>.<base64url(HMAC-SHA256(key, "v1.<kid>.<payload>"))>`.
//! The payload binds the principal, the method, the tool, a digest of the arguments, an expiry
//! and the answers gathered so far. Keys rotate by id: the first configured key signs, every
//! configured key verifies.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use taskgate_shared::protocol::RpcError;

use crate::config::SigningKey;

type HmacSha256 = Hmac<Sha256>;

const VERSION: &str = "v1";

/// The keys, signing key first.
#[derive(Clone)]
pub(crate) struct StateKeys {
    keys: Vec<SigningKey>,
}

/// What a verified state says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StatePayload {
    /// The caller, as [`Owner::key`](taskgate_shared::task::Owner::key) names it.
    pub(crate) sub: String,
    pub(crate) method: String,
    pub(crate) tool: String,
    /// SHA-256 hex of the canonical arguments.
    pub(crate) args: String,
    /// Unix ms after which the state is refused.
    pub(crate) exp: u64,
    /// Answers gathered in earlier rounds, key -> response.
    pub(crate) answers: BTreeMap<String, Value>,
    /// What the inline run that parked for these questions leaves for the retry's run.
    #[serde(flatten)]
    pub(crate) carried: Carried,
}

/// What an inline run that parked for input hands to the retry's run, which is a new hidden
/// task. Signed like the rest of the state, so a client can neither read a meaning into it nor
/// forge it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Carried {
    /// The state the tool saved: the retry's run starts from it (an upstream server's own
    /// `requestState` and round, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) resume: Option<String>,
    /// The durable steps the run recorded (step name -> result JSON): the retry's run replays
    /// them instead of running them again, as a task's run after an answer does.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) steps: BTreeMap<String, String>,
}

impl StateKeys {
    /// The configured keys (parsed with the config). None yields one random key for this
    /// process, which only works while every retry reaches the same replica.
    pub(crate) fn new(keys: &[SigningKey]) -> Self {
        let mut keys = keys.to_vec();
        if keys.is_empty() {
            keys.push(SigningKey { id: "ephemeral".into(), secret: rand::random::<[u8; 32]>().to_vec() });
        }
        Self { keys }
    }

    pub(crate) fn is_ephemeral(&self) -> bool {
        self.keys.len() == 1 && self.keys[0].id == "ephemeral"
    }

    pub(crate) fn sign(&self, payload: &StatePayload) -> String {
        let key = &self.keys[0];
        let body = B64.encode(serde_json::to_vec(payload).unwrap_or_default());
        let signed = format!("{VERSION}.{}.{body}", key.id);
        let mac = B64.encode(mac(&key.secret, &signed).finalize().into_bytes());
        format!("{signed}.{mac}")
    }

    /// Verifies integrity, then binding, then expiry; every failure is -32602 with its reason.
    pub(crate) fn verify(&self, token: &str, expect: &Expected<'_>, now_ms: u64) -> Result<StatePayload, RpcError> {
        let bad = |reason: &'static str| RpcError::invalid_params(reason);
        let mut parts = token.split('.');
        let (Some(version), Some(kid), Some(body), Some(tag), None) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("invalid requestState encoding"));
        };
        let tag = B64.decode(tag).map_err(|_| bad("invalid requestState encoding"))?;
        let key = self.keys.iter().find(|k| k.id == kid);
        let signed = &token[..token.len() - parts_len_tail(token)];
        let valid = version == VERSION && key.is_some_and(|k| mac(&k.secret, signed).verify_slice(&tag).is_ok());
        if !valid {
            return Err(bad("requestState integrity check failed"));
        }
        let payload: StatePayload = B64
            .decode(body)
            .ok()
            .and_then(|raw| serde_json::from_slice(&raw).ok())
            .ok_or_else(|| bad("invalid requestState payload"))?;
        if payload.sub != expect.subject {
            return Err(bad("requestState principal mismatch"));
        }
        if payload.method != expect.method || payload.tool != expect.tool {
            return Err(bad("requestState method mismatch"));
        }
        if payload.args != expect.args_digest {
            return Err(bad("requestState arguments mismatch"));
        }
        if payload.exp <= now_ms {
            return Err(bad("requestState expired"));
        }
        Ok(payload)
    }
}

/// What a state must be bound to.
pub(crate) struct Expected<'a> {
    pub(crate) subject: &'a str,
    pub(crate) method: &'a str,
    pub(crate) tool: &'a str,
    pub(crate) args_digest: &'a str,
}

/// SHA-256 hex of canonical JSON (object keys sorted, compact).
pub(crate) fn digest(arguments: &Value) -> String {
    let hash = Sha256::digest(arguments.to_string().as_bytes());
    hash.iter().map(|b| format!("{b:02x}")).collect()
}

fn mac(secret: &[u8], signed: &str) -> HmacSha256 {
    // HMAC accepts keys of any length.
    let mut mac = HmacSha256::new_from_slice(secret).unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
    mac.update(signed.as_bytes());
    mac
}

/// Length of `.<tag>` at the end of a token.
fn parts_len_tail(token: &str) -> usize {
    token.rfind('.').map_or(0, |i| token.len() - i)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Keys of these ids, each secret 32 bytes of one value.
    fn keyed(keys: &[(&str, u8)]) -> StateKeys {
        let parsed: Vec<SigningKey> = keys
            .iter()
            .map(|(id, byte)| format!("{id}:{}", base64::engine::general_purpose::STANDARD.encode([*byte; 32])))
            .map(|entry| entry.parse().unwrap())
            .collect();
        StateKeys::new(&parsed)
    }

    fn keys() -> StateKeys {
        keyed(&[("k1", 7)])
    }

    fn payload() -> StatePayload {
        StatePayload {
            sub: "default/anonymous".into(),
            method: "tools/call".into(),
            tool: "t".into(),
            args: digest(&json!({"a": 1})),
            exp: 2_000,
            answers: BTreeMap::new(),
            carried: Carried::default(),
        }
    }

    fn expected(args: &str) -> Expected<'_> {
        Expected { subject: "default/anonymous", method: "tools/call", tool: "t", args_digest: args }
    }

    #[test]
    fn the_state_to_resume_from_is_signed_with_the_answers() {
        let keys = keys();
        let carried = Carried {
            resume: Some("{\"rounds\":1}".into()),
            steps: BTreeMap::from([("step-0".to_owned(), "{\"n\":0}".to_owned())]),
        };
        let resumed = StatePayload { carried, ..payload() };
        let token = keys.sign(&resumed);
        let args = digest(&json!({"a": 1}));
        assert_eq!(keys.verify(&token, &expected(&args), 1_000).unwrap().carried, resumed.carried);
        assert_ne!(token, keys.sign(&payload()), "the state is part of what is signed");
    }

    #[test]
    fn round_trip_and_every_refusal() {
        let keys = keys();
        let token = keys.sign(&payload());
        let args = digest(&json!({"a": 1}));
        assert_eq!(keys.verify(&token, &expected(&args), 1_000).unwrap(), payload());
        let msg = |r: Result<StatePayload, RpcError>| r.unwrap_err().message.to_string();
        assert_eq!(msg(keys.verify("garbage", &expected(&args), 1_000)), "invalid requestState encoding");
        let mut tampered = token.clone();
        tampered.insert(10, 'x');
        assert_eq!(msg(keys.verify(&tampered, &expected(&args), 1_000)), "requestState integrity check failed");
        assert_eq!(msg(keys.verify(&token, &expected("other"), 1_000)), "requestState arguments mismatch");
        assert_eq!(msg(keys.verify(&token, &expected(&args), 2_000)), "requestState expired");
        let other = keyed(&[("k1", 8)]);
        assert_eq!(msg(other.verify(&token, &expected(&args), 1_000)), "requestState integrity check failed");
    }

    #[test]
    fn rotated_keys_still_verify() {
        let old = keys();
        let token = old.sign(&payload());
        let rotated = keyed(&[("k2", 9), ("k1", 7)]);
        assert!(rotated.verify(&token, &expected(&digest(&json!({"a": 1}))), 1_000).is_ok());
        assert!(rotated.sign(&payload()).starts_with("v1.k2."));
    }

    #[test]
    fn short_or_malformed_keys_are_refused() {
        assert!("k1:c2hvcnQ=".parse::<SigningKey>().is_err(), "too short");
        assert!("nocolon".parse::<SigningKey>().is_err());
        let refused = "bad id!:MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDE=".parse::<SigningKey>().unwrap_err();
        assert!(!refused.to_string().contains("MDEy"), "the secret is never shown: {refused}");
        assert!(StateKeys::new(&[]).is_ephemeral());
    }
}
