//! Bearer JWTs: HS256 with a shared secret, or RS256/ES256 through a JWKS. Checks `exp` and
//! `nbf` (with leeway), `iss`, and `aud`, which must equal the configured resource URI. The
//! tenant comes from a configurable claim, the principal from `sub`. Verified tokens are cached
//! until they expire.

use std::sync::Arc;
use std::time::Duration;

use jsonwebtoken::errors::ErrorKind as JwtErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::jwks::{Jwks, JwksSource};
use super::token_cache::TokenCache;
use super::{AuthError, Principal};

/// How tokens are checked.
#[derive(Debug, Clone)]
pub(crate) struct JwtConfig {
    pub(crate) hs256_secret: Option<Vec<u8>>,
    pub(crate) jwks: Option<JwksSource>,
    pub(crate) jwks_refresh: Duration,
    pub(crate) issuer: Option<String>,
    pub(crate) audience: String,
    pub(crate) tenant_claim: String,
    pub(crate) required_scopes: Vec<String>,
    pub(crate) leeway_s: u64,
    pub(crate) fetch_timeout: Duration,
}

enum Keys {
    Hs256(DecodingKey),
    Jwks(Arc<Jwks>),
}

pub(crate) struct JwtVerifier {
    keys: Keys,
    config: JwtConfig,
    cache: TokenCache,
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
    exp: u64,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<Vec<String>>,
    #[serde(flatten)]
    extra: Map<String, Value>,
}

/// A JWT configuration that cannot run.
#[derive(Debug, thiserror::Error)]
pub enum JwtSetupError {
    #[error("--auth jwt needs exactly one key source: an HS256 secret or a JWKS (file or URL)")]
    KeySource,
    #[error("the HS256 secret must be at least 32 bytes")]
    ShortSecret,
}

impl JwtVerifier {
    /// Builds the verifier; a JWKS is loaded now (failures are logged, and retried by the
    /// refresher) and refreshed in the background.
    pub(crate) async fn new(config: JwtConfig) -> Result<Self, JwtSetupError> {
        let keys = match (&config.hs256_secret, &config.jwks) {
            (Some(secret), None) => {
                if secret.len() < 32 {
                    return Err(JwtSetupError::ShortSecret);
                }
                Keys::Hs256(DecodingKey::from_secret(secret).map_err(|_| JwtSetupError::ShortSecret)?)
            }
            (None, Some(source)) => {
                let jwks = Arc::new(Jwks::new(source.clone(), config.fetch_timeout));
                if let Err(err) = jwks.refresh().await {
                    tracing::error!(error = %err, "initial JWKS load failed; tokens are refused until it loads");
                }
                tokio::spawn(jwks.clone().refresh_forever(config.jwks_refresh));
                Keys::Jwks(jwks)
            }
            _ => return Err(JwtSetupError::KeySource),
        };
        Ok(Self { keys, config, cache: TokenCache::new(100_000) })
    }

    pub(crate) async fn verify(&self, token: &str) -> Result<Principal, AuthError> {
        let now = now_s();
        let cache_key = TokenCache::key(token);
        if let Some(principal) = self.cache.get(&cache_key, now) {
            return Ok(principal);
        }
        let header = jsonwebtoken::decode_header(token).map_err(|_| AuthError::Invalid("malformed token"))?;
        let (key, alg) = match &self.keys {
            Keys::Hs256(key) => (key.clone(), Algorithm::HS256),
            Keys::Jwks(jwks) => {
                let kid = header.kid.as_deref().ok_or(AuthError::Invalid("token has no kid"))?;
                jwks.key(kid).await.ok_or(AuthError::Invalid("unknown kid"))?
            }
        };
        if header.alg != alg {
            return Err(AuthError::Invalid("algorithm not allowed for this key"));
        }
        let mut validation = Validation::new(alg);
        validation.leeway = self.config.leeway_s;
        validation.validate_nbf = true;
        validation.set_audience(&[&self.config.audience]);
        let mut required = vec!["exp", "sub", "aud"];
        if let Some(issuer) = &self.config.issuer {
            validation.set_issuer(&[issuer]);
            required.push("iss");
        }
        validation.set_required_spec_claims(&required);
        let claims = jsonwebtoken::decode::<Claims>(token, &key, &validation)
            .map_err(|e| AuthError::Invalid(reason(e.kind())))?
            .claims;
        let tenant = claims
            .extra
            .get(&self.config.tenant_claim)
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or(AuthError::Invalid("no tenant claim"))?;
        if claims.sub.is_empty() {
            return Err(AuthError::Invalid("empty sub"));
        }
        let scopes: Vec<&str> = match (&claims.scope, &claims.scp) {
            (Some(scope), _) => scope.split_whitespace().collect(),
            (None, Some(scp)) => scp.iter().map(String::as_str).collect(),
            (None, None) => Vec::new(),
        };
        if !self.config.required_scopes.iter().all(|s| scopes.contains(&s.as_str())) {
            return Err(AuthError::InsufficientScope);
        }
        let scopes = scopes.into_iter().map(str::to_owned).collect();
        let principal = Principal::new(tenant, claims.sub, scopes).with_jwt_expiry(claims.exp);
        self.cache.insert(cache_key, principal.clone(), claims.exp.saturating_add(self.config.leeway_s), now);
        Ok(principal)
    }
}

fn reason(kind: &JwtErrorKind) -> &'static str {
    match kind {
        JwtErrorKind::ExpiredSignature => "expired",
        JwtErrorKind::ImmatureSignature => "not yet valid",
        JwtErrorKind::InvalidAudience => "wrong audience",
        JwtErrorKind::InvalidIssuer => "wrong issuer",
        JwtErrorKind::InvalidSignature => "bad signature",
        JwtErrorKind::MissingRequiredClaim(_) => "missing claim",
        JwtErrorKind::InvalidAlgorithm => "algorithm not allowed",
        _ => "invalid token",
    }
}

fn now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}
