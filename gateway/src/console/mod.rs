//! The operator console under `/console/` (`--console`, off by default): find tasks, read one
//! whole (record, timeline, input requests, result), and cancel or fail it. Read-mostly,
//! server-rendered; what it reads comes from Redis, like everything else, so any replica serves
//! it. Who may see and do what is `access`; the markup is `views`.

mod access;
mod assets;
mod views;

use std::collections::BTreeMap;

use axum::Router;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::Markup;
use serde::Deserialize;
use taskgate_shared::store::{CancelOutcome, Cursor, Filter, OperatorFail, Page};
use taskgate_shared::task::TaskId;

use crate::auth::Authenticator;
use crate::state::AppState;
use access::Viewer;
use views::{ListQuery, Tally, TaskView};

/// Rows per list page.
const PAGE_ROWS: usize = 50;
/// Tasks the overview counts: the newest of the index.
const OVERVIEW_SAMPLE: usize = 500;

/// Every console route. Mounted only with `--console`.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/console", get(|| async { Redirect::permanent("/console/") }))
        .route("/console/", get(overview))
        .route("/console/overview", get(overview_fragment))
        .route("/console/tasks", get(task_list))
        .route("/console/tasks/{id}", get(task))
        .route("/console/tasks/{id}/live", get(task_fragment))
        .route("/console/tasks/{id}/cancel", post(cancel))
        .route("/console/tasks/{id}/fail", post(fail))
        .route("/console/api/tasks/{id}", get(task_json))
        .route("/console/login", get(login_form).post(login))
        .route("/console/logout", post(logout))
        .route("/console/assets/{name}", get(assets::serve))
        .layer(axum::middleware::map_response(protect))
}

/// Why a console request was not served. Each is a page, never a stack trace.
#[derive(Debug)]
pub(crate) enum ConsoleError {
    /// No credential, or one that does not authenticate: the sign-in page, 401.
    SignIn,
    Forbidden(&'static str),
    NotFound,
    BadRequest(&'static str),
    /// Redis did not answer.
    Unavailable,
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let (status, markup) = match self {
            Self::SignIn => (StatusCode::UNAUTHORIZED, views::login(None)),
            Self::Forbidden(why) => (StatusCode::FORBIDDEN, views::error("Not allowed", why)),
            Self::NotFound => {
                (StatusCode::NOT_FOUND, views::error("Not found", "No such task, or not one you may see."))
            }
            Self::BadRequest(why) => (StatusCode::BAD_REQUEST, views::error("Bad request", why)),
            Self::Unavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                views::error("Unavailable", "Redis did not answer; try again shortly."),
            ),
        };
        (status, Html(markup.into_string())).into_response()
    }
}

impl From<taskgate_shared::store::StoreError> for ConsoleError {
    fn from(err: taskgate_shared::store::StoreError) -> Self {
        tracing::warn!(error = %err, "console read failed");
        Self::Unavailable
    }
}

/// Headers on every console response: a strict Content-Security-Policy (scripts and styles
/// from this origin only, no inline ones, no frames), no sniffing, no referrer sent elsewhere, no caching.
async fn protect(mut response: Response) -> Response {
    const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
                       form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    response
}

fn html(markup: Markup) -> Response {
    Html(markup.into_string()).into_response()
}

fn now_ms() -> i64 {
    i64::try_from(taskgate_shared::task::now_ms()).unwrap_or(i64::MAX)
}

fn shards(state: &AppState) -> u16 {
    state.config.redis.queue_shards
}

async fn overview(State(state): State<AppState>, viewer: Viewer) -> Result<Response, ConsoleError> {
    let (tallies, sampled) = tally(&state, &viewer).await?;
    let catalogue = state.catalogue.current();
    let mut tools: Vec<String> = catalogue
        .listing()
        .get("tools")
        .and_then(|t| t.as_array())
        .map(|tools| tools.iter().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    tools.sort();
    let workers: Vec<views::WorkerView> =
        state.store.live_workers().await?.into_iter().map(|(id, status, _)| views::WorkerView { id, status }).collect();
    Ok(html(views::overview(&viewer, &tallies, sampled, &workers, &tools, now_ms())))
}

async fn overview_fragment(State(state): State<AppState>, viewer: Viewer) -> Result<Response, ConsoleError> {
    let (tallies, sampled) = tally(&state, &viewer).await?;
    Ok(html(views::overview_live(&tallies, sampled, now_ms())))
}

/// Counts by (tenant, tool) and state over the newest tasks this viewer may see.
async fn tally(state: &AppState, viewer: &Viewer) -> Result<(BTreeMap<(String, String), Tally>, usize), ConsoleError> {
    let filter = Filter { tenant: viewer.confine(None), ..Filter::default() };
    let page = state.store.list_tasks(shards(state), &filter, None, OVERVIEW_SAMPLE, now_ms()).await?;
    let mut tallies: BTreeMap<(String, String), Tally> = BTreeMap::new();
    for row in &page.rows {
        let tally = tallies.entry((row.tenant.clone(), row.tool.clone())).or_default();
        match row.status.as_str() {
            "working" if row.queued() => {
                tally.queued += 1;
                tally.oldest_queued_ms = Some(tally.oldest_queued_ms.map_or(row.created_ms, |t| t.min(row.created_ms)));
            }
            "working" => tally.running += 1,
            "input_required" => tally.input_required += 1,
            "completed" => tally.completed += 1,
            "failed" => tally.failed += 1,
            _ => tally.cancelled += 1,
        }
    }
    Ok((tallies, page.rows.len()))
}

#[derive(Debug, Default, Deserialize)]
struct ListParams {
    #[serde(flatten)]
    query: ListQuery,
    #[serde(default)]
    fragment: String,
}

async fn task_list(
    State(state): State<AppState>,
    viewer: Viewer,
    Query(params): Query<ListParams>,
) -> Result<Response, ConsoleError> {
    let query = params.query;
    let seconds = |text: &str| -> Result<Option<i64>, ConsoleError> {
        match text.trim() {
            "" => Ok(None),
            text => text
                .parse::<i64>()
                .ok()
                .filter(|s| *s >= 0)
                .map(|s| Some(s.saturating_mul(1000)))
                .ok_or(ConsoleError::BadRequest("Ages are whole seconds.")),
        }
    };
    let some = |text: &str| Some(text.trim().to_owned()).filter(|t| !t.is_empty());
    if !query.status.is_empty() && !views::STATES.contains(&query.status.as_str()) {
        return Err(ConsoleError::BadRequest("No such state."));
    }
    let filter = Filter {
        tenant: viewer.confine(some(&query.tenant)),
        tool: some(&query.tool),
        status: some(&query.status),
        min_age_ms: seconds(&query.older)?,
        max_age_ms: seconds(&query.newer)?,
    };
    let after = match query.after.as_str() {
        "" => None,
        text => Some(Cursor::parse(text).ok_or(ConsoleError::BadRequest("That page link is not valid."))?),
    };
    let page: Page = state.store.list_tasks(shards(&state), &filter, after.as_ref(), PAGE_ROWS, now_ms()).await?;
    if params.fragment == "1" {
        return Ok(html(views::task_rows(&query, &page, now_ms())));
    }
    Ok(html(views::task_list(&viewer, &query, &page, now_ms())))
}

#[derive(Debug, Default, Deserialize)]
struct TaskParams {
    #[serde(default)]
    reveal: String,
}

/// The task, if it exists and this viewer may see it: unknown and foreign ids are one answer.
async fn inspect(
    state: &AppState,
    viewer: &Viewer,
    id: &str,
) -> Result<(TaskId, taskgate_shared::store::Inspection), ConsoleError> {
    let id = TaskId::parse(id).ok_or(ConsoleError::NotFound)?;
    let inspection = state.store.inspect_task(&id).await?.ok_or(ConsoleError::NotFound)?;
    if !viewer.sees(inspection.record.get("tenant").map_or("", String::as_str)) {
        return Err(ConsoleError::NotFound);
    }
    Ok((id, inspection))
}

fn trace_url(state: &AppState, inspection: &taskgate_shared::store::Inspection) -> Option<String> {
    let template = state.config.console.as_ref()?.trace_url.as_ref()?;
    // traceparent: version-traceid-spanid-flags; the trace id is 32 lowercase hex digits.
    let trace_id = inspection.record.get("tp")?.split('-').nth(1).filter(|t| t.len() == 32)?;
    trace_id.bytes().all(|b| b.is_ascii_hexdigit()).then(|| template.replace("{trace_id}", trace_id))
}

async fn task(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    Query(params): Query<TaskParams>,
) -> Result<Response, ConsoleError> {
    let (id, inspection) = inspect(&state, &viewer, &id).await?;
    let reveal = params.reveal == "1";
    if reveal {
        tracing::info!(target: "taskgate::audit", action = "reveal", task_id = %id, by = %viewer.name(), "console: sensitive fields shown");
    }
    let view = TaskView { id: id.as_str(), inspection: &inspection, reveal, trace_url: trace_url(&state, &inspection) };
    Ok(html(views::task(&viewer, &view)))
}

async fn task_fragment(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Result<Response, ConsoleError> {
    let (id, inspection) = inspect(&state, &viewer, &id).await?;
    // Never revealed: the fragment refreshes without a page load that could be logged.
    let view = TaskView { id: id.as_str(), inspection: &inspection, reveal: false, trace_url: None };
    Ok(html(views::task_live(&view)))
}

/// The timeline and summary as JSON, for scripts and the CLI: what the page shows, without the
/// sensitive fields.
async fn task_json(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Result<Response, ConsoleError> {
    let (id, inspection) = inspect(&state, &viewer, &id).await?;
    let record = &inspection.record;
    let shown = [
        "tenant",
        "principal",
        "tool",
        "status",
        "msg",
        "created",
        "updated",
        "ttl",
        "poll",
        "ver",
        "fence",
        "holder",
        "reclaims",
    ];
    let fields: serde_json::Map<String, serde_json::Value> =
        shown.iter().filter_map(|f| record.get(*f).map(|v| ((*f).to_owned(), v.clone().into()))).collect();
    let body = serde_json::json!({
        "taskId": id.as_str(),
        "record": fields,
        "inputKeys": inspection.inputs.keys().collect::<Vec<_>>(),
        "answerKeys": inspection.answers.keys().collect::<Vec<_>>(),
        "timeline": inspection.timeline,
    });
    Ok(axum::Json(body).into_response())
}

#[derive(Debug, Deserialize)]
struct ActionForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    reason: String,
}

/// The checks every action passes: same origin, operator scope, CSRF token, a reason.
fn check_action(viewer: &Viewer, headers: &HeaderMap, form: &ActionForm) -> Result<String, ConsoleError> {
    if !access::same_origin(headers) {
        return Err(ConsoleError::Forbidden("Actions must come from the console's own pages."));
    }
    viewer.check_action(&form.csrf)?;
    let reason = form.reason.trim();
    if reason.is_empty() || reason.len() > 500 {
        return Err(ConsoleError::BadRequest("Give a reason, at most 500 characters."));
    }
    Ok(reason.to_owned())
}

async fn cancel(
    State(state): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> Result<Response, ConsoleError> {
    let reason = check_action(&viewer, &headers, &form)?;
    let (id, inspection) = inspect(&state, &viewer, &id).await?;
    let by = viewer.name();
    let message = format!("Cancelled by an operator: {reason}");
    let outcome = state.store.cancel_task_as_operator(&id, &message, &by, &reason).await?;
    tracing::info!(target: "taskgate::audit", action = "cancel", task_id = %id, by = %by, reason = %reason, outcome = ?outcome, "console: task cancelled");
    if matches!(outcome, CancelOutcome::Cancelled { .. }) {
        if let Some(tenant) = inspection.record.get("tenant") {
            crate::mcp::release_active(&state, &id, tenant).await;
        }
        state.polls.changed(id.as_str());
    }
    Ok(Redirect::to(&format!("/console/tasks/{}", id.as_str())).into_response())
}

async fn fail(
    State(state): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> Result<Response, ConsoleError> {
    let reason = check_action(&viewer, &headers, &form)?;
    let (id, _) = inspect(&state, &viewer, &id).await?;
    let by = viewer.name();
    let message = format!("Failed by an operator: {reason}");
    let error = serde_json::json!({ "code": -32603, "message": message }).to_string();
    let outcome = state.store.fail_task_as_operator(&id, &error, &message, &by, &reason).await?;
    tracing::info!(target: "taskgate::audit", action = "fail", task_id = %id, by = %by, reason = %reason, outcome = ?outcome, "console: task failed");
    if let OperatorFail::Failed { counted_tenant } = outcome {
        if let Some(tenant) = counted_tenant {
            crate::mcp::release_active(&state, &id, &tenant).await;
        }
        state.polls.changed(id.as_str());
    }
    Ok(Redirect::to(&format!("/console/tasks/{}", id.as_str())).into_response())
}

async fn login_form(State(state): State<AppState>) -> Result<Response, ConsoleError> {
    state.config.console.as_ref().ok_or(ConsoleError::NotFound)?;
    if matches!(*state.auth, Authenticator::Anonymous) {
        return Ok(Redirect::to("/console/").into_response());
    }
    Ok(html(views::login(None)))
}

#[derive(Debug, Deserialize)]
struct LoginForm {
    #[serde(default)]
    token: String,
}

/// Checks the token as every request will, then keeps it in the login cookie.
async fn login(
    State(state): State<AppState>,
    parts: axum::http::request::Parts,
    Form(form): Form<LoginForm>,
) -> Response {
    if let Err(refused) = access::check_host(&state, &parts) {
        return refused.into_response();
    }
    let headers = &parts.headers;
    if !access::same_origin(headers) {
        return ConsoleError::Forbidden("Sign in from the console's own page.").into_response();
    }
    let token = form.token.trim();
    // The same request, with the typed token as its credential (and no older cookie).
    let mut probe = parts.clone();
    probe.headers.remove(header::COOKIE);
    probe.headers.remove(header::AUTHORIZATION);
    if let Ok(value) = HeaderValue::from_str(&format!("Bearer {token}")) {
        probe.headers.insert(header::AUTHORIZATION, value);
    }
    use axum::extract::FromRequestParts as _;
    if let Err(err) = Viewer::from_request_parts(&mut probe, &state).await {
        return match err {
            ConsoleError::SignIn | ConsoleError::Forbidden(_) => (
                StatusCode::UNAUTHORIZED,
                Html(views::login(Some("That token was not accepted, or it has neither console scope.")).into_string()),
            )
                .into_response(),
            other => other.into_response(),
        };
    }
    let secure = headers.get("x-forwarded-proto").is_some_and(|p| p.as_bytes().eq_ignore_ascii_case(b"https"));
    let mut response = Redirect::to("/console/").into_response();
    if let Ok(cookie) = HeaderValue::from_str(&access::login_cookie(token, secure)) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

async fn logout(viewer: Viewer, headers: HeaderMap, Form(form): Form<ActionForm>) -> Result<Response, ConsoleError> {
    if !access::same_origin(&headers) || viewer.check_csrf(&form.csrf).is_err() {
        return Err(ConsoleError::Forbidden("Sign out from the console's own page."));
    }
    let mut response = Redirect::to("/console/login").into_response();
    if let Ok(cookie) = HeaderValue::from_str(&access::logout_cookie()) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    Ok(response)
}
