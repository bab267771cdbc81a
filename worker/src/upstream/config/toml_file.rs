//! The TOML form of the upstream servers file: one `[[upstream]]` table per server, each error
//! named by its line and field.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use taskgate_shared::tools::Execution;

use super::{
    ConfigError, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_MAX_IN_FLIGHT, ElicitationPolicy, OAuthConfig, OAuthGrant, Per,
    Secret, ToolSettings, Transport, UpstreamConfig, check_name, check_settings, check_url, execution, line_at,
    longest_timeout, looks_secret,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlFile {
    #[serde(default)]
    upstream: Vec<toml::Spanned<TomlUpstream>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlUpstream {
    name: String,
    command: Option<String>,
    #[serde(default)]
    args: Vec<TomlValue>,
    #[serde(default)]
    env: BTreeMap<String, TomlValue>,
    #[serde(default)]
    env_from: Vec<String>,
    cwd: Option<TomlValue>,
    url: Option<TomlValue>,
    #[serde(default)]
    headers: BTreeMap<String, TomlValue>,
    read_timeout_ms: Option<u64>,
    prefix: Option<String>,
    connect_timeout_ms: Option<u64>,
    instances: Option<u16>,
    max_in_flight: Option<u32>,
    tools: Option<Vec<String>>,
    #[serde(default)]
    deny_tools: Vec<String>,
    // The server-wide tool settings (serde cannot flatten with unknown fields denied).
    #[serde(default, deserialize_with = "execution")]
    execution: Option<Execution>,
    ttl_ms: Option<u64>,
    poll_interval_ms: Option<u64>,
    timeout_ms: Option<u64>,
    max_timeout_ms: Option<u64>,
    retry_on_reclaim: Option<bool>,
    complete_within_ms: Option<u64>,
    #[serde(default)]
    elicitation: ElicitationPolicy,
    follow_tasks: Option<bool>,
    #[serde(default)]
    prompts: bool,
    #[serde(default)]
    resources: bool,
    #[serde(default)]
    tool: BTreeMap<String, ToolSettings>,
    #[serde(default)]
    per: Per,
    oauth: Option<TomlOAuth>,
    connect_url: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlOAuth {
    token_url: String,
    client_id: String,
    client_secret: Option<TomlValue>,
    /// `refresh_token` (the default) or `token_exchange`.
    grant: Option<String>,
    audience: Option<String>,
    resource: Option<String>,
    scope: Option<String>,
    refresh_before_ms: Option<u64>,
}

/// A value given inline, or `{ env = "VAR" }`, `{ file = "PATH" }` or `{ credential = "NAME" }`
/// (the caller's, with an optional `catalogue` value for the listing connection), each with an
/// optional prefix.
#[derive(Deserialize)]
#[serde(untagged)]
enum TomlValue {
    Value(String),
    From {
        env: Option<String>,
        file: Option<PathBuf>,
        credential: Option<String>,
        catalogue: Option<String>,
        #[serde(default)]
        prefix: String,
    },
}

pub(super) fn parse_toml(text: &str, path: &str) -> Result<Vec<UpstreamConfig>, ConfigError> {
    let file: TomlFile = toml::from_str(text).map_err(|err| ConfigError {
        path: path.into(),
        line: err.span().map(|span| line_at(text, span.start)),
        message: err.message().to_owned(),
    })?;
    file.upstream
        .into_iter()
        .map(|entry| {
            let span = entry.span();
            let raw = entry.into_inner();
            let fail = |field: &str, message: String| ConfigError {
                path: path.into(),
                line: Some(field_line(text, span.clone(), field)),
                message: format!("upstream {:?}: `{field}`: {message}", raw.name),
            };
            check_name(&raw.name).map_err(|m| fail("name", m))?;
            let transport = match (raw.command, raw.url) {
                (Some(command), None) => {
                    let mut env = BTreeMap::new();
                    for (name, value) in raw.env {
                        let secret = value.into_secret().map_err(|m| fail("env", format!("{name:?}: {m}")))?;
                        env.insert(name, secret);
                    }
                    let args = raw
                        .args
                        .into_iter()
                        .map(TomlValue::into_secret)
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|m| fail("args", m))?;
                    let cwd = raw.cwd.map(TomlValue::into_secret).transpose().map_err(|m| fail("cwd", m))?;
                    for name in raw.env_from {
                        env.insert(name.clone(), Secret::Env { name, prefix: String::new() });
                    }
                    if command.trim().is_empty() {
                        return Err(fail("command", "is empty".into()));
                    }
                    if raw.read_timeout_ms.is_some() {
                        return Err(fail("read_timeout_ms", "applies to HTTP upstreams only".into()));
                    }
                    Transport::Stdio { command, args, env, cwd }
                }
                (None, Some(url)) => {
                    let url = url.into_secret().map_err(|m| fail("url", m))?;
                    if let Secret::Value(url) = &url {
                        check_url(url).map_err(|m| fail("url", m))?;
                    }
                    if !raw.args.is_empty() || !raw.env.is_empty() || !raw.env_from.is_empty() || raw.cwd.is_some() {
                        return Err(fail("url", "an HTTP upstream takes no `args`, `env`, `env_from` or `cwd`".into()));
                    }
                    let mut headers = BTreeMap::new();
                    for (name, header) in raw.headers {
                        if matches!(header, TomlValue::Value(_)) && looks_secret(&name) {
                            return Err(fail(
                                "headers",
                                format!("{name:?} carries a credential: give it as {{ env = \"VAR\" }} or {{ file = \"PATH\" }}, never inline"),
                            ));
                        }
                        let secret = header.into_secret().map_err(|m| fail("headers", format!("{name:?}: {m}")))?;
                        headers.insert(name, secret);
                    }
                    let read_timeout = match raw.read_timeout_ms {
                        Some(0) => return Err(fail("read_timeout_ms", "must be at least 1".into())),
                        Some(ms) => ms,
                        None => longest_timeout(raw.timeout_ms, &raw.tool),
                    };
                    Transport::Http { url, headers, read_timeout: Duration::from_millis(read_timeout) }
                }
                (Some(_), Some(_)) => return Err(fail("url", "give either `command` (stdio) or `url` (HTTP), not both".into())),
                (None, None) => return Err(fail("command", "give `command` (stdio) or `url` (HTTP)".into())),
            };
            let prefix = raw.prefix.unwrap_or_else(|| format!("{}__", raw.name));
            let instances = raw.instances.unwrap_or(1);
            if instances == 0 || instances > 64 {
                return Err(fail("instances", "must be 1 to 64".into()));
            }
            if matches!(transport, Transport::Http { .. }) && instances != 1 {
                return Err(fail("instances", "applies to stdio children only".into()));
            }
            let max_in_flight = raw.max_in_flight.unwrap_or(DEFAULT_MAX_IN_FLIGHT);
            if max_in_flight == 0 {
                return Err(fail("max_in_flight", "must be at least 1".into()));
            }
            let defaults = ToolSettings {
                execution: raw.execution,
                ttl_ms: raw.ttl_ms,
                poll_interval_ms: raw.poll_interval_ms,
                timeout_ms: raw.timeout_ms,
                max_timeout_ms: raw.max_timeout_ms,
                retry_on_reclaim: raw.retry_on_reclaim,
                complete_within_ms: raw.complete_within_ms,
            };
            check_settings(&defaults).map_err(|(f, m)| fail(f, m))?;
            for (tool, settings) in &raw.tool {
                check_settings(settings).map_err(|(f, m)| fail(&format!("tool.{tool}.{f}"), m))?;
            }
            let oauth = raw.oauth.map(|o| o.into_config()).transpose().map_err(|m| fail("oauth", m))?;
            Ok(UpstreamConfig {
                name: raw.name,
                transport,
                prefix,
                connect_timeout: Duration::from_millis(raw.connect_timeout_ms.unwrap_or(DEFAULT_CONNECT_TIMEOUT_MS)),
                instances,
                max_in_flight,
                allow: raw.tools,
                deny: raw.deny_tools,
                defaults,
                tools: raw.tool,
                elicitation: raw.elicitation,
                follow_tasks: raw.follow_tasks.unwrap_or(true),
                prompts: raw.prompts,
                resources: raw.resources,
                per: raw.per,
                oauth,
                connect_url: raw.connect_url,
            })
        })
        .collect()
}

impl TomlValue {
    fn into_secret(self) -> Result<Secret, String> {
        match self {
            Self::Value(value) => Ok(Secret::Value(value)),
            Self::From { env: Some(name), file: None, credential: None, catalogue: None, prefix } => {
                Ok(Secret::Env { name, prefix })
            }
            Self::From { env: None, file: Some(path), credential: None, catalogue: None, prefix } => {
                Ok(Secret::File { path, prefix })
            }
            Self::From { env: None, file: None, credential: Some(name), catalogue, prefix } => {
                taskgate_shared::credentials::check_name(&name).map_err(|e| e.to_string())?;
                Ok(Secret::Credential { name, prefix, catalogue })
            }
            Self::From { .. } => {
                Err("give exactly one of `env`, `file` or `credential` (`catalogue` goes with `credential`)".into())
            }
        }
    }
}

impl TomlOAuth {
    fn into_config(self) -> Result<OAuthConfig, String> {
        check_url(&self.token_url).map_err(|m| format!("token_url {m}"))?;
        if self.client_id.is_empty() {
            return Err("client_id is empty".into());
        }
        let grant = match (self.grant.as_deref().unwrap_or("refresh_token"), self.audience) {
            ("refresh_token", None) if self.resource.is_none() && self.scope.is_none() => OAuthGrant::Refresh,
            ("refresh_token", _) => {
                return Err("`audience`, `resource` and `scope` go with grant = \"token_exchange\"".into());
            }
            ("token_exchange", Some(audience)) if !audience.is_empty() => {
                if self.resource.as_deref().is_some_and(|r| check_url(r).is_err()) {
                    return Err("resource must be an http:// or https:// URL (RFC 8707)".into());
                }
                OAuthGrant::TokenExchange { audience, resource: self.resource, scope: self.scope }
            }
            ("token_exchange", _) => {
                return Err("grant = \"token_exchange\" needs `audience`: the server the token is for".into());
            }
            (other, _) => return Err(format!("unknown grant {other:?}: expected refresh_token or token_exchange")),
        };
        let client_secret = self.client_secret.map(TomlValue::into_secret).transpose()?;
        if client_secret.as_ref().is_some_and(|s| matches!(s, Secret::Value(_) | Secret::Credential { .. })) {
            return Err("client_secret is a secret: give it as { env = \"VAR\" } or { file = \"PATH\" }".into());
        }
        Ok(OAuthConfig {
            token_url: self.token_url,
            client_id: self.client_id,
            client_secret,
            grant,
            refresh_before: Duration::from_millis(self.refresh_before_ms.unwrap_or(60_000)),
        })
    }
}

/// The line of `field = …` in the entry that starts at `span` (its table runs to the next
/// table header), or the entry's first line.
fn field_line(text: &str, span: Range<usize>, field: &str) -> usize {
    let key = field.rsplit('.').next().unwrap_or(field);
    let start = span.start.min(text.len());
    let mut offset = start;
    for (i, line) in text[start..].split_inclusive('\n').enumerate() {
        let trimmed = line.trim_start();
        if i > 0 && trimmed.starts_with("[[upstream]]") {
            break;
        }
        if trimmed.strip_prefix(key).is_some_and(|rest| rest.trim_start().starts_with('=')) {
            return line_at(text, offset);
        }
        offset += line.len();
    }
    line_at(text, start)
}
