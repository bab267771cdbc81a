//! Who is calling. Every request is authenticated (there is no session), and every task belongs
//! to the (tenant, principal) pair taken from authentication, never from the body.

mod api_keys;
mod challenge;
mod jwks;
mod jwt;
mod principal;
mod token_cache;

use axum::http::{HeaderMap, header};

pub use api_keys::ApiKeysError;
pub(crate) use challenge::Challenge;
pub use jwt::JwtSetupError;
pub use principal::Principal;

use crate::config::{Auth, Config, JwtKeys};
use jwks::JwksSource;

/// Why a request is not authenticated. Reasons are for logs and metrics, never for clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AuthError {
    /// No usable `Authorization: Bearer` header.
    Missing,
    /// A token that does not verify; the reason names the check that failed.
    Invalid(&'static str),
    /// A valid token without every required scope.
    InsufficientScope,
}

impl AuthError {
    /// The reason, for logs and the `reason` label (a closed set of static strings).
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Invalid(reason) => reason,
            Self::InsufficientScope => "insufficient_scope",
        }
    }
}

/// The configured authentication mode.
pub(crate) enum Authenticator {
    Anonymous,
    Jwt(Box<jwt::JwtVerifier>),
    ApiKeys(api_keys::ApiKeys),
}

impl Authenticator {
    pub(crate) async fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, AuthError> {
        match self {
            Self::Anonymous => Ok(Principal::anonymous()),
            Self::Jwt(verifier) => verifier.verify(bearer(headers)?).await,
            Self::ApiKeys(keys) => keys.verify(bearer(headers)?),
        }
    }
}

/// The credentials of `Authorization: Bearer …` (tokens are never taken from the URL).
pub(crate) fn bearer(headers: &HeaderMap) -> Result<&str, AuthError> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let value = values.next().ok_or(AuthError::Missing)?;
    if values.next().is_some() {
        return Err(AuthError::Invalid("several Authorization headers"));
    }
    let value = value.to_str().map_err(|_| AuthError::Invalid("unreadable Authorization header"))?;
    let (scheme, token) = value.split_once(' ').ok_or(AuthError::Missing)?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(AuthError::Missing);
    }
    Ok(token.trim())
}

/// Why the configured authentication cannot start.
#[derive(Debug, thiserror::Error)]
pub enum AuthSetupError {
    #[error(transparent)]
    ApiKeys(#[from] ApiKeysError),
    #[error(transparent)]
    Jwt(#[from] JwtSetupError),
}

/// The authenticator and challenge of the configured mode.
pub(crate) async fn build(config: &Config) -> Result<(Authenticator, Option<Challenge>), AuthSetupError> {
    let challenge = Challenge::new(
        config.resource.url.clone(),
        config.resource.authorization_servers.clone(),
        config.resource.required_scopes.clone(),
    );
    Ok(match &config.auth {
        Auth::None => (Authenticator::Anonymous, None),
        Auth::ApiKeys(path) => (Authenticator::ApiKeys(api_keys::ApiKeys::load(path)?), Some(challenge)),
        Auth::Jwt(settings) => {
            let (hs256_secret, jwks) = match &settings.keys {
                JwtKeys::Hs256(secret) => (Some(secret.clone()), None),
                JwtKeys::JwksFile(path) => (None, Some(JwksSource::File(path.clone()))),
                JwtKeys::JwksUrl(url) => (None, Some(JwksSource::Url(url.clone()))),
            };
            let verifier = jwt::JwtVerifier::new(jwt::JwtConfig {
                hs256_secret,
                jwks,
                jwks_refresh: settings.jwks_refresh,
                issuer: settings.issuer.clone(),
                audience: settings.audience.clone(),
                tenant_claim: settings.tenant_claim.clone(),
                required_scopes: config.resource.required_scopes.clone(),
                leeway_s: settings.leeway_s,
                fetch_timeout: config.redis.timeout.max(std::time::Duration::from_secs(5)),
            })
            .await?;
            (Authenticator::Jwt(Box::new(verifier)), Some(challenge))
        }
    })
}
