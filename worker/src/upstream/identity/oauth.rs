//! The token endpoint: RFC 6749 section 6 (a stored refresh token buys a new access token) and
//! RFC 8693 (the caller's own token buys one for this server). The endpoint's answer is hostile
//! input: bounded, and only its documented fields are read.

use serde::Deserialize;
use taskgate_shared::credentials::{ACCESS_TOKEN, Credential, EXPIRES_AT_MS, REFRESH_TOKEN};

use super::now_ms;
use crate::upstream::config::{OAuthConfig, OAuthGrant};

/// The largest token response read.
const MAX_RESPONSE: usize = 64 * 1024;

const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const JWT_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    token_type: Option<String>,
    expires_in: Option<u64>,
    refresh_token: Option<String>,
}

#[derive(Deserialize)]
struct TokenError {
    error: String,
}

/// `credential` with a new access token (and the new refresh token, when the server rotates
/// it). The error names the endpoint's `error` code or the failure, never a token.
pub(super) async fn refresh(
    http: &reqwest::Client,
    config: &OAuthConfig,
    credential: &Credential,
) -> Result<Credential, String> {
    let refresh_token =
        credential.get(REFRESH_TOKEN).ok_or_else(|| format!("the stored credential has no {REFRESH_TOKEN:?}"))?;
    let form = vec![("grant_type", "refresh_token".to_owned()), ("refresh_token", refresh_token.to_owned())];
    let token = post(http, config, form).await?;
    let mut refreshed = credential.clone();
    apply(&mut refreshed, token);
    Ok(refreshed)
}

/// RFC 8693: the caller's own JWT `subject` exchanged for an access token to this server (and
/// the refresh token the endpoint may issue with it). The subject token goes only to the token
/// endpoint, never to the server itself.
pub(super) async fn exchange(
    http: &reqwest::Client,
    config: &OAuthConfig,
    subject: &str,
) -> Result<Credential, String> {
    let OAuthGrant::TokenExchange { audience, resource, scope } = &config.grant else {
        return Err("the server's grant is not token_exchange".into());
    };
    let mut form = vec![
        ("grant_type", TOKEN_EXCHANGE.to_owned()),
        ("subject_token", subject.to_owned()),
        ("subject_token_type", JWT_TOKEN_TYPE.to_owned()),
        ("audience", audience.clone()),
    ];
    if let Some(resource) = resource {
        form.push(("resource", resource.clone()));
    }
    if let Some(scope) = scope {
        form.push(("scope", scope.clone()));
    }
    let token = post(http, config, form).await?;
    let mut exchanged = Credential::default();
    apply(&mut exchanged, token);
    Ok(exchanged)
}

/// The token response's values into `credential`.
fn apply(credential: &mut Credential, token: TokenResponse) {
    credential.set(ACCESS_TOKEN, token.access_token);
    if let Some(rotated) = token.refresh_token {
        credential.set(REFRESH_TOKEN, rotated);
    }
    // Without `expires_in` the token is taken to last an hour, and refreshed before that.
    let lifetime_ms = token.expires_in.unwrap_or(3_600).saturating_mul(1_000);
    credential.set(EXPIRES_AT_MS, now_ms().saturating_add(lifetime_ms).to_string());
}

/// POSTs `form` with the client's credentials to the token endpoint; its bearer token answer.
async fn post(
    http: &reqwest::Client,
    config: &OAuthConfig,
    mut form: Vec<(&'static str, String)>,
) -> Result<TokenResponse, String> {
    form.push(("client_id", config.client_id.clone()));
    if let Some(secret) = &config.client_secret {
        form.push(("client_secret", secret.resolve()?));
    }
    let response = http
        .post(&config.token_url)
        .header(reqwest::header::ACCEPT, "application/json")
        .form(&form)
        .send()
        .await
        .map_err(|err| format!("the token endpoint did not answer: {}", err.without_url()))?;
    let status = response.status();
    let body = read_bounded(response).await?;
    if !status.is_success() {
        let code = serde_json::from_slice::<TokenError>(&body).map(|e| e.error).unwrap_or_default();
        let code: String = code.chars().filter(|c| c.is_ascii_graphic()).take(64).collect();
        return Err(format!("the token endpoint answered {status} {code}").trim_end().to_owned());
    }
    let token: TokenResponse =
        serde_json::from_slice(&body).map_err(|_| "the token endpoint's answer is not a token response".to_owned())?;
    if token.token_type.as_deref().is_some_and(|t| !t.eq_ignore_ascii_case("bearer")) {
        return Err("the token endpoint issued a token that is not a bearer token".into());
    }
    Ok(token)
}

async fn read_bounded(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) =
        response.chunk().await.map_err(|err| format!("reading the token response: {}", err.without_url()))?
    {
        if body.len() + chunk.len() > MAX_RESPONSE {
            return Err("the token response is too large".into());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
