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

use crate::config::{AuthMode, Config};
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
fn bearer(headers: &HeaderMap) -> Result<&str, AuthError> {
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
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    ApiKeys(#[from] ApiKeysError),
    #[error(transparent)]
    Jwt(#[from] JwtSetupError),
}

/// The authenticator and challenge of the configured mode.
pub(crate) async fn build(config: &Config) -> Result<(Authenticator, Option<Challenge>), AuthSetupError> {
    let resource = config.resource_url();
    let challenge =
        Challenge::new(resource.clone(), config.authorization_servers.clone(), config.jwt_required_scopes.clone());
    Ok(match config.auth {
        AuthMode::None => (Authenticator::Anonymous, None),
        AuthMode::ApiKeys => {
            let path = config.api_keys_file.as_deref().ok_or(crate::config::ConfigError::NoApiKeys)?;
            (Authenticator::ApiKeys(api_keys::ApiKeys::load(path)?), Some(challenge))
        }
        AuthMode::Jwt => {
            let jwks = match (&config.jwks_file, &config.jwks_url) {
                (Some(path), None) => Some(JwksSource::File(path.clone())),
                (None, Some(url)) => Some(JwksSource::Url(url.clone())),
                (None, None) => None,
                (Some(_), Some(_)) => return Err(JwtSetupError::KeySource.into()),
            };
            let verifier = jwt::JwtVerifier::new(jwt::JwtConfig {
                hs256_secret: config.jwt_hs256_secret()?,
                jwks,
                jwks_refresh: std::time::Duration::from_millis(config.jwks_refresh_ms.max(1_000)),
                issuer: config.jwt_issuer.clone(),
                audience: config.jwt_audience.clone().unwrap_or(resource),
                tenant_claim: config.jwt_tenant_claim.clone(),
                required_scopes: config.jwt_required_scopes.clone(),
                leeway_s: config.jwt_leeway_s,
                fetch_timeout: config.redis_timeout().max(std::time::Duration::from_secs(5)),
            })
            .await?;
            (Authenticator::Jwt(Box::new(verifier)), Some(challenge))
        }
    })
}
