//! What a worker offers besides tools: prompts, resources and resource templates. Like tool
//! specs, they are data published into the catalogue, so a gateway lists them without running
//! worker code; their content (`prompts/get`, `resources/read`, `completion/complete`) is made
//! on a worker, by a hidden task like an inline tool call.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The hidden tasks' tool names. Each contains a `/`, which no tool name may, so none can
/// collide with a tool.
pub const PROMPTS_GET: &str = "prompts/get";
pub const RESOURCES_READ: &str = "resources/read";
pub const COMPLETE: &str = "completion/complete";

/// One published prompt, resource or resource template: its wire descriptor as listed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "descriptor", rename_all = "snake_case")]
pub enum Offering {
    /// A `Prompt`: `name`, and optionally `title`, `description`, `arguments`.
    Prompt(Value),
    /// A `Resource`: `uri`, `name`, and optionally `description`, `mimeType`, …
    Resource(Value),
    /// A `ResourceTemplate`: `uriTemplate`, `name`, and optionally `description`, `mimeType`.
    Template(Value),
}

impl Offering {
    /// Its catalogue key, `prompt/<name>`, `resource/<uri>` or `template/<uriTemplate>`
    /// (never a tool name: those have no `/`); `None` when the descriptor lacks the field.
    pub fn key(&self) -> Option<String> {
        let (prefix, descriptor, field) = match self {
            Self::Prompt(d) => ("prompt", d, "name"),
            Self::Resource(d) => ("resource", d, "uri"),
            Self::Template(d) => ("template", d, "uriTemplate"),
        };
        let id = descriptor.get(field)?.as_str().filter(|s| !s.is_empty())?;
        Some(format!("{prefix}/{id}"))
    }

    pub fn descriptor(&self) -> &Value {
        match self {
            Self::Prompt(d) | Self::Resource(d) | Self::Template(d) => d,
        }
    }
}

/// Whether `uri` is an expansion of `template` (RFC 6570): `{name}` takes one or more
/// characters other than `/`, `?` and `#`; `{+name}` (reserved expansion) takes any. A template
/// with another operator (`{/x}`, `{?x}`, …) matches nothing here.
pub fn template_matches(template: &str, uri: &str) -> bool {
    let mut pattern = String::from("^");
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        pattern.push_str(&regex::escape(&rest[..open]));
        let Some(close) = rest[open..].find('}') else { return false };
        let expression = &rest[open + 1..open + close];
        match expression.strip_prefix('+') {
            Some(name) if is_varname(name) => pattern.push_str("(.+)"),
            _ if is_varname(expression) => pattern.push_str("([^/?#]+)"),
            _ => return false,
        }
        rest = &rest[open + close + 1..];
    }
    pattern.push_str(&regex::escape(rest));
    pattern.push('$');
    regex::Regex::new(&pattern).is_ok_and(|re| re.is_match(uri))
}

fn is_varname(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn keys_name_the_kind_and_never_look_like_a_tool() {
        assert_eq!(Offering::Prompt(json!({"name": "greet"})).key().as_deref(), Some("prompt/greet"));
        assert_eq!(Offering::Resource(json!({"uri": "test://a"})).key().as_deref(), Some("resource/test://a"));
        assert_eq!(Offering::Template(json!({"uriTemplate": "x/{id}"})).key().as_deref(), Some("template/x/{id}"));
        assert_eq!(Offering::Prompt(json!({"title": "no name"})).key(), None);
        let round: Offering =
            serde_json::from_str(&serde_json::to_string(&Offering::Prompt(json!({"name": "p"}))).unwrap()).unwrap();
        assert_eq!(round, Offering::Prompt(json!({"name": "p"})));
    }

    #[test]
    fn uris_match_level_one_templates() {
        assert!(template_matches("test://template/{id}/data", "test://template/123/data"));
        assert!(!template_matches("test://template/{id}/data", "test://template//data"));
        assert!(!template_matches("test://template/{id}/data", "test://template/1/2/data"));
        assert!(!template_matches("test://template/{id}/data", "test://template/123/datax"));
        assert!(template_matches("file:///{name}", "file:///notes.txt"));
        assert!(!template_matches("file:///{name}", "file:///a/b"));
        assert!(template_matches("plain://fixed", "plain://fixed"));
        assert!(!template_matches("plain://fixed", "plain://fixed/more"));
        // Backtracking, adjacent expressions, reserved expansion, operators, non-ASCII.
        assert!(template_matches("x{a}y", "xyyy"));
        assert!(template_matches("x://{a}{b}", "x://ab"));
        assert!(template_matches("files:///{+path}", "files:///a/b/c.txt"));
        assert!(!template_matches("x://{/path}", "x:///a"));
        assert!(!template_matches("x://{a", "x://a"));
        assert!(template_matches("é://{id}/ü", "é://ß/ü"));
        assert!(!template_matches("a.b://{id}", "aXb://1"), "literals are not patterns");
    }
}
