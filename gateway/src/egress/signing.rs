//! Standard Webhooks signatures: `v1,` + base64(HMAC-SHA256(key, id "." timestamp "." body)),
//! the key being the base64-decoded part of the secret after `whsec_`.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use zeroize::Zeroizing;

/// A subscription's signing secret, checked. `Debug` never shows it.
#[derive(Clone)]
pub(crate) struct WebhookSecret {
    key: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecret(<redacted>)")
    }
}

/// The secret's key length the extension allows, in bytes.
const KEY_BYTES: std::ops::RangeInclusive<usize> = 24..=64;

impl WebhookSecret {
    /// `whsec_` followed by the base64 (padded or not) of 24 to 64 bytes; `None` otherwise.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let encoded = text.strip_prefix("whsec_")?;
        let key = STANDARD.decode(encoded).or_else(|_| STANDARD_NO_PAD.decode(encoded)).ok()?;
        KEY_BYTES.contains(&key.len()).then(|| Self { key: Zeroizing::new(key) })
    }

    /// The secret as the client gave it (for sealing).
    pub(crate) fn expose(&self) -> String {
        format!("whsec_{}", STANDARD.encode(self.key.as_slice()))
    }

    /// The `v1,` signature of one attempt.
    pub(crate) fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes a key of any length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test vector every Standard Webhooks reference library checks.
    #[test]
    fn the_published_test_vector_reproduces() {
        let secret = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("24 bytes");
        let signature = secret.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, br#"{"test": 2432232314}"#);
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        assert_ne!(secret.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, br#"{"test": 2432232315}"#), signature);
    }

    #[test]
    fn secrets_are_whsec_and_24_to_64_bytes() {
        let b64 = |n: usize| STANDARD.encode(vec![7u8; n]);
        assert!(WebhookSecret::parse(&format!("whsec_{}", b64(24))).is_some());
        assert!(WebhookSecret::parse(&format!("whsec_{}", b64(64))).is_some());
        assert!(WebhookSecret::parse(&format!("whsec_{}", b64(23))).is_none());
        assert!(WebhookSecret::parse(&format!("whsec_{}", b64(65))).is_none());
        assert!(WebhookSecret::parse(&b64(32)).is_none(), "no prefix");
        assert!(WebhookSecret::parse("whsec_not base64!").is_none());
        let secret = WebhookSecret::parse(&format!("whsec_{}", b64(32))).unwrap();
        assert_eq!(secret.expose(), format!("whsec_{}", b64(32)));
        assert_eq!(format!("{secret:?}"), "WebhookSecret(<redacted>)");
    }
}
