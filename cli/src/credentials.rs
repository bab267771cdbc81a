//! `taskgate credentials set|list|delete|rewrap`: the gateway's admin API
//! (`/admin/credentials`, beside `--url`'s `/mcp`), with the same token. Values go to the
//! gateway once, in a `PUT` body, and are never printed: replies carry names only.

use std::collections::BTreeMap;

use comfy_table::Table;
use serde_json::{Value, json};

use crate::args::{CredentialsCommand, Global, HolderArgs, Output, SetCredentialArgs};
use crate::exit::{CliError, Exit};
use crate::text::clean;

pub(crate) async fn run(global: &Global, action: &CredentialsCommand) -> Result<Exit, CliError> {
    let api = Api::new(global)?;
    match action {
        CredentialsCommand::Set(args) => {
            let values = values(args)?;
            let body = json!({ "principal": args.holder.principal, "values": values });
            let entry = api.send(reqwest::Method::PUT, &holder_path(&args.holder), &[], Some(&body)).await?;
            match global.output {
                Output::Json => crate::render::json_line(&entry),
                Output::Human => println!("set {}", describe(&entry)),
            }
            Ok(Exit::Ok)
        }
        CredentialsCommand::List { tenant } => {
            let query: Vec<(&str, &str)> = tenant.iter().map(|t| ("tenant", t.as_str())).collect();
            let listing = api.send(reqwest::Method::GET, &[], &query, None).await?;
            match global.output {
                Output::Json => crate::render::json_line(&listing),
                Output::Human => print!("{}", table(&listing)),
            }
            Ok(Exit::Ok)
        }
        CredentialsCommand::Delete(holder) => {
            let query: Vec<(&str, &str)> = holder.principal.iter().map(|p| ("principal", p.as_str())).collect();
            let reply = api.send(reqwest::Method::DELETE, &holder_path(holder), &query, None).await?;
            match global.output {
                Output::Json => crate::render::json_line(&reply),
                Output::Human if reply["deleted"] == true => println!("deleted"),
                Output::Human => println!("there was no such credential"),
            }
            Ok(Exit::Ok)
        }
        CredentialsCommand::Rewrap => {
            let reply = api.send(reqwest::Method::POST, &["rewrap"], &[], None).await?;
            let failed = reply["failed"].as_array().cloned().unwrap_or_default();
            match global.output {
                Output::Json => crate::render::json_line(&reply),
                Output::Human => {
                    println!("sealed again under the current key: {}", reply["rewrapped"].as_u64().unwrap_or(0));
                    for f in &failed {
                        println!("not sealed again: {}: {}", holder_text(f), clean(f["error"].as_str().unwrap_or("")));
                    }
                }
            }
            // A record left under its old key still needs that key: say so by the exit code.
            Ok(if failed.is_empty() { Exit::Ok } else { Exit::Failed })
        }
    }
}

/// The values of a `set`, each read from where it was named. An error names the value and
/// where it was to come from, never a value.
fn values(args: &SetCredentialArgs) -> Result<BTreeMap<String, String>, CliError> {
    let mut values = BTreeMap::new();
    let mut add = |name: &str, value: String| {
        if values.insert(name.to_owned(), value).is_some() {
            return Err(CliError::usage(format!("the value {name:?} is given twice")));
        }
        Ok(())
    };
    for (name, value) in &args.value {
        add(name, value.clone())?;
    }
    for (name, var) in &args.value_env {
        let value = std::env::var(var)
            .map_err(|_| CliError::usage(format!("--value-env {name}: the environment variable {var} is not set")))?;
        add(name, value)?;
    }
    for (name, path) in &args.value_file {
        let text = std::fs::read_to_string(path)
            .map_err(|err| CliError::usage(format!("--value-file {name}: cannot read {path}: {err}")))?;
        let value = text.strip_suffix('\n').map(|t| t.strip_suffix('\r').unwrap_or(t)).unwrap_or(&text).to_owned();
        add(name, value)?;
    }
    Ok(values)
}

fn holder_path(holder: &HolderArgs) -> [&str; 2] {
    [holder.tenant.as_str(), holder.upstream.as_str()]
}

/// The admin API's base, `/admin/credentials` on `--url`'s host, and the client to call it.
struct Api {
    base: url::Url,
    http: reqwest::Client,
    token: Option<String>,
}

impl Api {
    fn new(global: &Global) -> Result<Self, CliError> {
        let url = url::Url::parse(&global.url).map_err(|err| CliError::usage(format!("--url: {err}")))?;
        let mut base = url.join("/admin/credentials").map_err(|err| CliError::usage(format!("--url: {err}")))?;
        base.set_query(None);
        base.set_fragment(None);
        let http = reqwest::Client::builder()
            .timeout(global.timeout)
            .build()
            .map_err(|err| CliError::new(Exit::Transport, format!("HTTP client: {err}")))?;
        Ok(Self { base, http, token: global.token()? })
    }

    /// One request; the reply's JSON, or the CLI's error for its status.
    async fn send(
        &self,
        method: reqwest::Method,
        segments: &[&str],
        query: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<Value, CliError> {
        let mut url = self.base.clone();
        url.path_segments_mut().map_err(|()| CliError::usage("--url cannot be a base"))?.extend(segments);
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        let mut request = self.http.request(method, url);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|err| {
            // reqwest's error names the URL, which holds no value (values travel in the body).
            CliError::new(Exit::Transport, format!("credentials: {err}"))
                .hint("check --url (TASKGATE_URL) and that the gateway is running")
        })?;
        let status = response.status().as_u16();
        let reply: Option<Value> = response.json().await.ok();
        let said = reply.as_ref().and_then(|r| r["error"].as_str()).map(clean);
        match status {
            200 => reply.ok_or_else(|| CliError::new(Exit::Transport, "credentials: the reply is not JSON")),
            401 => Err(CliError::auth("")),
            403 => Err(CliError::new(
                Exit::AuthRefused,
                format!("the gateway refused this token (403): {}", said.unwrap_or_default()),
            )
            .hint("credentials need the operator scope, or the tenant-admin scope for the token's own tenant")),
            400 | 404 | 405 | 408 | 413 | 429 | 503 => {
                let err = CliError::new(
                    Exit::Refused,
                    format!("the gateway refused the request ({status}): {}", said.unwrap_or_default()),
                );
                Err(if status == 503 && reply.is_some() {
                    err.hint("the gateway needs --credentials-key to seal credentials")
                } else {
                    err
                })
            }
            status => Err(CliError::new(Exit::Transport, format!("credentials: the gateway answered {status}"))),
        }
    }
}

/// `tenant[/principal] upstream: names a, b (key k1)`.
fn describe(entry: &Value) -> String {
    let names: Vec<String> =
        entry["names"].as_array().into_iter().flatten().filter_map(Value::as_str).map(clean).collect();
    format!("{}: names {} (key {})", holder_text(entry), names.join(", "), clean(entry["keyId"].as_str().unwrap_or("")))
}

fn holder_text(entry: &Value) -> String {
    let tenant = clean(entry["tenant"].as_str().unwrap_or(""));
    let upstream = clean(entry["upstream"].as_str().unwrap_or(""));
    match entry["principal"].as_str() {
        Some(principal) => format!("{tenant}/{} {upstream}", clean(principal)),
        None => format!("{tenant} {upstream}"),
    }
}

fn table(listing: &Value) -> String {
    let entries = listing["credentials"].as_array().cloned().unwrap_or_default();
    if entries.is_empty() {
        return "no credentials\n".into();
    }
    let mut table = Table::new();
    table.load_preset(comfy_table::presets::NOTHING);
    table.set_header(["TENANT", "PRINCIPAL", "UPSTREAM", "NAMES", "KEY", "SET AT", "SET BY"]);
    for e in &entries {
        let text = |name: &str| clean(e[name].as_str().unwrap_or(""));
        let names: Vec<String> =
            e["names"].as_array().into_iter().flatten().filter_map(Value::as_str).map(clean).collect();
        let principal = e["principal"].as_str().map_or_else(|| "(tenant)".to_owned(), clean);
        table.add_row([
            text("tenant"),
            principal,
            text("upstream"),
            names.join(","),
            text("keyId"),
            text("setAt"),
            text("setBy"),
        ]);
    }
    format!("{table}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_shows_names_and_keys_safely() {
        let listing = json!({"credentials": [
            {"tenant": "acme", "principal": null, "upstream": "github", "names": ["token"], "keyId": "k1",
             "setAt": "2026-01-01T00:00:00.000Z", "setBy": "ops/op"},
            {"tenant": "acme", "principal": "al\u{1b}[31mice", "upstream": "files", "names": ["root", "token"],
             "keyId": "k2", "setAt": "2026-01-01T00:00:00.000Z", "setBy": "acme/admin"},
        ]});
        let text = table(&listing);
        assert!(text.contains("(tenant)") && text.contains("root,token") && text.contains("k2"), "{text}");
        assert!(!text.contains('\u{1b}'), "{text:?}");
        assert_eq!(table(&json!({"credentials": []})), "no credentials\n");
    }

    #[test]
    fn values_come_from_each_source_and_names_are_not_given_twice() {
        let dir = std::env::temp_dir().join(format!("taskgate-cli-cred-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("v");
        std::fs::write(&file, "from-file\n").unwrap();
        let holder = HolderArgs { tenant: "t".into(), principal: None, upstream: "u".into() };
        let args = SetCredentialArgs {
            holder,
            value: vec![("a".into(), "given".into())],
            value_env: vec![("b".into(), "PATH".into())],
            value_file: vec![("c".into(), file.display().to_string())],
        };
        let values = values(&args).unwrap();
        assert_eq!(values["a"], "given");
        assert_eq!(values["c"], "from-file");
        assert!(!values["b"].is_empty());
        let twice = SetCredentialArgs { value: vec![("a".into(), "x".into()), ("a".into(), "y".into())], ..args };
        let err = super::values(&twice).unwrap_err();
        assert!(err.message.contains("\"a\"") && !err.message.contains('y'), "{}", err.message);
    }
}
