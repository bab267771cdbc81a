//! A JSON Web Key Set from a file or a URL: cached, refreshed periodically, and fetched again
//! once when a token names an unknown `kid` (never more often than [`UNKNOWN_KID_GAP`], so
//! made-up kids cannot turn the gateway into a fetch amplifier).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::RwLock;
use std::time::Duration;

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey};
use tokio::time::Instant;

const UNKNOWN_KID_GAP: Duration = Duration::from_secs(1);
/// JWKS documents are small; anything larger is not one.
const MAX_JWKS_BYTES: usize = 256 * 1024;

#[derive(Debug, Clone)]
pub(crate) enum JwksSource {
    File(PathBuf),
    Url(String),
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum JwksError {
    #[error("reading the JWKS: {0}")]
    Io(String),
    #[error("parsing the JWKS: {0}")]
    Parse(String),
}

pub(crate) struct Jwks {
    source: JwksSource,
    http: reqwest::Client,
    keys: RwLock<HashMap<String, (DecodingKey, Algorithm)>>,
    fetch: tokio::sync::Mutex<Option<Instant>>,
}

impl Jwks {
    pub(crate) fn new(source: JwksSource, timeout: Duration) -> Self {
        let http = reqwest::Client::builder().timeout(timeout).build().unwrap_or_default();
        Self { source, http, keys: RwLock::default(), fetch: tokio::sync::Mutex::new(None) }
    }

    /// A key by id, fetching the set again (at most once per gap) when the id is unknown.
    pub(crate) async fn key(&self, kid: &str) -> Option<(DecodingKey, Algorithm)> {
        if let Some(key) = self.cached(kid) {
            return Some(key);
        }
        let mut last = self.fetch.lock().await;
        // Another request may have refreshed while this one waited.
        if let Some(key) = self.cached(kid) {
            return Some(key);
        }
        if last.is_some_and(|t| t.elapsed() < UNKNOWN_KID_GAP) {
            return None;
        }
        *last = Some(Instant::now());
        if let Err(err) = self.refresh().await {
            tracing::warn!(error = %err, "JWKS refresh after an unknown kid failed");
        }
        self.cached(kid)
    }

    fn cached(&self, kid: &str) -> Option<(DecodingKey, Algorithm)> {
        self.keys.read().ok()?.get(kid).cloned()
    }

    pub(crate) async fn refresh(&self) -> Result<(), JwksError> {
        let bytes = match &self.source {
            JwksSource::File(path) => std::fs::read(path).map_err(|e| JwksError::Io(e.to_string()))?,
            JwksSource::Url(url) => {
                let response = self.http.get(url).send().await.map_err(|e| JwksError::Io(e.to_string()))?;
                if !response.status().is_success() {
                    return Err(JwksError::Io(format!("HTTP {}", response.status())));
                }
                response.bytes().await.map_err(|e| JwksError::Io(e.to_string()))?.to_vec()
            }
        };
        if bytes.len() > MAX_JWKS_BYTES {
            return Err(JwksError::Parse("document too large".into()));
        }
        let set: JwkSet = serde_json::from_slice(&bytes).map_err(|e| JwksError::Parse(e.to_string()))?;
        let keys = usable_keys(&set);
        tracing::info!(keys = keys.len(), "JWKS loaded");
        *self.keys.write().expect("lock poisoned: a holder panicked") = keys;
        Ok(())
    }

    /// Refreshes every `period` until the process ends.
    pub(crate) async fn refresh_forever(self: std::sync::Arc<Self>, period: Duration) {
        let mut tick = tokio::time::interval(period);
        // The first tick is immediate, and the set was just loaded.
        tick.tick().await;
        loop {
            tick.tick().await;
            if let Err(err) = self.refresh().await {
                tracing::warn!(error = %err, "JWKS refresh failed; keeping the keys already loaded");
            }
        }
    }
}

/// Keys with a `kid` that taskgate accepts: RSA for RS256, P-256 for ES256. Each key is bound
/// to its algorithm, so a token cannot pick another (algorithm confusion).
fn usable_keys(set: &JwkSet) -> HashMap<String, (DecodingKey, Algorithm)> {
    set.keys
        .iter()
        .filter_map(|jwk| {
            let kid = jwk.common.key_id.clone()?;
            let alg = match &jwk.algorithm {
                AlgorithmParameters::RSA(_) => Algorithm::RS256,
                AlgorithmParameters::EllipticCurve(ec) if ec.curve == EllipticCurve::P256 => Algorithm::ES256,
                _ => return None,
            };
            Some((kid, (DecodingKey::from_jwk(jwk).ok()?, alg)))
        })
        .collect()
}
