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

/// Whether `uri` matches the RFC 6570 level-1 `template` (`{name}` expressions, each matching
/// one or more characters other than `/`).
pub fn template_matches(template: &str, uri: &str) -> bool {
    let mut rest = uri;
    let mut parts = template.split('{');
    let Some(head) = parts.next() else { return false };
    let Some(after) = rest.strip_prefix(head) else { return false };
    rest = after;
    for part in parts {
        let Some((_, literal)) = part.split_once('}') else { return false };
        // The expression takes the shortest run of non-`/` characters after which the literal
        // follows (or, for a last expression, everything up to the end).
        let end = if literal.is_empty() {
            if rest.contains('/') {
                return false;
            }
            rest.len()
        } else {
            match rest.find(literal) {
                Some(at) if at > 0 && !rest[..at].contains('/') => at,
                _ => return false,
            }
        };
        if end == 0 {
            return false;
        }
        rest = &rest[end + literal.len()..];
    }
    rest.is_empty()
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
    }
}
