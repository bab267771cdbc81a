//! The upstream servers file (`--upstreams`): TOML with one `[[upstream]]` table per server, or
//! the `mcpServers` JSON that desktop clients use. A bad file is refused at start, naming the
//! line and the field.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use taskgate_shared::tools::Execution;

mod json_file;
mod toml_file;

use json_file::parse_json;
use toml_file::parse_toml;

/// Defaults, chosen for tools that run for minutes: a call may be silent for five minutes
/// (progress restarts that clock) and may never run longer than an hour.
const DEFAULT_TIMEOUT_MS: u64 = 300_000;
const DEFAULT_MAX_TIMEOUT_MS: u64 = 3_600_000;
const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 10_000;
const DEFAULT_TTL_MS: u64 = 2 * 3_600_000;
const DEFAULT_POLL_INTERVAL_MS: u64 = 1_000;
const DEFAULT_MAX_IN_FLIGHT: u32 = 64;
/// An HTTP upstream's read timeout (per read: any byte, an SSE keepalive included, restarts
/// it), unless configured: the longest inactivity timeout of the server's tools, and never
/// under this. A silence the call itself tolerates is never cut.
const DEFAULT_READ_TIMEOUT_MS: u64 = DEFAULT_TIMEOUT_MS;

/// One upstream MCP server.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UpstreamConfig {
    pub name: String,
    pub transport: Transport,
    /// Put before each upstream tool's name in the catalogue (`<name>__` unless configured).
    pub prefix: String,
    /// How long to wait for the server to start and answer, or for a down one to come back.
    pub connect_timeout: Duration,
    /// stdio children per worker; calls share each child by JSON-RPC id.
    pub instances: u16,
    /// Calls this worker has open to the server at once.
    pub max_in_flight: u32,
    /// Tools to serve (all when `None`), and tools never to serve.
    pub allow: Option<Vec<String>>,
    pub deny: Vec<String>,
    /// Settings of every tool, and per tool (by the upstream's name for it).
    pub defaults: ToolSettings,
    pub tools: BTreeMap<String, ToolSettings>,
    /// What a mid-call `elicitation/create` (revisions before 2026-07-28) gets.
    pub elicitation: ElicitationPolicy,
    /// Declare the Tasks extension to a 2026-07-28 server, and follow the tasks it creates.
    pub follow_tasks: bool,
    /// Serve the server's prompts (under its prefix). Off unless asked for: the tool lists do
    /// not cover them, and every tenant could read them through the worker's credentials.
    pub prompts: bool,
    /// Serve the server's resources and resource templates. Off unless asked for, as prompts.
    pub resources: bool,
    /// Whose identity a call runs with: the worker's (one set of connections for everyone),
    /// or the caller's tenant's or principal's (a connection per identity, started on first
    /// use; docs/upstreams.md, "Each tenant as itself").
    pub per: Per,
    /// How the caller's OAuth credential is kept valid, where the server needs it.
    pub oauth: Option<OAuthConfig>,
    /// Where a caller with no credential connects one (`{tenant}`, `{principal}` and
    /// `{upstream}` filled in): asked as a URL-mode elicitation when the caller declares it.
    pub connect_url: Option<String>,
}

/// Whose identity an upstream's calls carry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Per {
    /// The worker's own: one set of connections serves every tenant.
    #[default]
    Shared,
    /// The caller's tenant's credential, in a connection of that tenant's own.
    Tenant,
    /// The caller's principal's credential (else its tenant's), in a connection of its own.
    Principal,
}

impl Per {
    pub fn label(self) -> &'static str {
        match self {
            Self::Shared => "shared",
            Self::Tenant => "tenant",
            Self::Principal => "principal",
        }
    }
}

/// The OAuth endpoint that keeps a caller's upstream token valid.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OAuthConfig {
    /// The authorization server's token endpoint.
    pub token_url: String,
    pub client_id: String,
    pub client_secret: Option<Secret>,
    pub grant: OAuthGrant,
    /// Refresh this long before the access token runs out.
    pub refresh_before: Duration,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum OAuthGrant {
    /// RFC 6749 section 6: the stored `refresh_token` buys a new `access_token`.
    Refresh,
    /// RFC 8693: the caller's own JWT, which the gateway hands over sealed beside the task,
    /// buys an `access_token` for this server (`audience`, and `resource` and `scope` when set).
    TokenExchange { audience: String, resource: Option<String>, scope: Option<String> },
}

impl OAuthConfig {
    /// Whether the server exchanges the caller's own token.
    pub fn exchanges(&self) -> bool {
        matches!(self.grant, OAuthGrant::TokenExchange { .. })
    }
}

/// What a mid-call `elicitation/create` from a server gets. It belongs to a live session, so it
/// cannot be replayed like a 2026-07-28 `input_required`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ElicitationPolicy {
    /// Answered `decline` at once, and the task's status says so.
    #[default]
    Decline,
    /// Shown on the task as `input_required` while this worker keeps the lease and the session,
    /// and the answer passed on; if the worker stops first, the task fails.
    Hold,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Transport {
    Stdio {
        command: String,
        args: Vec<Secret>,
        env: BTreeMap<String, Secret>,
        cwd: Option<Secret>,
    },
    Http {
        /// Given in the file, or read from the environment or a file: hosted servers often
        /// carry a credential in the path or the query.
        url: Secret,
        headers: BTreeMap<String, Secret>,
        /// Longest silence on one read (a response's headers, or the next bytes of a stream).
        read_timeout: Duration,
    },
}

/// A value read when the worker starts: given in the file (not for secrets), or from the
/// worker's environment, or from a file (a mounted Kubernetes secret).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Secret {
    Value(String),
    Env {
        name: String,
        prefix: String,
    },
    File {
        path: PathBuf,
        prefix: String,
    },
    /// A value of the caller's stored credential (`{ credential = "NAME" }`), for `per =
    /// "tenant"` or `"principal"` servers. `catalogue` is what the one connection that lists
    /// the server's tools (for no caller) gets instead; without it the value is left out.
    Credential {
        name: String,
        prefix: String,
        catalogue: Option<String>,
    },
}

impl Secret {
    /// Whether the value comes from the caller's credential.
    pub fn is_credential(&self) -> bool {
        matches!(self, Self::Credential { .. })
    }

    /// The value for a caller whose credential is `credential`, or for the listing connection
    /// when `None`: `Ok(None)` when a credential value is left out there. An error names what
    /// is missing, never a value.
    pub fn render(
        &self,
        credential: Option<&taskgate_shared::credentials::Credential>,
    ) -> Result<Option<String>, String> {
        match (self, credential) {
            (Self::Credential { name, prefix, .. }, Some(credential)) => credential
                .get(name)
                .map(|v| Some(format!("{prefix}{v}")))
                .ok_or_else(|| format!("the caller's credential has no value {name:?}")),
            (Self::Credential { catalogue, .. }, None) => Ok(catalogue.clone()),
            (other, _) => other.resolve().map(Some),
        }
    }

    /// The value; an error names what is missing, never the value.
    pub fn resolve(&self) -> Result<String, String> {
        match self {
            Self::Credential { name, .. } => Err(format!("needs the caller's credential value {name:?}")),
            Self::Value(value) => Ok(value.clone()),
            Self::Env { name, prefix } => std::env::var(name)
                .map(|v| format!("{prefix}{v}"))
                .map_err(|_| format!("environment variable {name} is not set")),
            Self::File { path, prefix } => std::fs::read_to_string(path)
                .map(|v| format!("{prefix}{}", v.trim_end_matches(['\r', '\n'])))
                .map_err(|err| format!("cannot read {}: {err}", path.display())),
        }
    }
}

/// Per-tool settings; unset fields fall back to the server's, then to the defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSettings {
    #[serde(default, deserialize_with = "execution")]
    pub execution: Option<Execution>,
    pub ttl_ms: Option<u64>,
    pub poll_interval_ms: Option<u64>,
    /// Inactivity timeout: progress from the server restarts it.
    pub timeout_ms: Option<u64>,
    /// Hard limit on one call, progress or not.
    pub max_timeout_ms: Option<u64>,
    /// Run the call again after its worker died mid-call, although the tool's annotations do
    /// not say it is read-only or idempotent.
    pub retry_on_reclaim: Option<bool>,
    /// How long a call made as a task waits for the task to end before answering, in ms
    /// (`ToolSpec::complete_within_ms`); unset follows the gateway's `--complete-within-ms`,
    /// 0 always answers with the task.
    pub complete_within_ms: Option<u64>,
}

/// A tool's settings with every fallback applied.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Resolved {
    pub execution: Execution,
    pub ttl_ms: u64,
    pub poll_interval_ms: u64,
    pub timeout: Duration,
    pub max_timeout: Duration,
    pub retry_on_reclaim: Option<bool>,
    /// `None`: the gateway's default.
    pub complete_within_ms: Option<u64>,
}

impl UpstreamConfig {
    pub fn settings(&self, tool: &str) -> Resolved {
        let own = self.tools.get(tool);
        let pick = |f: fn(&ToolSettings) -> Option<u64>, default: u64| {
            own.and_then(f).or_else(|| f(&self.defaults)).unwrap_or(default)
        };
        Resolved {
            execution: own.and_then(|s| s.execution).or(self.defaults.execution).unwrap_or(Execution::TaskOptional),
            ttl_ms: pick(|s| s.ttl_ms, DEFAULT_TTL_MS),
            poll_interval_ms: pick(|s| s.poll_interval_ms, DEFAULT_POLL_INTERVAL_MS),
            timeout: Duration::from_millis(pick(|s| s.timeout_ms, DEFAULT_TIMEOUT_MS)),
            max_timeout: Duration::from_millis(pick(|s| s.max_timeout_ms, DEFAULT_MAX_TIMEOUT_MS)),
            retry_on_reclaim: own.and_then(|s| s.retry_on_reclaim).or(self.defaults.retry_on_reclaim),
            complete_within_ms: own.and_then(|s| s.complete_within_ms).or(self.defaults.complete_within_ms),
        }
    }

    /// Whether the server's tool `name` is served.
    pub fn serves(&self, name: &str) -> bool {
        self.allow.as_ref().is_none_or(|allow| allow.iter().any(|a| a == name)) && !self.deny.iter().any(|d| d == name)
    }
}

/// A file the worker refuses to start with.
#[derive(Debug, thiserror::Error)]
#[error("{path}{}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct ConfigError {
    pub path: String,
    pub line: Option<usize>,
    pub message: String,
}

/// Reads and checks the file.
pub fn load(path: &Path) -> Result<Vec<UpstreamConfig>, ConfigError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|err| ConfigError {
        path: shown.clone(),
        line: None,
        message: format!("cannot read: {err}"),
    })?;
    parse(&text, &shown)
}

/// Parses a file's text; `path` names it in errors. JSON when it starts with `{`, else TOML.
pub fn parse(text: &str, path: &str) -> Result<Vec<UpstreamConfig>, ConfigError> {
    let configs = if text.trim_start().starts_with('{') { parse_json(text, path)? } else { parse_toml(text, path)? };
    let mut seen = std::collections::BTreeSet::new();
    for config in &configs {
        check_identity(config).map_err(|message| ConfigError {
            path: path.into(),
            line: None,
            message: format!("upstream {:?}: {message}", config.name),
        })?;
        if !seen.insert(config.name.clone()) {
            return Err(ConfigError {
                path: path.into(),
                line: None,
                message: format!("upstream {:?} is configured twice", config.name),
            });
        }
    }
    Ok(configs)
}

/// A server that takes the caller's credential runs a connection per identity; one that does
/// not must not pretend to.
fn check_identity(config: &UpstreamConfig) -> Result<(), String> {
    let templated: Vec<&Secret> = match &config.transport {
        Transport::Stdio { args, env, cwd, .. } => args.iter().chain(env.values()).chain(cwd).collect(),
        Transport::Http { url, headers, .. } => std::iter::once(url).chain(headers.values()).collect(),
    };
    let uses_credential = templated.iter().any(|s| s.is_credential());
    if config.oauth.as_ref().is_some_and(OAuthConfig::exchanges) {
        if config.per != Per::Principal {
            return Err(
                "grant = \"token_exchange\" needs `per = \"principal\"`: the token exchanged is the caller's own"
                    .into(),
            );
        }
        let other = templated.iter().find_map(|s| match s {
            Secret::Credential { name, .. } if name != taskgate_shared::credentials::ACCESS_TOKEN => Some(name),
            _ => None,
        });
        if let Some(name) = other {
            return Err(format!(
                "with grant = \"token_exchange\", `{{ credential = … }}` values name only \"access_token\" (the exchanged token), not {name:?}"
            ));
        }
        if !uses_credential {
            return Err("grant = \"token_exchange\" needs a `{ credential = \"access_token\" }` value to carry the exchanged token".into());
        }
    }
    match config.per {
        Per::Shared if uses_credential => {
            Err("`{ credential = … }` values need `per = \"tenant\"` or `per = \"principal\"`".into())
        }
        Per::Shared if config.oauth.is_some() => Err("`oauth` needs `per = \"tenant\"` or `per = \"principal\"`".into()),
        Per::Shared if config.connect_url.is_some() => {
            Err("`connect_url` needs `per = \"tenant\"` or `per = \"principal\"`".into())
        }
        Per::Tenant | Per::Principal if config.prompts || config.resources => Err(
            "`prompts` and `resources` are served for shared servers only: they would be read with no caller's identity".into(),
        ),
        Per::Tenant | Per::Principal if config.instances != 1 => {
            Err("`instances` applies to shared servers: a per-identity server runs one connection per identity".into())
        }
        Per::Tenant | Per::Principal if !uses_credential && config.oauth.is_none() => Err(
            "`per` other than \"shared\" needs at least one `{ credential = … }` value (otherwise every identity's instance would be the same)".into(),
        ),
        Per::Tenant | Per::Principal
            if matches!(&config.transport, Transport::Http { url: Secret::Credential { catalogue: None, .. }, .. }) =>
        {
            Err("a `url` from the credential needs a `catalogue` URL to list the server's tools with".into())
        }
        _ => config.connect_url.as_deref().map_or(Ok(()), check_connect_url),
    }
}

/// A connect page is an absolute http(s) URL once its placeholders are filled in.
fn check_connect_url(template: &str) -> Result<(), String> {
    let sample = fill_connect_url(template, "tenant", "principal", "upstream");
    match reqwest::Url::parse(&sample) {
        Ok(url) if matches!(url.scheme(), "https" | "http") => Ok(()),
        Ok(url) => Err(format!("`connect_url` must be http or https, not {}", url.scheme())),
        Err(err) => Err(format!("`connect_url` is not a URL: {err}")),
    }
}

/// `template` with `{tenant}`, `{principal}` and `{upstream}` replaced, each percent-encoded
/// (a name never reshapes the URL around it).
pub(crate) fn fill_connect_url(template: &str, tenant: &str, principal: &str, upstream: &str) -> String {
    use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
    /// Everything but RFC 3986's unreserved characters.
    const RESERVED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');
    let encode = |v: &str| utf8_percent_encode(v, RESERVED).to_string();
    template
        .replace("{tenant}", &encode(tenant))
        .replace("{principal}", &encode(principal))
        .replace("{upstream}", &encode(upstream))
}

/// `${VAR}` or `${env:VAR}`, optionally after a literal prefix (`Bearer ${TOKEN}`), reads the
/// environment; anything else is a literal.
fn placeholder(value: String) -> Secret {
    if let Some((prefix, rest)) = value.split_once("${")
        && let Some(var) = rest.strip_suffix('}')
    {
        let var = var.strip_prefix("env:").unwrap_or(var);
        if !var.is_empty() && var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Secret::Env { name: var.to_owned(), prefix: prefix.to_owned() };
        }
    }
    Secret::Value(value)
}

fn looks_secret(header: &str) -> bool {
    let h = header.to_ascii_lowercase();
    h == "authorization"
        || h == "proxy-authorization"
        || h == "cookie"
        || ["token", "key", "secret", "password"].iter().any(|w| h.contains(w))
}

fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > 64
        || !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(format!("{name:?} must be 1 to 64 characters of a-z, 0-9 and -"));
    }
    Ok(())
}

/// The URL is never repeated in the error: it may carry a credential.
pub(super) fn check_url(url: &str) -> Result<(), String> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err("must be an http:// or https:// URL".into());
    }
    Ok(())
}

/// The default read timeout of an HTTP upstream: see [`DEFAULT_READ_TIMEOUT_MS`].
fn longest_timeout(server: Option<u64>, tools: &BTreeMap<String, ToolSettings>) -> u64 {
    tools.values().filter_map(|t| t.timeout_ms).chain(server).fold(DEFAULT_READ_TIMEOUT_MS, u64::max)
}

fn check_settings(s: &ToolSettings) -> Result<(), (&'static str, String)> {
    for (field, value) in [
        ("ttl_ms", s.ttl_ms),
        ("poll_interval_ms", s.poll_interval_ms),
        ("timeout_ms", s.timeout_ms),
        ("max_timeout_ms", s.max_timeout_ms),
    ] {
        if value == Some(0) {
            return Err((field, "must be at least 1".into()));
        }
    }
    if let (Some(t), Some(max)) = (s.timeout_ms, s.max_timeout_ms)
        && t > max
    {
        return Err(("timeout_ms", format!("{t} is longer than max_timeout_ms {max}")));
    }
    Ok(())
}

fn execution<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<Execution>, D::Error> {
    let value = String::deserialize(de)?;
    match Execution::from_label(&value) {
        Some(execution) => Ok(Some(execution)),
        None => Err(serde::de::Error::custom(format!(
            "unknown execution {value:?}: expected task-required, task-optional or sync-only"
        ))),
    }
}

/// 1-based line of a byte offset.
fn line_at(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].bytes().filter(|&b| b == b'\n').count() + 1
}

/// A digest of the configuration, published beside the catalogue so the fleet can see that
/// its workers disagree. Secrets are named (variable or file), never read, so none is in it.
pub fn digest(configs: &[UpstreamConfig]) -> String {
    use sha2::Digest as _;
    let json = serde_json::to_string(configs).unwrap_or_default();
    let hash = sha2::Sha256::digest(json.as_bytes());
    hash[..8].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_five_line_toml_is_a_stdio_server_with_defaults() {
        let configs = parse(
            "[[upstream]]\nname = \"everything\"\ncommand = \"node\"\nargs = [\"dist/index.js\", \"stdio\"]\n",
            "u.toml",
        )
        .unwrap();
        assert_eq!(configs.len(), 1);
        let c = &configs[0];
        assert_eq!(c.prefix, "everything__");
        assert!(matches!(&c.transport, Transport::Stdio { command, args, .. } if command == "node" && args.len() == 2));
        let s = c.settings("echo");
        assert_eq!(s.execution, Execution::TaskOptional);
        assert_eq!(s.timeout, Duration::from_millis(DEFAULT_TIMEOUT_MS));
    }

    #[test]
    fn per_tool_settings_override_the_servers() {
        let configs = parse(
            r#"
[[upstream]]
name = "s"
url = "http://127.0.0.1:1/mcp"
headers = { Authorization = { env = "S_TOKEN", prefix = "Bearer " }, "X-Team" = "blue" }
timeout_ms = 1000
execution = "task-required"
complete_within_ms = 900
tools = ["a", "b"]
deny_tools = ["b"]
[upstream.tool.a]
timeout_ms = 50
retry_on_reclaim = true
complete_within_ms = 0
"#,
            "u.toml",
        )
        .unwrap();
        let c = &configs[0];
        assert_eq!(c.settings("a").timeout, Duration::from_millis(50));
        assert_eq!(c.settings("a").retry_on_reclaim, Some(true));
        assert_eq!(c.settings("a").execution, Execution::TaskRequired);
        assert_eq!(c.settings("z").timeout, Duration::from_millis(1000));
        assert_eq!((c.settings("a").complete_within_ms, c.settings("z").complete_within_ms), (Some(0), Some(900)));
        assert!(c.serves("a") && !c.serves("b") && !c.serves("c"));
        let Transport::Http { headers, .. } = &c.transport else { panic!("http") };
        assert_eq!(headers["Authorization"], Secret::Env { name: "S_TOKEN".into(), prefix: "Bearer ".into() });
    }

    #[test]
    fn errors_name_the_line_and_the_field() {
        let err = parse("[[upstream]]\nname = \"Bad_Name\"\ncommand = \"x\"\n", "u.toml").unwrap_err();
        assert_eq!(err.line, Some(2), "{err}");
        assert!(err.to_string().contains("`name`"), "{err}");

        let err = parse("[[upstream]]\nname = \"a\"\ncommand = \"x\"\nurl = \"http://h\"\n", "u.toml").unwrap_err();
        assert_eq!(err.line, Some(4), "{err}");

        let err = parse("[[upstream]]\nname = \"a\"\ncommand = \"x\"\ntimeout = 5\n", "u.toml").unwrap_err();
        assert_eq!(err.line, Some(4), "{err}");
        assert!(err.to_string().contains("timeout"), "{err}");

        let err = parse(
            "[[upstream]]\nname = \"a\"\nurl = \"http://h\"\nheaders = { Authorization = \"Bearer abc\" }\n",
            "u.toml",
        )
        .unwrap_err();
        assert!(err.to_string().contains("never inline") && !err.to_string().contains("abc"), "{err}");

        let err =
            parse("[[upstream]]\nname = \"a\"\ncommand = \"x\"\nexecution = \"sometimes\"\n", "u.toml").unwrap_err();
        assert_eq!(err.line, Some(4), "{err}");
    }

    #[test]
    fn the_desktop_mcp_servers_shape_is_read_as_it_is() {
        let configs = parse(
            r#"{"mcpServers": {
                "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC", "KEY": "${env:TIME_KEY}"}},
                "remote": {"type": "http", "url": "https://h/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}},
                "off": {"command": "x", "disabled": true, "autoApprove": []}
            }}"#,
            "c.json",
        )
        .unwrap();
        assert_eq!(configs.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["remote", "time"]);
        let Transport::Http { headers, .. } = &configs[0].transport else { panic!("http") };
        assert_eq!(headers["Authorization"], Secret::Env { name: "TOKEN".into(), prefix: "Bearer ".into() });
        let Transport::Stdio { env, .. } = &configs[1].transport else { panic!("stdio") };
        assert_eq!(env["KEY"], Secret::Env { name: "TIME_KEY".into(), prefix: String::new() });

        let err = parse("{\"mcpServers\": {\"a\": {\"type\": \"sse\", \"url\": \"http://h\"}}}", "c.json").unwrap_err();
        assert!(err.to_string().contains("not supported"), "{err}");
        let err = parse("{\"mcpServers\": {\n\"a\": {\"command\": 3}}}", "c.json").unwrap_err();
        assert_eq!(err.line, Some(2), "{err}");
    }

    #[test]
    fn an_http_url_comes_inline_or_from_the_environment_or_a_file() {
        let configs = parse(
            "[[upstream]]\nname = \"a\"\nurl = { env = \"A_URL\" }\ntimeout_ms = 900000\n\
             [[upstream]]\nname = \"b\"\nurl = { file = \"/run/b\" }\nread_timeout_ms = 900\n\
             [[upstream]]\nname = \"c\"\nurl = \"https://h/mcp\"\n",
            "u.toml",
        )
        .unwrap();
        let http = |i: usize| match &configs[i].transport {
            Transport::Http { url, read_timeout, .. } => (url.clone(), *read_timeout),
            Transport::Stdio { .. } => panic!("http"),
        };
        // The read timeout never cuts a silence the server's calls tolerate.
        let env = Secret::Env { name: "A_URL".into(), prefix: String::new() };
        assert_eq!(http(0), (env, Duration::from_millis(900_000)));
        let file = Secret::File { path: "/run/b".into(), prefix: String::new() };
        assert_eq!(http(1), (file, Duration::from_millis(900)));
        assert_eq!(http(2), (Secret::Value("https://h/mcp".into()), Duration::from_millis(DEFAULT_READ_TIMEOUT_MS)));

        let err = parse("[[upstream]]\nname = \"a\"\nurl = \"ftp://h/SECRET\"\n", "u.toml").unwrap_err();
        assert!(err.to_string().contains("`url`") && !err.to_string().contains("SECRET"), "{err}");
        let err = parse("[[upstream]]\nname = \"a\"\ncommand = \"x\"\nread_timeout_ms = 5\n", "u.toml").unwrap_err();
        assert!(err.to_string().contains("HTTP upstreams only"), "{err}");
    }

    #[test]
    fn a_per_tenant_server_takes_values_from_the_callers_credential() {
        let configs = parse(
            "[[upstream]]\nname = \"files\"\nper = \"tenant\"\ncommand = \"node\"\n\
             args = [\"fs.js\", { credential = \"root\", catalogue = \"/var/empty\" }]\n\
             env = { TOKEN = { credential = \"token\" } }\n",
            "u.toml",
        )
        .unwrap();
        assert_eq!(configs[0].per, Per::Tenant);
        let Transport::Stdio { args, env, .. } = &configs[0].transport else { panic!("stdio") };
        assert_eq!(
            args[1],
            Secret::Credential { name: "root".into(), prefix: String::new(), catalogue: Some("/var/empty".into()) }
        );
        assert_eq!(args[1].render(None).unwrap().as_deref(), Some("/var/empty"), "the listing connection's value");
        assert_eq!(env["TOKEN"].render(None).unwrap(), None, "left out of the listing connection");

        let shared = parse("[[upstream]]\nname = \"a\"\ncommand = \"x\"\nargs = [{ credential = \"k\" }]\n", "u.toml");
        assert!(shared.unwrap_err().to_string().contains("per = \"tenant\""));
        let nothing = parse("[[upstream]]\nname = \"a\"\nper = \"tenant\"\ncommand = \"x\"\n", "u.toml");
        assert!(nothing.unwrap_err().to_string().contains("needs at least one"));
    }

    #[test]
    fn a_connect_url_is_checked_at_load_and_filled_in_encoded() {
        let entry = |per: &str, url: &str| {
            parse(
                &format!(
                    "[[upstream]]\nname = \"a\"\nper = \"{per}\"\ncommand = \"x\"\nargs = [{{ credential = \"k\" }}]\nconnect_url = \"{url}\"\n"
                ),
                "u.toml",
            )
        };
        let ok = entry("tenant", "https://portal.example/connect/{upstream}?tenant={tenant}&who={principal}").unwrap();
        let template = ok[0].connect_url.as_deref().unwrap();
        assert_eq!(
            fill_connect_url(template, "acme corp", "al/ice&x=1", "a"),
            "https://portal.example/connect/a?tenant=acme%20corp&who=al%2Fice%26x%3D1",
            "a name never reshapes the URL"
        );
        let shared =
            parse("[[upstream]]\nname = \"a\"\ncommand = \"x\"\nconnect_url = \"https://portal.example/\"\n", "u.toml");
        let shared = shared.unwrap_err().to_string();
        assert!(shared.contains("`connect_url` needs"), "{shared}");
        let scheme = entry("tenant", "javascript:alert(1)").unwrap_err().to_string();
        assert!(scheme.contains("http or https"), "{scheme}");
        let relative = entry("tenant", "/connect").unwrap_err().to_string();
        assert!(relative.contains("not a URL"), "{relative}");
    }

    fn exchange(per: &str, header: &str, oauth_extra: &str) -> Result<Vec<UpstreamConfig>, ConfigError> {
        parse(
            &format!(
                "[[upstream]]\nname = \"a\"\nper = \"{per}\"\nurl = \"https://h/mcp\"\n\
                 headers = {{ Authorization = {header} }}\n\
                 oauth = {{ token_url = \"https://idp/token\", client_id = \"c\", client_secret = {{ env = \"S\" }}, grant = \"token_exchange\", audience = \"https://api\"{oauth_extra} }}\n"
            ),
            "u.toml",
        )
    }

    #[test]
    fn a_token_exchange_server_acts_as_its_principal_with_the_exchanged_token_only() {
        let bearer = "{ credential = \"access_token\", prefix = \"Bearer \", catalogue = \"Bearer l\" }";
        let configs = exchange("principal", bearer, ", resource = \"https://api/r\", scope = \"read write\"").unwrap();
        let oauth = configs[0].oauth.as_ref().unwrap();
        assert_eq!(
            oauth.grant,
            OAuthGrant::TokenExchange {
                audience: "https://api".into(),
                resource: Some("https://api/r".into()),
                scope: Some("read write".into())
            }
        );
        assert!(oauth.exchanges());
        assert_eq!(oauth.client_secret, Some(Secret::Env { name: "S".into(), prefix: String::new() }));

        let tenant = exchange("tenant", bearer, "").unwrap_err().to_string();
        assert!(tenant.contains("needs `per = \"principal\"`"), "{tenant}");
        let other = exchange("principal", "{ credential = \"token\", prefix = \"Bearer \" }", "").unwrap_err();
        assert!(other.to_string().contains("name only \"access_token\""), "{other}");
        let none = exchange("principal", "{ env = \"T\" }", "").unwrap_err();
        assert!(none.to_string().contains("needs a `{ credential = \"access_token\" }`"), "{none}");
        let no_audience = parse(
            "[[upstream]]\nname = \"a\"\nper = \"principal\"\nurl = \"https://h/mcp\"\n\
             headers = { Authorization = { credential = \"access_token\" } }\n\
             oauth = { token_url = \"https://idp/token\", client_id = \"c\", grant = \"token_exchange\" }\n",
            "u.toml",
        );
        assert!(no_audience.unwrap_err().to_string().contains("needs `audience`"));
        let stray = parse(
            "[[upstream]]\nname = \"a\"\nper = \"tenant\"\nurl = \"https://h/mcp\"\n\
             headers = { Authorization = { credential = \"access_token\" } }\n\
             oauth = { token_url = \"https://idp/token\", client_id = \"c\", scope = \"x\" }\n",
            "u.toml",
        );
        assert!(stray.unwrap_err().to_string().contains("go with grant = \"token_exchange\""));
    }

    #[test]
    fn the_digest_changes_with_the_configuration() {
        let a = parse("[[upstream]]\nname = \"a\"\ncommand = \"x\"\n", "u.toml").unwrap();
        let b = parse("[[upstream]]\nname = \"a\"\ncommand = \"y\"\n", "u.toml").unwrap();
        assert_eq!(digest(&a), digest(&a.clone()));
        assert_ne!(digest(&a), digest(&b));
    }
}
