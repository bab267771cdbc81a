//! Per-tenant upstream credentials: what a tenant (or one of its principals) stores so that an
//! upstream server acts as that tenant, sealed at rest.
//!
//! A credential is a set of named values (`token`, `github_token`, `root`, an OAuth
//! `refresh_token`…) that an upstream entry's templates refer to by name. Only the names are in
//! clear; the values are sealed with XChaCha20-Poly1305 under the credentials key named by the
//! record (a key ring: the first key seals, every key opens), bound to the tenant, principal
//! and upstream they were stored for, so a record copied to another tenant does not open.

mod keyring;
mod sealed;

use std::collections::BTreeMap;
use std::fmt;

pub use keyring::{KeyFrom, KeyRing, KeySource, MAX_KEYS};
pub use sealed::Sealed;

/// The `--credentials-key` option of every process that seals or opens credentials (the
/// gateway's admin API, the worker's per-identity upstreams).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct KeyArgs {
    /// A key that seals and opens per-tenant upstream credentials, as `ID=file:PATH` or
    /// `ID=env:VAR` (32 bytes, as 64 hex digits or base64; never the key itself on the command
    /// line). Repeat it, or comma-separate in the variable, to rotate: the first seals, every
    /// one opens. Without any, per-tenant credentials are off.
    #[arg(long = "credentials-key", env = "TASKGATE_CREDENTIALS_KEY", value_delimiter = ',', value_name = "ID=SOURCE")]
    pub credentials_key: Vec<String>,
}

impl KeyArgs {
    /// Each source parsed and read; `None` when none is given (an empty variable included).
    /// The error names the source, never a key.
    pub fn load(&self) -> Result<Option<KeyRing>, CredentialError> {
        let given: Vec<&str> = self.credentials_key.iter().map(|s| s.trim()).filter(|s| !s.is_empty()).collect();
        if given.is_empty() {
            return Ok(None);
        }
        let sources = given.iter().map(|s| s.parse::<KeySource>()).collect::<Result<Vec<_>, _>>()?;
        KeyRing::load(&sources).map(Some)
    }
}

/// Values a credential may hold at most, and the longest name and value: a credential is a few
/// tokens, not a store for documents.
pub const MAX_VALUES: usize = 32;
pub const MAX_NAME_LEN: usize = 64;
pub const MAX_VALUE_LEN: usize = 16 * 1024;

/// The names of the values an OAuth refresh keeps up to date.
pub const ACCESS_TOKEN: &str = "access_token";
pub const REFRESH_TOKEN: &str = "refresh_token";
/// When the access token runs out, unix milliseconds as a decimal string.
pub const EXPIRES_AT_MS: &str = "expires_at_ms";
/// The value name of a caller's own token, sealed beside its task for a token exchange.
pub const SUBJECT_TOKEN: &str = "subject_token";

/// Whom a credential belongs to: a tenant's (every principal of it), or one principal's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Holder {
    pub tenant: String,
    pub principal: Option<String>,
    pub upstream: String,
}

impl Holder {
    /// Whom the caller's own token sealed beside task `task_id` is bound to: the caller, and
    /// that task. Upstream names have no `:`, so this never names a stored credential's holder.
    pub fn subject_token(tenant: &str, principal: &str, task_id: &str) -> Self {
        Self {
            tenant: tenant.to_owned(),
            principal: Some(principal.to_owned()),
            upstream: format!("subject-token:{task_id}"),
        }
    }

    /// What the seal is bound to: the same values under another holder do not open.
    pub(crate) fn binding(&self, key_id: &str) -> Vec<u8> {
        let mut aad = b"taskgate-credential\x001\x00".to_vec();
        for part in [self.tenant.as_str(), self.principal.as_deref().unwrap_or(""), &self.upstream, key_id] {
            aad.extend_from_slice(&(part.len() as u32).to_be_bytes());
            aad.extend_from_slice(part.as_bytes());
        }
        aad.push(u8::from(self.principal.is_some()));
        aad
    }
}

/// A credential's values, in clear. Its `Debug` shows the names only, and the values are wiped
/// from memory when it is dropped.
#[derive(Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Credential {
    values: BTreeMap<String, zeroize::Zeroizing<String>>,
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credential").field("names", &self.names()).finish()
    }
}

impl Credential {
    /// Checks the values an operator gives: names of `[A-Za-z0-9_.-]`, bounded sizes.
    pub fn new(values: BTreeMap<String, String>) -> Result<Self, CredentialError> {
        if values.is_empty() {
            return Err(CredentialError::Invalid("a credential needs at least one value".into()));
        }
        if values.len() > MAX_VALUES {
            return Err(CredentialError::Invalid(format!("at most {MAX_VALUES} values")));
        }
        for (name, value) in &values {
            check_name(name)?;
            if value.len() > MAX_VALUE_LEN {
                return Err(CredentialError::Invalid(format!("value {name:?} is longer than {MAX_VALUE_LEN} bytes")));
            }
        }
        Ok(Self { values: values.into_iter().map(|(k, v)| (k, zeroize::Zeroizing::new(v))).collect() })
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(|v| v.as_str())
    }

    /// Sets one value (an OAuth refresh's new token).
    pub fn set(&mut self, name: &str, value: String) {
        self.values.insert(name.to_owned(), zeroize::Zeroizing::new(value));
    }

    pub fn names(&self) -> Vec<String> {
        self.values.keys().cloned().collect()
    }
}

/// A value name: what an upstream entry's template refers to.
pub fn check_name(name: &str) -> Result<(), CredentialError> {
    if name.is_empty()
        || name.len() > MAX_NAME_LEN
        || !name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        return Err(CredentialError::Invalid(format!(
            "value name {name:?} must be 1 to {MAX_NAME_LEN} characters of A-Z, a-z, 0-9, _, - and ."
        )));
    }
    Ok(())
}

/// Why a credential could not be sealed, opened or accepted. Never carries a value.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("invalid credential: {0}")]
    Invalid(String),
    #[error("the credential was sealed under key {0:?}, which this process was not given (--credentials-key)")]
    UnknownKey(String),
    #[error(
        "the credential does not open under key {0:?}: the key is not the one it was sealed with, or the record was altered"
    )]
    WrongKey(String),
    #[error("the credential record is malformed: {0}")]
    Malformed(String),
    #[error("bad --credentials-key: {0}")]
    Key(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(tenant: &str) -> Holder {
        Holder { tenant: tenant.into(), principal: None, upstream: "files".into() }
    }

    fn ring(spec: &[(&str, [u8; 32])]) -> KeyRing {
        KeyRing::from_keys(spec.iter().map(|(id, key)| ((*id).to_owned(), *key)).collect()).unwrap()
    }

    fn credential() -> Credential {
        Credential::new(BTreeMap::from([("token".to_owned(), "s3cret-value".to_owned())])).unwrap()
    }

    #[test]
    fn a_sealed_credential_opens_only_for_its_holder_and_shows_no_value() {
        let keys = ring(&[("k1", [7; 32])]);
        let sealed = keys.seal(&holder("a"), &credential(), 1, "op").unwrap();
        let text = sealed.to_json();
        assert!(!text.contains("s3cret"), "{text}");
        assert!(text.contains("\"token\""), "names are in clear: {text}");
        let back = keys.open(&holder("a"), &Sealed::from_json(&text).unwrap()).unwrap();
        assert_eq!(back.get("token"), Some("s3cret-value"));
        assert!(!format!("{back:?}").contains("s3cret"));
        let moved = keys.open(&holder("b"), &sealed);
        assert!(matches!(moved, Err(CredentialError::WrongKey(_))), "{moved:?}");
    }

    #[test]
    fn rotation_opens_old_records_and_seals_under_the_new_key() {
        let old = ring(&[("k1", [1; 32])]);
        let sealed = old.seal(&holder("a"), &credential(), 1, "op").unwrap();
        let rotated = ring(&[("k2", [2; 32]), ("k1", [1; 32])]);
        assert_eq!(rotated.open(&holder("a"), &sealed).unwrap().get("token"), Some("s3cret-value"));
        assert_eq!(rotated.seal(&holder("a"), &credential(), 1, "op").unwrap().key_id, "k2");
        let wrong = ring(&[("k1", [9; 32])]);
        assert!(matches!(wrong.open(&holder("a"), &sealed), Err(CredentialError::WrongKey(id)) if id == "k1"));
        let other = ring(&[("k3", [1; 32])]);
        assert!(matches!(other.open(&holder("a"), &sealed), Err(CredentialError::UnknownKey(id)) if id == "k1"));
    }

    #[test]
    fn a_subject_token_opens_only_for_its_caller_and_task() {
        let keys = ring(&[("k1", [4; 32])]);
        let jwt = Credential::new(BTreeMap::from([(SUBJECT_TOKEN.to_owned(), "eyJ.x.y".to_owned())])).unwrap();
        let sealed = keys.seal(&Holder::subject_token("acme", "alice", "tsk_1"), &jwt, 1, "gateway").unwrap();
        let opened = keys.open(&Holder::subject_token("acme", "alice", "tsk_1"), &sealed).unwrap();
        assert_eq!(opened.get(SUBJECT_TOKEN), Some("eyJ.x.y"));
        for other in [
            Holder::subject_token("acme", "bob", "tsk_1"),
            Holder::subject_token("acme", "alice", "tsk_2"),
            Holder::subject_token("other", "alice", "tsk_1"),
        ] {
            assert!(keys.open(&other, &sealed).is_err(), "{other:?}");
        }
    }

    #[test]
    fn names_and_sizes_are_checked() {
        assert!(Credential::new(BTreeMap::new()).is_err());
        assert!(Credential::new(BTreeMap::from([("a b".to_owned(), "x".to_owned())])).is_err());
        assert!(Credential::new(BTreeMap::from([("a".to_owned(), "x".repeat(MAX_VALUE_LEN + 1))])).is_err());
    }
}
