//! The console's HTML, as `maud` templates: every interpolated value is escaped by the
//! template engine, so a tool's result or a client's text can never become markup. The pages
//! load one script, htmx (shipped in the binary), which refreshes the live parts by polling;
//! no inline script or style exists anywhere, so the Content-Security-Policy forbids them.

use std::collections::BTreeMap;

use maud::{DOCTYPE, Markup, html};
use taskgate_shared::store::{Cursor, Inspection, ListedHook, Page, Row};
use taskgate_shared::task::iso8601_ms;

use super::model::{Overview, Tally, Viewer};

/// htmx's settings: no inline indicator styles (the CSP forbids them), no `eval`, and requests
/// to this origin only.
const HTMX_CONFIG: &str =
    r#"{"includeIndicatorStyles":false,"allowEval":false,"allowScriptTags":false,"selfRequestsOnly":true}"#;

/// Every page: the navigation, the banner of an open console, and the body.
pub(super) fn page(title: &str, viewer: Option<&Viewer>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="htmx-config" content=(HTMX_CONFIG);
                title { (title) " · taskgate console" }
                link rel="stylesheet" href="/console/assets/console.css";
                script src="/console/assets/htmx.min.js" defer {}
            }
            body {
                header {
                    nav aria-label="Console" {
                        a.brand href="/console/" { "taskgate" }
                        @if viewer.is_some() {
                            a href="/console/" { "Overview" }
                            a href="/console/tasks" { "Tasks" }
                            a href="/console/credentials" { "Credentials" }
                            a href="/console/webhooks" { "Webhooks" }
                        }
                        @if let Some(viewer) = viewer {
                            span.who { "Signed in as " strong { (viewer.name()) } @if !viewer.may_act { " (read-only)" } }
                            @if !viewer.open {
                                form.inline method="post" action="/console/logout" {
                                    input type="hidden" name="csrf" value=(viewer.csrf);
                                    button type="submit" { "Sign out" }
                                }
                            }
                        }
                    }
                }
                @if viewer.is_some_and(|v| v.open) {
                    p.banner role="alert" {
                        "No authentication is configured (--auth none): anyone who can reach this loopback address has full control of this console."
                    }
                }
                main { (body) }
            }
        }
    }
}

/// Which upstreams have a credential, per tenant: the names of its values, the key it is
/// sealed under, who set it when. The values are never read for this page.
pub(super) fn credentials(viewer: &Viewer, entries: &[crate::admin::CredentialEntry]) -> Markup {
    let mut by_tenant: BTreeMap<&str, Vec<&crate::admin::CredentialEntry>> = BTreeMap::new();
    for entry in entries {
        by_tenant.entry(entry.tenant.as_str()).or_default().push(entry);
    }
    page(
        "Credentials",
        Some(viewer),
        html! {
            h1 { "Upstream credentials" }
            p.note { "Values are sealed at rest and never shown; set, delete and re-seal them with "
                code { "taskgate credentials" } " or the admin API." }
            @if by_tenant.is_empty() { p #no-credentials { "No tenant has an upstream credential." } }
            @for (tenant, rows) in &by_tenant {
                h2 { "Tenant " code { (tenant) } }
                div.scroll {
                    table.credentials data-tenant=(tenant) {
                        thead { tr {
                            th scope="col" { "Upstream" } th scope="col" { "For" } th scope="col" { "Value names" }
                            th scope="col" { "Key" } th scope="col" { "Set at" } th scope="col" { "Set by" }
                        } }
                        tbody {
                            @for row in rows {
                                tr {
                                    td { code { (row.upstream) } }
                                    td { @if let Some(p) = &row.principal { "principal " code { (p) } } @else { "the whole tenant" } }
                                    td { @for (i, name) in row.names.iter().enumerate() { @if i > 0 { ", " } code { (name) } } }
                                    td { code { (row.key_id) } }
                                    td { (row.set_at) }
                                    td { (row.set_by) }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// Webhook subscriptions per tenant: where they deliver (scheme, host and port only), their
/// state and failures, and their newest dead letters; an operator may end one.
pub(super) fn webhooks(viewer: &Viewer, hooks: &[ListedHook], max: usize) -> Markup {
    let mut by_tenant: BTreeMap<&str, Vec<&ListedHook>> = BTreeMap::new();
    for hook in hooks {
        by_tenant.entry(hook.tenant.as_str()).or_default().push(hook);
    }
    let at = |ms: u64| iso8601_ms(i64::try_from(ms).unwrap_or(i64::MAX));
    page(
        "Webhooks",
        Some(viewer),
        html! {
            h1 { "Webhook subscriptions" }
            p.note { "Only each URL's scheme, host and port are shown; never its path, its query or the secret." }
            @if hooks.len() >= max { p.note { "Showing the first " (max) "." } }
            @if by_tenant.is_empty() { p #no-webhooks { "No webhook subscription." } }
            @for (tenant, rows) in &by_tenant {
                h2 { "Tenant " code { (tenant) } }
                @for hook in rows {
                    section.webhook data-tenant=(tenant) data-id=(hook.id) {
                        h3 { code { (hook.id) } }
                        dl {
                            dt { "Principal" } dd { code { (hook.principal) } }
                            dt { "Event" } dd { code { (hook.name) } }
                            dt { "Delivers to" } dd.origin { code { (hook.origin) } }
                            dt { "State" } dd.state { @if hook.active { "active" } @else { "suspended" } }
                            dt { "Expires" } dd { @if let Some(ms) = hook.expires_ms { (at(ms)) } @else { "never" } }
                            dt { "Last delivery" } dd { @if let Some(ms) = hook.last_delivery_ms { (at(ms)) } @else { "none" } }
                            dt { "Last error" } dd { @if let Some(e) = &hook.last_error { code { (e) } } @else { "none" } }
                            dt { "Failing since" } dd { @if let Some(ms) = hook.failed_since_ms { (at(ms)) } @else { "-" } }
                            dt { "Dead letters" } dd.dead-count { (hook.dead_letters) }
                        }
                        @if !hook.newest_dead.is_empty() {
                            div.scroll {
                                table.dead-letters {
                                    thead { tr {
                                        th scope="col" { "Event id" } th scope="col" { "At" }
                                        th scope="col" { "Reason" } th scope="col" { "Attempts" }
                                    } }
                                    tbody {
                                        @for letter in &hook.newest_dead {
                                            tr {
                                                td { code { (letter.event_id) } }
                                                td { (at(letter.at_ms)) }
                                                td { code { (letter.reason) } }
                                                td { (letter.attempts) }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                        @if viewer.may_act {
                            form.stack method="post" action={ "/console/webhooks/" (hook.id) "/end" } {
                                input type="hidden" name="csrf" value=(viewer.csrf);
                                input type="hidden" name="tenant" value=(tenant);
                                label for={ "end-" (hook.id) } { "Why end it" }
                                input id={ "end-" (hook.id) } name="reason" maxlength="500" required;
                                button type="submit" { "End the subscription" }
                            }
                        }
                    }
                }
            }
        },
    )
}

pub(super) fn login(message: Option<&str>) -> Markup {
    page(
        "Sign in",
        None,
        html! {
            h1 { "Sign in" }
            @if let Some(message) = message { p.error role="alert" { (message) } }
            form.stack method="post" action="/console/login" {
                label for="token" { "Token (a JWT or an API key with the operator or tenant-admin scope)" }
                input #token type="password" name="token" autocomplete="off" required;
                button type="submit" { "Sign in" }
            }
        },
    )
}

pub(super) fn error(title: &str, message: &str) -> Markup {
    page(title, None, html! { h1 { (title) } p.error { (message) } p { a href="/console/" { "Back to the console" } } })
}

pub(super) fn overview(viewer: &Viewer, o: &Overview) -> Markup {
    let (tallies, sampled, workers, tools, now_ms) = (&o.tallies, o.sampled, &o.workers, &o.tools, o.read_ms);
    let (pools, redis) = (o.pools.as_deref(), o.redis.as_ref());
    page(
        "Overview",
        Some(viewer),
        html! {
            h1 { "Overview" }
            (overview_live(tallies, sampled, now_ms))
            @if let Some(redis) = redis {
                h2 { "Redis" }
                p #redis {
                    "Sentinel master " code { (redis.master) } ", primary "
                    @if let Some(primary) = &redis.primary { code { (primary) } } @else { span.pool-idle { "not known now" } }
                    "; failovers this gateway followed: " (redis.failovers) "."
                }
            }
            @if let Some(pools) = pools {
                h2 { "Worker pools" }
                @if pools.is_empty() { p { "No pool has a live worker or a routed tool." } }
                @else {
                    div.scroll {
                        table #pools {
                            thead { tr {
                                th scope="col" { "Pool" } th scope="col" { "Workers alive" } th scope="col" { "Busy slots" }
                                th scope="col" { "Queued" } th scope="col" { "Oldest queued" }
                            } }
                            tbody {
                                @for pool in pools {
                                    tr {
                                        td { code { (pool.name) } }
                                        td {
                                            (pool.workers)
                                            @if pool.workers == 0 && pool.backlog.depth > 0 {
                                                " " span.pool-idle { "no live worker: its tasks wait" }
                                            }
                                        }
                                        td { (pool.busy) " / " (pool.slots) }
                                        td { (pool.backlog.depth) }
                                        td { @if let Some(at) = pool.backlog.oldest_ms { (age(now_ms - at as i64)) } @else { "–" } }
                                    }
                                }
                            }
                        }
                    }
                    p.note { "Queued and oldest are read from Redis with this page, over every tenant; busy slots are as of each worker's last heartbeat. Within a pool, tenants with tasks queued share its workers fairly, so one tenant's oldest task may wait longer than this." }
                }
            }
            h2 { "Workers alive" }
            @if workers.is_empty() { p { "No worker has sent a heartbeat lately." } }
            @else {
                div.scroll {
                    table #workers {
                        thead { tr {
                            th scope="col" { "Worker" } th scope="col" { "Pool" } th scope="col" { "Running now" } th scope="col" { "Busy slots at its heartbeat" } th scope="col" { "Tools" }
                            th scope="col" { "Upstream servers (connections up)" }
                        } }
                        tbody {
                            @for worker in workers {
                                tr {
                                    td { code { (worker.id) } }
                                    // Workers from before pools publish none: they were `default`.
                                    td { code { @if worker.status["pool"].is_string() { (text(&worker.status["pool"])) } @else { "default" } } }
                                    td { (worker.running.unwrap_or(0)) }
                                    td {
                                        (text(&worker.status["busy"])) " / " (text(&worker.status["slots"]))
                                        @if let Some(at) = worker.status["at"].as_i64() { " " span.note { "(" (age(now_ms - at)) " ago)" } }
                                    }
                                    td { (text(&worker.status["tools"])) }
                                    td {
                                        @for upstream in worker.status["upstreams"].as_array().into_iter().flatten() {
                                            @let up = upstream["up"].as_u64().unwrap_or(0);
                                            @let links = upstream["links"].as_u64().unwrap_or(0);
                                            span class={ "upstream " @if up == links && links > 0 { "up" } @else { "down" } } {
                                                code { (text(&upstream["name"])) } " " (up) "/" (links)
                                            }
                                            " "
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                p.note { "Running now counts the runs each worker holds among the tasks above, read with this page. Busy slots are as of each worker's last heartbeat (every third of its --catalogue-ttl-ms), aged beside them." }
            }
            h2 { "Tools served now" }
            @if tools.is_empty() { p { "No worker serves any tool." } }
            ul.tools { @for tool in tools { li { code { (tool) } } } }
        },
    )
}

/// The part of the overview that refreshes itself every two seconds.
pub(super) fn overview_live(tallies: &BTreeMap<(String, String), Tally>, sampled: usize, now_ms: i64) -> Markup {
    html! {
        section #overview hx-get="/console/overview" hx-trigger="every 2s" hx-swap="outerHTML" {
            p.note { "The " (sampled) " newest live tasks, by tenant and tool." }
            div.scroll {
                table {
                    thead { tr {
                        th scope="col" { "Tenant" } th scope="col" { "Tool" } th scope="col" { "Queued" }
                        th scope="col" { "Running" } th scope="col" { "Input required" } th scope="col" { "Completed" }
                        th scope="col" { "Failed" } th scope="col" { "Cancelled" } th scope="col" { "Oldest queued" }
                    } }
                    tbody {
                        @for ((tenant, tool), tally) in tallies {
                            tr {
                                td { a href={ "/console/tasks?tenant=" (urlencode(tenant)) } { (tenant) } }
                                td { a href={ "/console/tasks?tenant=" (urlencode(tenant)) "&tool=" (urlencode(tool)) } { code { (tool) } } }
                                td { (tally.queued) } td { (tally.running) } td { (tally.input_required) }
                                td { (tally.completed) } td { (tally.failed) } td { (tally.cancelled) }
                                td { @if let Some(at) = tally.oldest_queued_ms { (age(now_ms - at)) } @else { "–" } }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The list's filters, as the form and the query string carry them.
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub(super) struct ListQuery {
    #[serde(default)]
    pub(super) tenant: String,
    #[serde(default)]
    pub(super) tool: String,
    #[serde(default)]
    pub(super) status: String,
    /// Created at least this many seconds ago.
    #[serde(default)]
    pub(super) older: String,
    /// Created at most this many seconds ago.
    #[serde(default)]
    pub(super) newer: String,
    #[serde(default)]
    pub(super) after: String,
}

impl ListQuery {
    fn link(&self, after: Option<&Cursor>) -> String {
        let mut url = format!(
            "/console/tasks?tenant={}&tool={}&status={}&older={}&newer={}",
            urlencode(&self.tenant),
            urlencode(&self.tool),
            urlencode(&self.status),
            urlencode(&self.older),
            urlencode(&self.newer)
        );
        if let Some(after) = after {
            url.push_str("&after=");
            url.push_str(&urlencode(&after.encode()));
        }
        url
    }
}

pub(super) const STATES: [&str; 5] = ["working", "input_required", "completed", "failed", "cancelled"];

pub(super) fn task_list(viewer: &Viewer, query: &ListQuery, page_rows: &Page, now_ms: i64) -> Markup {
    page(
        "Tasks",
        Some(viewer),
        html! {
            h1 { "Tasks" }
            form.filters method="get" action="/console/tasks" {
                @if viewer.may_act || viewer.open {
                    label { "Tenant " input name="tenant" value=(query.tenant); }
                }
                label { "Tool " input name="tool" value=(query.tool); }
                label { "State "
                    select name="status" {
                        option value="" selected[query.status.is_empty()] { "any" }
                        @for state in STATES { option value=(state) selected[query.status == state] { (state) } }
                    }
                }
                label { "Older than (s) " input name="older" inputmode="numeric" size="6" value=(query.older); }
                label { "Newer than (s) " input name="newer" inputmode="numeric" size="6" value=(query.newer); }
                button type="submit" { "Filter" }
            }
            (task_rows(query, page_rows, now_ms))
        },
    )
}

/// The table of a list page; the first page refreshes itself every two seconds.
pub(super) fn task_rows(query: &ListQuery, page_rows: &Page, now_ms: i64) -> Markup {
    let live = query.after.is_empty();
    let refresh = format!("{}&fragment=1", query.link(None));
    html! {
        section #tasks hx-get=[live.then_some(&refresh)] hx-trigger=[live.then_some("every 2s")] hx-swap="outerHTML" {
            @if page_rows.rows.is_empty() { p { "No task matches." } }
            @else {
                div.scroll {
                    table {
                        thead { tr {
                            th scope="col" { "Task" } th scope="col" { "Tenant" } th scope="col" { "Tool" }
                            th scope="col" { "State" } th scope="col" { "Created" } th scope="col" { "Age" }
                            th scope="col" { "Run" } th scope="col" { "Message" }
                        } }
                        tbody {
                            @for row in &page_rows.rows { (task_row(row, now_ms)) }
                        }
                    }
                }
            }
            @if let Some(next) = &page_rows.next {
                p { a rel="next" href=(query.link(Some(next))) { "Next page" } }
            }
        }
    }
}

fn task_row(row: &Row, now_ms: i64) -> Markup {
    html! {
        tr {
            td { a href={ "/console/tasks/" (row.id) } { code { (row.id) } } }
            td { (row.tenant) }
            td { code { (row.tool) } }
            td { (status(&row.status)) }
            td { time datetime=(iso8601_ms(row.created_ms)) { (iso8601_ms(row.created_ms)) } }
            td { (age(now_ms - row.created_ms)) }
            td { @if row.queued() { "queued" } @else if let Some(holder) = &row.holder { code { (holder) } } }
            td { (shown_message(&row.status, row.message.as_deref(), false)) }
        }
    }
}

/// What stands for a status message that is the text of an input request.
pub(super) const REDACTED_QUESTION: &str = "(the question asked; shown with the input requests when revealed)";

/// Whether a task in this state has the text of its input request as its status message: that
/// text is elicitation content, sensitive as the request itself.
pub(super) fn message_is_a_question(status: Option<&str>) -> bool {
    status == Some("input_required")
}

/// A status message as the console shows it: a question's text only when revealed.
fn shown_message<'a>(status: &str, message: Option<&'a str>, reveal: bool) -> &'a str {
    match message {
        Some(_) if message_is_a_question(Some(status)) && !reveal => REDACTED_QUESTION,
        message => message.unwrap_or(""),
    }
}

/// What the task page shows of the record, besides its live part.
pub(super) struct TaskView<'a> {
    pub(super) id: &'a str,
    pub(super) inspection: &'a Inspection,
    pub(super) reveal: bool,
    pub(super) trace_url: Option<String>,
    /// The pool this queued task waits for, when none of its workers is alive.
    pub(super) waiting_for: Option<String>,
}

pub(super) fn task(viewer: &Viewer, view: &TaskView<'_>) -> Markup {
    let record = &view.inspection.record;
    let field = |name: &str| record.get(name).map(String::as_str).unwrap_or("");
    let terminal = matches!(field("status"), "completed" | "failed" | "cancelled");
    page(
        view.id,
        Some(viewer),
        html! {
            h1 { "Task " code { (view.id) } }
            dl.record {
                dt { "Tenant" } dd { (field("tenant")) }
                dt { "Principal" } dd { (field("principal")) }
                dt { "Tool" } dd { code { (field("tool")) } }
                dt { "Pool" } dd { code { @if record.contains_key("pool") { (field("pool")) } @else { "default" } } }
                dt { "Created" } dd { (timestamp(field("created"))) }
                dt { "Time to live" } dd { (field("ttl")) " ms" }
                dt { "Poll interval" } dd { (field("poll")) " ms" }
                dt { "Reclaims" } dd { (record.get("reclaims").map_or("0", String::as_str)) }
                @if let Some(url) = &view.trace_url { dt { "Trace" } dd { a href=(url) rel="noreferrer" { "Open the trace" } } }
            }
            @if let Some(pool) = &view.waiting_for {
                p #waiting-for-pool.note { "Waiting for a worker of pool " code { (pool) } ": none has sent a heartbeat lately." }
            }
            h2 { "Arguments" }
            (sensitive(view.reveal, record.get("args").map(String::as_str)))
            @if !view.reveal {
                p { a href={ "/console/tasks/" (view.id) "?reveal=1" } { "Reveal arguments, input requests and answers" } " (the reveal is logged)" }
            }
            (task_live(view))
            // Outside the part that refreshes itself, so that a reason being typed stays.
            @if viewer.may_act && !terminal {
                h2 { "Actions" }
                div.actions {
                    form.stack method="post" action={ "/console/tasks/" (view.id) "/cancel" } {
                        input type="hidden" name="csrf" value=(viewer.csrf);
                        label for="cancel-reason" { "Why cancel" }
                        input #cancel-reason name="reason" maxlength="500" required;
                        button #cancel type="submit" { "Cancel the task" }
                    }
                    form.stack method="post" action={ "/console/tasks/" (view.id) "/fail" } {
                        input type="hidden" name="csrf" value=(viewer.csrf);
                        label for="fail-reason" { "Why fail it (the client sees this message)" }
                        input #fail-reason name="reason" maxlength="500" required;
                        button #fail type="submit" { "Fail the task" }
                    }
                }
            }
        },
    )
}

/// The part of the task page that refreshes itself every second until the task is terminal.
pub(super) fn task_live(view: &TaskView<'_>) -> Markup {
    let inspection = view.inspection;
    let record = &inspection.record;
    let field = |name: &str| record.get(name).map(String::as_str).unwrap_or("");
    // A revealed view is a snapshot: each reveal is one logged page load, never a stream of them.
    let live = !view.reveal && !matches!(field("status"), "completed" | "failed" | "cancelled");
    let refresh = format!("/console/tasks/{}/live", view.id);
    html! {
        section #live hx-get=[live.then_some(&refresh)] hx-trigger=[live.then_some("every 1s")] hx-swap="outerHTML" {
            dl.record {
                dt { "State" } dd #state { (status(field("status"))) }
                dt { "Message" } dd { (shown_message(field("status"), record.get("msg").map(String::as_str), view.reveal)) }
                dt { "Updated" } dd { (timestamp(field("updated"))) }
                dt { "Version" } dd { (field("ver")) }
                dt { "Run" } dd {
                    @if let Some(holder) = record.get("holder") { "held by " code { (holder) } ", fence " (field("fence")) }
                    @else if field("status") == "working" { "queued" } @else { "–" }
                }
            }
            h2 { "Timeline" }
            div.scroll {
                table #timeline {
                    thead { tr {
                        th scope="col" { "At" } th scope="col" { "What" } th scope="col" { "State after" }
                        th scope="col" { "Fence" } th scope="col" { "Holder" } th scope="col" { "By" } th scope="col" { "Why" }
                    } }
                    tbody {
                        @for entry in &inspection.timeline {
                            tr {
                                td { (entry["at"].as_i64().map(iso8601_ms).unwrap_or_default()) }
                                td { (text(&entry["ev"])) }
                                td { (text(&entry["to"])) }
                                td { (text(&entry["fence"])) }
                                td { (text(&entry["holder"])) }
                                td { (text(&entry["by"])) }
                                td { (text(&entry["why"])) }
                            }
                        }
                    }
                }
            }
            h2 { "Input requests" }
            (keyed(view.reveal, &inspection.inputs, "No request is outstanding."))
            h2 { "Answers" }
            (keyed(view.reveal, &inspection.answers, "No answer was received."))
            @if let Some(result) = record.get("result") {
                h2 { "Result" }
                pre.json #result { (pretty(result)) }
            }
            @if let Some(error) = record.get("error") {
                h2 { "Error" }
                pre.json #error { (pretty(error)) }
            }
        }
    }
}

/// Sensitive JSON (arguments, input requests, answers): its size only, unless revealed.
fn sensitive(reveal: bool, json: Option<&str>) -> Markup {
    match json {
        None => html! { p { "None." } },
        Some(json) if reveal => html! { pre.json { (pretty(json)) } },
        Some(json) => html! { p.redacted { "Redacted (" (json.len()) " bytes)." } },
    }
}

fn keyed(reveal: bool, entries: &BTreeMap<String, String>, none: &str) -> Markup {
    html! {
        @if entries.is_empty() { p { (none) } }
        @else {
            dl.keyed {
                @for (key, json) in entries {
                    dt { code { (key) } }
                    dd { (sensitive(reveal, Some(json))) }
                }
            }
        }
    }
}

fn status(status: &str) -> Markup {
    html! { span class={ "status status-" (status) } { (status) } }
}

fn timestamp(ms: &str) -> Markup {
    match ms.parse::<i64>() {
        Ok(ms) => html! { time datetime=(iso8601_ms(ms)) { (iso8601_ms(ms)) } },
        Err(_) => html! { "–" },
    }
}

/// A JSON value's text for a cell: strings bare, absent empty.
fn text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Stored JSON, indented for reading (as stored when it does not parse).
fn pretty(json: &str) -> String {
    serde_json::from_str::<serde_json::Value>(json)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| json.to_owned())
}

fn age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", s / 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

fn urlencode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

#[cfg(test)]
fn render(markup: Markup) -> String {
    markup.into_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_text_is_escaped_wherever_it_lands() {
        let hostile = r#"{"content":[{"type":"text","text":"<script>alert(1)</script>"}]}"#;
        let html = render(html! { pre { (pretty(hostile)) } (sensitive(true, Some(hostile))) });
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
    }

    #[test]
    fn sensitive_values_show_their_size_only_until_revealed() {
        let html = render(sensitive(false, Some(r#"{"password":"hunter2"}"#)));
        assert!(!html.contains("hunter2") && html.contains("22 bytes"), "{html}");
    }

    #[test]
    fn ages_read_naturally() {
        assert_eq!(age(59_999), "59 s");
        assert_eq!(age(61_000), "1 min");
        assert_eq!(age(3_723_000), "1 h 2 min");
        assert_eq!(age(-5), "0 s");
    }
}
