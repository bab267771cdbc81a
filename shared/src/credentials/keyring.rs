//! The credentials keys: each 32 random bytes with an id, read from a file (a mounted secret)
//! or an environment variable, never from the command line. The first key seals; every key
//! opens, so a rotation is "put the new key first, keep the old one until every record has
//! been sealed again".

use std::path::PathBuf;

use base64::Engine as _;
use chacha20poly1305::aead::{Aead as _, KeyInit as _, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use zeroize::Zeroizing;

use super::{Credential, CredentialError, Holder, Sealed};

/// Keys a ring may hold: the current one and the ones being rotated away from.
pub const MAX_KEYS: usize = 8;

/// Where one key comes from: `ID=file:PATH` or `ID=env:VAR`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySource {
    pub id: String,
    pub from: KeyFrom,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyFrom {
    File(PathBuf),
    Env(String),
}

impl std::str::FromStr for KeySource {
    type Err = CredentialError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || {
            CredentialError::Key(format!(
                "{text:?} must be ID=file:PATH or ID=env:VAR (the key itself never goes on a command line)"
            ))
        };
        let (id, from) = text.split_once('=').ok_or_else(bad)?;
        if id.is_empty() || id.len() > 32 || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
            return Err(CredentialError::Key(format!(
                "key id {id:?} must be 1 to 32 characters of A-Z, a-z, 0-9, - and _"
            )));
        }
        let from = match from.split_once(':') {
            Some(("file", path)) if !path.is_empty() => KeyFrom::File(path.into()),
            Some(("env", var)) if !var.is_empty() => KeyFrom::Env(var.into()),
            _ => return Err(bad()),
        };
        Ok(Self { id: id.to_owned(), from })
    }
}

impl KeySource {
    /// Reads the key: 64 hex digits or the standard base64 of 32 bytes, surrounding whitespace
    /// ignored. The error names the source, never its content.
    pub fn read(&self) -> Result<[u8; 32], CredentialError> {
        let text = Zeroizing::new(match &self.from {
            KeyFrom::File(path) => std::fs::read_to_string(path).map_err(|err| {
                CredentialError::Key(format!("key {:?}: cannot read {}: {err}", self.id, path.display()))
            })?,
            KeyFrom::Env(var) => std::env::var(var).map_err(|_| {
                CredentialError::Key(format!("key {:?}: environment variable {var} is not set", self.id))
            })?,
        });
        decode_key(text.trim()).ok_or_else(|| {
            CredentialError::Key(format!("key {:?} must be 32 bytes as 64 hex digits or base64", self.id))
        })
    }
}

fn decode_key(text: &str) -> Option<[u8; 32]> {
    let bytes = Zeroizing::new(if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        (0..32).map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()).collect::<Option<Vec<u8>>>()?
    } else {
        base64::engine::general_purpose::STANDARD.decode(text).ok()?
    });
    bytes.as_slice().try_into().ok()
}

/// The keys a process seals and opens credentials with.
pub struct KeyRing {
    keys: Vec<(String, Zeroizing<[u8; 32]>)>,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyRing").field("ids", &self.ids()).finish()
    }
}

impl KeyRing {
    /// Reads every source; the first is the key that seals.
    pub fn load(sources: &[KeySource]) -> Result<Self, CredentialError> {
        Self::from_keys(sources.iter().map(|s| Ok((s.id.clone(), s.read()?))).collect::<Result<_, CredentialError>>()?)
    }

    pub fn from_keys(keys: Vec<(String, [u8; 32])>) -> Result<Self, CredentialError> {
        if keys.is_empty() || keys.len() > MAX_KEYS {
            return Err(CredentialError::Key(format!("give 1 to {MAX_KEYS} keys")));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (id, _) in &keys {
            if !seen.insert(id.clone()) {
                return Err(CredentialError::Key(format!("key id {id:?} is given twice")));
            }
        }
        Ok(Self { keys: keys.into_iter().map(|(id, key)| (id, Zeroizing::new(key))).collect() })
    }

    pub fn ids(&self) -> Vec<&str> {
        self.keys.iter().map(|(id, _)| id.as_str()).collect()
    }

    /// The id new records are sealed under.
    pub fn current(&self) -> &str {
        &self.keys[0].0
    }

    /// Seals `credential` for `holder` under the current key, with a fresh random nonce.
    pub fn seal(
        &self,
        holder: &Holder,
        credential: &Credential,
        at_ms: u64,
        by: &str,
    ) -> Result<Sealed, CredentialError> {
        let (id, key) = &self.keys[0];
        let cipher = XChaCha20Poly1305::new(key.as_ref().into());
        let nonce: [u8; 24] = rand::random();
        let clear =
            Zeroizing::new(serde_json::to_vec(credential).map_err(|err| CredentialError::Malformed(err.to_string()))?);
        let aad = holder.binding(id);
        let sealed = cipher
            .encrypt(XNonce::from_slice(&nonce), Payload { msg: &clear, aad: &aad })
            .map_err(|_| CredentialError::Malformed("sealing failed".into()))?;
        Ok(Sealed {
            key_id: id.clone(),
            nonce: nonce.to_vec(),
            sealed,
            names: credential.names(),
            set_at_ms: at_ms,
            set_by: by.to_owned(),
        })
    }

    /// Opens a record stored for `holder`.
    pub fn open(&self, holder: &Holder, record: &Sealed) -> Result<Credential, CredentialError> {
        let (id, key) = self
            .keys
            .iter()
            .find(|(id, _)| *id == record.key_id)
            .ok_or_else(|| CredentialError::UnknownKey(record.key_id.clone()))?;
        if record.nonce.len() != 24 {
            return Err(CredentialError::Malformed("the nonce is not 24 bytes".into()));
        }
        let cipher = XChaCha20Poly1305::new(key.as_ref().into());
        let aad = holder.binding(id);
        let clear = Zeroizing::new(
            cipher
                .decrypt(XNonce::from_slice(&record.nonce), Payload { msg: &record.sealed, aad: &aad })
                .map_err(|_| CredentialError::WrongKey(id.clone()))?,
        );
        serde_json::from_slice(&clear)
            .map_err(|_| CredentialError::Malformed("the opened values are not a credential".into()))
    }

    /// Whether `record` is sealed under a key other than the current one (a rotation's work).
    pub fn is_stale(&self, record: &Sealed) -> bool {
        record.key_id != self.current()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_parsed_and_read_from_files_and_the_environment() {
        let dir = tempfile_dir();
        let path = dir.join("k");
        std::fs::write(&path, format!("{}\n", "ab".repeat(32))).unwrap();
        let source: KeySource = format!("k1=file:{}", path.display()).parse().unwrap();
        assert_eq!(source.read().unwrap(), [0xab; 32]);
        assert!("k1".parse::<KeySource>().is_err());
        assert!("k1=0123".parse::<KeySource>().is_err());
        assert!("=file:/x".parse::<KeySource>().is_err());
        let missing: KeySource = "k1=env:TASKGATE_TEST_NO_SUCH_KEY_VAR".parse().unwrap();
        assert!(missing.read().unwrap_err().to_string().contains("TASKGATE_TEST_NO_SUCH_KEY_VAR"));
        std::fs::write(&path, "not a key").unwrap();
        let err = source.read().unwrap_err().to_string();
        assert!(err.contains("32 bytes") && !err.contains("not a key"), "{err}");
        let b64 = base64::engine::general_purpose::STANDARD.encode([5u8; 32]);
        assert_eq!(decode_key(&b64), Some([5; 32]));
        assert!(KeyRing::from_keys(vec![("a".into(), [0; 32]), ("a".into(), [1; 32])]).is_err());
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("taskgate-keyring-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
