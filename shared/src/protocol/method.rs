//! The methods taskgate serves, with every wire rule that hangs off a method name: its
//! `Mcp-Name` source field, its metric label, whether it needs the Tasks extension, and how it is
//! admitted against the tenant's request rate. The gateway routes with this table; the test
//! client and the load tester build their headers from it, so a new method is added here once.

use serde_json::{Map, Value};

use super::RpcError;
use super::header_value;

/// A method of 2026-07-28 plus the Tasks extension that taskgate answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::VariantArray)]
pub enum Method {
    Discover,
    ToolsList,
    ToolsCall,
    TasksGet,
    TasksUpdate,
    TasksCancel,
    SubscriptionsListen,
    PromptsList,
    PromptsGet,
    ResourcesList,
    ResourcesTemplatesList,
    ResourcesRead,
    CompletionComplete,
    /// The Events extension (`io.modelcontextprotocol/events`, docs/events.md): answered only
    /// with `--events`, else `-32601` like an unknown method.
    EventsList,
    EventsPoll,
    /// Push delivery: a request-scoped SSE stream, holding a listen stream slot.
    EventsStream,
    EventsSubscribe,
    EventsUnsubscribe,
}

/// Whether an `Mcp-Name` header must accompany the method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameHeader {
    /// The method has no `Mcp-Name`.
    None,
    /// Always required; mirrors `params.<field>`.
    Required(&'static str),
    /// Checked when sent, required only in strict mode; mirrors `params.<field>`.
    Optional(&'static str),
}

/// How a request is counted against its tenant's request rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// One rate check before the method runs.
    Request,
    /// The method admits itself inside its own script (task creation, task reads).
    InMethod,
}

impl Method {
    /// Every method, in declaration order (derived, so a new variant is never left out).
    pub const ALL: &'static [Self] = <Self as strum::VariantArray>::VARIANTS;

    /// The JSON-RPC method name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Discover => "server/discover",
            Self::ToolsList => "tools/list",
            Self::ToolsCall => "tools/call",
            Self::TasksGet => "tasks/get",
            Self::TasksUpdate => "tasks/update",
            Self::TasksCancel => "tasks/cancel",
            Self::SubscriptionsListen => "subscriptions/listen",
            Self::PromptsList => "prompts/list",
            Self::PromptsGet => "prompts/get",
            Self::ResourcesList => "resources/list",
            Self::ResourcesTemplatesList => "resources/templates/list",
            Self::ResourcesRead => "resources/read",
            Self::CompletionComplete => "completion/complete",
            Self::EventsList => "events/list",
            Self::EventsPoll => "events/poll",
            Self::EventsStream => "events/stream",
            Self::EventsSubscribe => "events/subscribe",
            Self::EventsUnsubscribe => "events/unsubscribe",
        }
    }

    /// The method of a wire name. `initialize` and the methods removed in 2026-07-28 (`ping`,
    /// `logging/setLevel`, `resources/subscribe`) or in the Tasks extension (`tasks/status`,
    /// `tasks/result`, `tasks/list`) are unknown like any other name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|m| m.name() == name)
    }

    /// The method of a wire name, or the error an unknown name gets. `initialize` names the
    /// versions a dual-era client can switch to.
    pub fn route(name: &str) -> Result<Self, RpcError> {
        match Self::from_name(name) {
            Some(method) => Ok(method),
            None if name == "initialize" => Err(RpcError::initialize_removed()),
            None => Err(RpcError::method_not_found()),
        }
    }

    /// The metric label of a wire name: the method's name, or `other` (never client text).
    pub fn label_of(name: &str) -> &'static str {
        Self::from_name(name).map_or("other", Self::name)
    }

    /// Where the `Mcp-Name` header comes from. The task methods do not need it for routing (any
    /// replica serves any task) and some clients omit it, so it is required there only in strict
    /// mode.
    pub const fn name_header(self) -> NameHeader {
        match self {
            Self::ToolsCall | Self::PromptsGet => NameHeader::Required("name"),
            Self::ResourcesRead => NameHeader::Required("uri"),
            Self::TasksGet | Self::TasksUpdate | Self::TasksCancel => NameHeader::Optional("taskId"),
            Self::Discover
            | Self::ToolsList
            | Self::SubscriptionsListen
            | Self::PromptsList
            | Self::ResourcesList
            | Self::ResourcesTemplatesList
            | Self::CompletionComplete
            | Self::EventsSubscribe
            | Self::EventsUnsubscribe
            // The extension defines no `Mcp-Name` for its methods.
            | Self::EventsList
            | Self::EventsPoll
            | Self::EventsStream => NameHeader::None,
        }
    }

    /// The task methods need the extension declared on their own request; `tools/call` decides
    /// per tool. Every method is named, so a new one must choose.
    pub const fn requires_tasks_extension(self) -> bool {
        match self {
            Self::TasksGet | Self::TasksUpdate | Self::TasksCancel => true,
            Self::Discover
            | Self::ToolsList
            | Self::ToolsCall
            | Self::SubscriptionsListen
            | Self::PromptsList
            | Self::PromptsGet
            | Self::ResourcesList
            | Self::ResourcesTemplatesList
            | Self::ResourcesRead
            | Self::CompletionComplete
            | Self::EventsSubscribe
            | Self::EventsUnsubscribe
            | Self::EventsList
            | Self::EventsPoll
            | Self::EventsStream => false,
        }
    }

    /// Where the tenant's request rate is checked. Every method is named, so a new one must
    /// choose.
    pub const fn admission(self) -> Admission {
        match self {
            // Methods that run on a worker admit their hidden task themselves, as a call does;
            // `tasks/get` admits alongside its read, in one round trip.
            Self::ToolsCall | Self::TasksGet | Self::PromptsGet | Self::ResourcesRead | Self::CompletionComplete => {
                Admission::InMethod
            }
            Self::Discover
            | Self::ToolsList
            | Self::TasksUpdate
            | Self::TasksCancel
            | Self::SubscriptionsListen
            | Self::PromptsList
            | Self::ResourcesList
            | Self::ResourcesTemplatesList
            | Self::EventsSubscribe
            | Self::EventsUnsubscribe
            | Self::EventsList
            | Self::EventsPoll
            | Self::EventsStream => Admission::Request,
        }
    }

    /// The `Mcp-Name` value a conforming client sends with these params, encoded for a header.
    pub fn name_header_value(self, params: &Map<String, Value>) -> Option<String> {
        let field = match self.name_header() {
            NameHeader::None => return None,
            NameHeader::Required(field) | NameHeader::Optional(field) => field,
        };
        params.get(field).and_then(Value::as_str).map(header_value::encode)
    }
}

/// The `Mcp-Name` value a conforming client sends for `method` with `params` (any JSON), if any.
pub fn name_header_for(method: &str, params: &Value) -> Option<String> {
    Method::from_name(method).zip(params.as_object()).and_then(|(m, p)| m.name_header_value(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_method_round_trips_through_its_name() {
        for &method in Method::ALL {
            assert_eq!(Method::from_name(method.name()), Some(method));
            assert_eq!(Method::label_of(method.name()), method.name());
        }
        assert_eq!(Method::label_of("ping"), "other");
        assert_eq!(Method::label_of("x".repeat(500).as_str()), "other");
    }

    #[test]
    fn removed_and_unknown_methods_are_not_found() {
        for name in ["ping", "tasks/list", "tasks/result", "tasks/status", "logging/setLevel", ""] {
            assert_eq!(Method::route(name).unwrap_err().code(), -32601, "{name}");
        }
        let init = Method::route("initialize").unwrap_err();
        assert_eq!(init.code(), -32601);
        assert!(init.data.is_some(), "initialize names the supported versions");
    }

    #[test]
    fn name_headers_come_from_the_right_field() {
        let params = json!({"name": "echo", "taskId": "t_1"});
        assert_eq!(name_header_for("tools/call", &params).as_deref(), Some("echo"));
        assert_eq!(name_header_for("tasks/get", &params).as_deref(), Some("t_1"));
        assert_eq!(name_header_for("prompts/get", &params).as_deref(), Some("echo"));
        assert_eq!(name_header_for("resources/read", &json!({"uri": "test://a"})).as_deref(), Some("test://a"));
        assert_eq!(name_header_for("tools/list", &params), None);
        assert_eq!(name_header_for("unknown", &params), None);
        // Non-ASCII names are header-encoded.
        let encoded = name_header_for("tools/call", &json!({"name": "héllo"})).unwrap();
        assert_eq!(header_value::decode(encoded.as_bytes()).unwrap(), "héllo");
    }

    #[test]
    fn only_task_methods_need_the_extension_and_only_creators_admit_themselves() {
        let need: Vec<_> = Method::ALL.iter().copied().filter(|m| m.requires_tasks_extension()).collect();
        assert_eq!(need, [Method::TasksGet, Method::TasksUpdate, Method::TasksCancel]);
        let own: Vec<_> = Method::ALL.iter().copied().filter(|m| m.admission() == Admission::InMethod).collect();
        assert_eq!(
            own,
            [
                Method::ToolsCall,
                Method::TasksGet,
                Method::PromptsGet,
                Method::ResourcesRead,
                Method::CompletionComplete
            ]
        );
    }
}
