//! The JSON form of the upstream servers file: the `mcpServers` object desktop clients use.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{
    ConfigError, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_MAX_IN_FLIGHT, DEFAULT_READ_TIMEOUT_MS, ElicitationPolicy, Secret,
    ToolSettings, Transport, UpstreamConfig, check_name, check_url, line_at, looks_secret, placeholder,
};

/// The `mcpServers` shape: `{"mcpServers": {"<name>": {command, args, env, cwd} | {url,
/// headers}}}`. Unknown fields are ignored (desktop clients add their own), `disabled: true`
/// skips a server, and `${VAR}` (or `${env:VAR}`) in `env` and `headers` values reads the
/// worker's environment.
pub(super) fn parse_json(text: &str, path: &str) -> Result<Vec<UpstreamConfig>, ConfigError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct JsonFile {
        mcp_servers: BTreeMap<String, JsonServer>,
    }
    #[derive(Deserialize)]
    struct JsonServer {
        #[serde(rename = "type")]
        kind: Option<String>,
        command: Option<String>,
        #[serde(default)]
        args: Vec<String>,
        #[serde(default)]
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
        url: Option<String>,
        #[serde(default)]
        headers: BTreeMap<String, String>,
        #[serde(default)]
        disabled: bool,
    }
    let file: JsonFile = serde_json::from_str(text).map_err(|err| ConfigError {
        path: path.into(),
        line: Some(err.line()),
        message: err.to_string(),
    })?;
    let mut configs = Vec::new();
    for (name, server) in file.mcp_servers {
        if server.disabled {
            continue;
        }
        let line = text.find(&format!("\"{name}\"")).map(|at| line_at(text, at));
        let fail = |field: &str, message: String| ConfigError {
            path: path.into(),
            line,
            message: format!("mcpServers {name:?}: `{field}`: {message}"),
        };
        check_name(&name).map_err(|m| fail("name", m))?;
        let transport = match (server.kind.as_deref(), server.command, server.url) {
            (Some("sse"), ..) => {
                return Err(fail("type", "the old HTTP+SSE transport is not supported; use Streamable HTTP".into()));
            }
            (None | Some("stdio"), Some(command), None) => Transport::Stdio {
                command,
                args: server.args.into_iter().map(Secret::Value).collect(),
                env: server.env.into_iter().map(|(k, v)| (k, placeholder(v))).collect(),
                cwd: server.cwd.map(|cwd| Secret::Value(cwd.display().to_string())),
            },
            (None | Some("http" | "streamable-http" | "streamableHttp"), None, Some(url)) => {
                let url = placeholder(url);
                if let Secret::Value(url) = &url {
                    check_url(url).map_err(|m| fail("url", m))?;
                }
                let mut headers = BTreeMap::new();
                for (header, value) in server.headers {
                    let secret = placeholder(value);
                    if matches!(secret, Secret::Value(_)) && looks_secret(&header) {
                        return Err(fail(
                            "headers",
                            format!(
                                "{header:?} carries a credential: write it as \"${{VAR}}\" and set VAR in the worker's environment"
                            ),
                        ));
                    }
                    headers.insert(header, secret);
                }
                let read_timeout = Duration::from_millis(DEFAULT_READ_TIMEOUT_MS);
                Transport::Http { url, headers, read_timeout }
            }
            (_, Some(_), Some(_)) => return Err(fail("url", "give either `command` or `url`, not both".into())),
            (Some(other), ..) if !matches!(other, "stdio" | "http" | "streamable-http" | "streamableHttp") => {
                return Err(fail("type", format!("unknown transport {other:?}")));
            }
            _ => return Err(fail("command", "give `command` (stdio) or `url` (HTTP)".into())),
        };
        configs.push(UpstreamConfig {
            prefix: format!("{name}__"),
            name,
            transport,
            connect_timeout: Duration::from_millis(DEFAULT_CONNECT_TIMEOUT_MS),
            instances: 1,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            allow: None,
            deny: Vec::new(),
            defaults: ToolSettings::default(),
            tools: BTreeMap::new(),
            elicitation: ElicitationPolicy::Decline,
            follow_tasks: true,
            prompts: false,
            resources: false,
            per: super::Per::Shared,
            oauth: None,
            connect_url: None,
        });
    }
    Ok(configs)
}
