//! API keys: a file of SHA-256 key hashes, each mapped to a tenant and a principal. The file
//! holds no key itself, so reading it does not grant access.
//!
//! Format, one key per line (`#` starts a comment):
//! `<sha256 hex of the key> <tenant> <principal> [scope,scope…]`
//! The optional fourth field lists the key's scopes, for example `taskgate:operator` for the
//! operator console.

use std::collections::HashMap;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::{AuthError, Principal};

pub(crate) struct ApiKeys {
    by_hash: HashMap<String, Principal>,
}

/// An API-key file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ApiKeysError {
    #[error("cannot read the API-key file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("API-key file line {line}: expected `<sha256 hex> <tenant> <principal> [scope,scope…]`")]
    Line { line: usize },
}

impl ApiKeys {
    pub(crate) fn load(path: &Path) -> Result<Self, ApiKeysError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ApiKeysError::Read { path: path.display().to_string(), source })?;
        let mut by_hash = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (hash, tenant, principal, scopes) = match fields[..] {
                [hash, tenant, principal] => (hash, tenant, principal, ""),
                [hash, tenant, principal, scopes] => (hash, tenant, principal, scopes),
                _ => return Err(ApiKeysError::Line { line: i + 1 }),
            };
            let scopes = scopes.split(',').filter(|s| !s.is_empty()).map(str::to_owned).collect();
            if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(ApiKeysError::Line { line: i + 1 });
            }
            by_hash.insert(hash.to_ascii_lowercase(), Principal::new(tenant, principal, scopes));
        }
        Ok(Self { by_hash })
    }

    pub(crate) fn verify(&self, key: &str) -> Result<Principal, AuthError> {
        let hash: String = Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
        self.by_hash.get(&hash).cloned().ok_or(AuthError::Invalid("unknown API key"))
    }
}
