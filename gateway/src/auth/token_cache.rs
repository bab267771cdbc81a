//! Verified tokens, kept until they expire so signature checks stay off the hot path. Keyed by
//! the SHA-256 of the token, so the cache holds no usable credential.

use std::collections::HashMap;
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use super::Principal;

pub(crate) struct TokenCache {
    entries: Mutex<HashMap<[u8; 32], (Principal, u64)>>,
    capacity: usize,
}

impl TokenCache {
    pub(crate) fn new(capacity: usize) -> Self {
        Self { entries: Mutex::new(HashMap::new()), capacity }
    }

    pub(crate) fn key(token: &str) -> [u8; 32] {
        Sha256::digest(token.as_bytes()).into()
    }

    /// The principal of a token verified before and not yet expired.
    pub(crate) fn get(&self, key: &[u8; 32], now: u64) -> Option<Principal> {
        let entries = self.entries.lock().expect("lock poisoned: a holder panicked");
        entries.get(key).filter(|(_, exp)| *exp > now).map(|(p, _)| p.clone())
    }

    pub(crate) fn insert(&self, key: [u8; 32], principal: Principal, exp: u64, now: u64) {
        let mut entries = self.entries.lock().expect("lock poisoned: a holder panicked");
        if entries.len() >= self.capacity {
            entries.retain(|_, (_, e)| *e > now);
            if entries.len() >= self.capacity {
                // Still full of live tokens: start over rather than grow without bound.
                entries.clear();
            }
        }
        entries.insert(key, (principal, exp));
    }
}
