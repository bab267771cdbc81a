//! Which connections a call to a per-identity server runs on: the caller's credential found,
//! then the caller's instance (started when there is none); and the typed refusal of a caller
//! with no credential there, or the question that asks it to connect one.

use std::sync::Arc;

use serde_json::{Value, json};
use taskgate_shared::credentials::{Holder, REFRESH_TOKEN, SUBJECT_TOKEN};
use taskgate_shared::protocol::{ErrorKind, RpcError};

use super::config::{OAuthGrant, Per, Secret, Transport, UpstreamConfig, fill_connect_url};
use super::connection::Upstream;
use super::identity::{Credentials, IdentityError, Live, describe, fingerprint};
use super::instances::{InUse, Instances};
use crate::tool::{ToolContext, ToolError};

/// The input key of the question that asks a caller to connect its account.
const CONNECT_KEY: &str = "taskgate.connect";

/// Where a per-identity server's calls find their instance and credential.
pub(crate) struct PerIdentity {
    pub(crate) credentials: Arc<Credentials>,
    pub(crate) instances: Arc<Instances>,
}

/// The connections one call runs on.
pub(crate) enum Chosen {
    /// The server's own (a shared server).
    Shared(Arc<Upstream>),
    /// The caller's instance, held for the call.
    Own(InUse),
}

impl Chosen {
    pub(crate) fn upstream(&self) -> &Arc<Upstream> {
        match self {
            Self::Shared(upstream) => upstream,
            Self::Own(in_use) => &in_use.upstream,
        }
    }
}

impl PerIdentity {
    /// The caller's instance of `config`'s server, started with the caller's credential when
    /// there is none (or the credential changed).
    pub(crate) async fn choose(
        &self,
        config: &Arc<UpstreamConfig>,
        tenant: &str,
        principal: &str,
        task_id: &str,
    ) -> Result<Chosen, ToolError> {
        let found = match &config.oauth {
            // The caller's own token came with the task: exchanged (or the exchange cached).
            Some(oauth) if oauth.exchanges() => {
                let found = self
                    .credentials
                    .subject(config, tenant, principal, task_id)
                    .await
                    .map_err(|e| refused(config, e))?;
                self.credentials.fresh_exchanged(oauth, found).await.map_err(|e| refused(config, e))?
            }
            Some(oauth) => {
                let found = self.credentials.find(config, tenant, principal).await.map_err(|e| refused(config, e))?;
                self.credentials.fresh(oauth, found).await.map_err(|e| refused(config, e))?
            }
            None => self.credentials.find(config, tenant, principal).await.map_err(|e| refused(config, e))?,
        };
        // HTTP requests take a refreshed token as they go; a child took its values at start.
        let per_request = matches!(config.transport, Transport::Http { .. });
        let fingerprint = fingerprint(&found, per_request && config.oauth.is_some());
        let instance = Holder {
            tenant: tenant.to_owned(),
            principal: (config.per == Per::Principal).then(|| principal.to_owned()),
            upstream: config.name.clone(),
        };
        let key = (config.name.clone(), describe(&instance));
        let oauth = config.oauth.clone().filter(|_| per_request);
        let live = Live::new(self.credentials.clone(), oauth, found.clone());
        let in_use = self
            .instances
            .acquire(key, fingerprint, config.connect_timeout, |stop| {
                Upstream::start_instance(config.clone(), live.clone(), stop)
            })
            .await
            .map_err(|busy| super::errors::unavailable(&config.name, &busy.to_string()))?;
        if let Some(identity) = &in_use.upstream.identity {
            identity.saw(found).await;
        }
        Ok(Chosen::Own(in_use))
    }
}

/// A caller with no credential, at a server with a `connect_url`, whose client takes URL-mode
/// elicitation, is asked once to connect its account there (the task waits for input, holding
/// no worker); the run after the answer looks again, and is refused if there is still nothing.
/// Any other refusal, or a client without URL mode, gets `refusal` as it is.
pub(crate) fn connect_or(config: &UpstreamConfig, ctx: &ToolContext, refusal: ToolError) -> ToolError {
    // What a token exchange lacks is the caller's own token: only a new call brings one.
    let exchanges = matches!(config.oauth.as_ref().map(|o| &o.grant), Some(OAuthGrant::TokenExchange { .. }));
    let missing = !exchanges && matches!(&refusal, ToolError::Rpc(e) if e.kind == ErrorKind::CredentialRequired);
    let Some(template) = config.connect_url.as_deref().filter(|_| missing) else { return refusal };
    let url_mode = ctx.client_capabilities().pointer("/elicitation/url").is_some_and(Value::is_object);
    if !url_mode || ctx.answer(CONNECT_KEY).is_some() {
        return refusal;
    }
    let url = fill_connect_url(template, ctx.tenant(), ctx.principal(), &config.name);
    let request = json!({
        "method": "elicitation/create",
        "params": {
            "mode": "url",
            "message": format!("{} acts as you and has no credential of yours yet: connect your account, then accept to go on", config.name),
            "url": url,
        },
    });
    match ctx.input(CONNECT_KEY, request, &format!("waiting for the caller to connect an account to {}", config.name)) {
        Err(suspended) => suspended,
        Ok(_) => refusal,
    }
}

/// A call refused for want of a usable credential, as the task's error: the missing one names
/// the server and what to store, never a value.
fn refused(config: &UpstreamConfig, err: IdentityError) -> ToolError {
    if let IdentityError::NoSubjectToken { upstream, holder, tenant, principal } = &err {
        return ToolError::Rpc(
            RpcError::new(
                ErrorKind::CredentialRequired,
                format!(
                    "upstream server {upstream:?} acts as its caller with the caller's own token (token exchange), and this call by {holder} brought none that is still valid: call again, authenticated with a JWT the gateway accepts"
                ),
            )
            .with_data(serde_json::json!({
                "upstream": upstream,
                "per": config.per.label(),
                "tenant": tenant,
                "principal": principal,
                "needs": [SUBJECT_TOKEN],
                "action": "call again, authenticated with a JWT",
            })),
        );
    }
    let IdentityError::Missing { upstream, holder, tenant, principal } = &err else {
        return ToolError::Rpc(RpcError::new(ErrorKind::Internal, err.to_string()));
    };
    let needs = needed_values(config);
    let example: Vec<String> = needs.iter().map(|n| format!("--value {n}=…")).collect();
    let principal_flag = principal.as_ref().map(|p| format!(" [--principal {p}]")).unwrap_or_default();
    ToolError::Rpc(
        RpcError::new(
            ErrorKind::CredentialRequired,
            format!(
                "upstream server {upstream:?} acts as its caller, and no credential is stored for {holder}: store one with `taskgate credentials set --tenant {tenant}{principal_flag} --upstream {upstream} {}`",
                example.join(" ")
            ),
        )
        .with_data(serde_json::json!({
            "upstream": upstream,
            "per": config.per.label(),
            "tenant": tenant,
            "principal": principal,
            "needs": needs,
        })),
    )
}

/// The credential values a server's entry refers to.
pub(crate) fn needed_values(config: &UpstreamConfig) -> Vec<String> {
    let templates: Vec<&Secret> = match &config.transport {
        Transport::Stdio { args, env, cwd, .. } => args.iter().chain(env.values()).chain(cwd).collect(),
        Transport::Http { url, headers, .. } => std::iter::once(url).chain(headers.values()).collect(),
    };
    let mut names: Vec<String> = templates
        .into_iter()
        .filter_map(|t| match t {
            Secret::Credential { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect();
    match config.oauth.as_ref().map(|o| &o.grant) {
        Some(OAuthGrant::Refresh) => names.push(REFRESH_TOKEN.to_owned()),
        // Nothing is stored for these: the exchanged token comes from the caller's own.
        Some(OAuthGrant::TokenExchange { .. }) => names = vec![SUBJECT_TOKEN.to_owned()],
        None => {}
    }
    names.sort();
    names.dedup();
    names
}
