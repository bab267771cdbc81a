//! The operator console under `/console/` (`--console`, off by default): find tasks, read one
//! whole (record, timeline, input requests, result), and cancel or fail it. Read-mostly,
//! server-rendered; what it reads comes from Redis, like everything else, so any replica serves
//! it. Who may see and do what is `access`; the markup is `views`.

mod access;
mod assets;
mod cache;
mod edge;
mod views;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Extension;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::Markup;
use serde::Deserialize;
use taskgate_shared::store::{CancelOutcome, Cursor, DEFAULT_POOL, Filter, OperatorFail, Page};
use taskgate_shared::task::TaskId;

use crate::auth::Authenticator;
use crate::state::AppState;
use access::{Reach, Viewer};
use cache::ConsoleState;
pub(crate) use edge::pipeline_error;
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
        // The console's own state rides in each request's extensions: the application state
        // knows nothing of the console.
        .layer(axum::Extension(Arc::new(ConsoleState::default())))
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
    /// The form did not arrive whole within `--body-timeout-ms`.
    SlowBody,
    /// The form is larger than the console ever needs.
    TooLarge,
    /// `--console-max-in-flight` console requests are under way on this replica.
    Busy,
    /// Not answered within the console's request deadline.
    TimedOut,
    /// The tenant's request rate is spent.
    RateLimited {
        retry_after_ms: u64,
    },
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
            Self::SlowBody => {
                (StatusCode::REQUEST_TIMEOUT, views::error("Too slow", "The form did not arrive in time."))
            }
            Self::TooLarge => (StatusCode::PAYLOAD_TOO_LARGE, views::error("Too large", "That form is too large.")),
            Self::Busy => return retry_later(StatusCode::SERVICE_UNAVAILABLE, 1_000, "The console is busy"),
            Self::TimedOut => (
                StatusCode::GATEWAY_TIMEOUT,
                views::error("Timed out", "The page took too long to build; try again shortly."),
            ),
            Self::RateLimited { retry_after_ms } => {
                return retry_later(StatusCode::TOO_MANY_REQUESTS, retry_after_ms, "Too many requests");
            }
        };
        (status, Html(markup.into_string())).into_response()
    }
}

/// A refusal that says when to try again, in `Retry-After` (whole seconds, at least one).
fn retry_later(status: StatusCode, after_ms: u64, title: &str) -> Response {
    let seconds = after_ms.div_ceil(1000).max(1);
    let markup = views::error(title, &format!("Try again in {seconds} s."));
    let mut response = (status, Html(markup.into_string())).into_response();
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
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

/// What the overview shows, as read at `read_ms`; kept briefly per reach
/// ([`cache::OVERVIEW_FRESH`]).
pub(crate) struct Overview {
    tallies: BTreeMap<(String, String), Tally>,
    sampled: usize,
    workers: Vec<views::WorkerView>,
    tools: Vec<String>,
    /// Every pool's backlog: for those who see every tenant only (a backlog counts them all).
    pools: Option<Vec<views::PoolView>>,
    /// Behind Sentinel, for operators: the master's name, the primary as this replica last
    /// found it, and the failovers this replica has seen.
    redis: Option<views::RedisView>,
    read_ms: i64,
}

/// The overview for this viewer: from memory when one was read within two seconds, else read
/// afresh. The tools come from Redis, not from this replica's periodically refreshed
/// catalogue, so a gateway that started before its workers does not show an empty fleet.
async fn read_overview(
    state: &AppState,
    console: &ConsoleState,
    viewer: &Viewer,
) -> Result<Arc<Overview>, ConsoleError> {
    if let Some(overview) = console.overview(&viewer.reach) {
        return Ok(overview);
    }
    let Tallies { by_tool: tallies, sampled, held } = tally(state, viewer).await?;
    let published = state.store.read_catalogue().await?;
    let tools: Vec<String> = published.tools.into_keys().collect();
    let workers: Vec<views::WorkerView> = state
        .store
        .live_workers()
        .await?
        .into_iter()
        .map(|(id, status, _)| views::WorkerView { running: held.get(&id).copied(), id, status })
        .collect();
    let pools = match viewer.reach {
        Reach::Everything => Some(pools(state, &published.routes, &workers, &state.store.known_pools().await?).await?),
        Reach::Tenant(_) => None,
    };
    let redis = match viewer.reach {
        Reach::Everything => state.store.sentinel_primary().map(|(master, primary)| views::RedisView {
            master,
            primary,
            failovers: taskgate_shared::telemetry::metrics::REDIS.failovers_seen(),
        }),
        Reach::Tenant(_) => None,
    };
    let overview = Arc::new(Overview { tallies, sampled, workers, tools, pools, redis, read_ms: now_ms() });
    console.keep(viewer.reach.clone(), overview.clone());
    Ok(overview)
}

async fn overview(
    State(state): State<AppState>,
    Extension(console): Extension<Arc<ConsoleState>>,
    viewer: Viewer,
) -> Result<Response, ConsoleError> {
    let o = read_overview(&state, &console, &viewer).await?;
    Ok(html(views::overview(&viewer, &o)))
}

async fn overview_fragment(
    State(state): State<AppState>,
    Extension(console): Extension<Arc<ConsoleState>>,
    viewer: Viewer,
) -> Result<Response, ConsoleError> {
    let o = read_overview(&state, &console, &viewer).await?;
    Ok(html(views::overview_live(&o.tallies, o.sampled, o.read_ms)))
}

/// Each pool that a worker has ever sent a heartbeat for, a live worker is in, or a tool is
/// routed to, with its live workers and its backlog (one round trip per shard and pool, the
/// shards concurrently). A pool whose workers are all gone stays listed, with what waits for it.
async fn pools(
    state: &AppState,
    routes: &BTreeMap<String, String>,
    workers: &[views::WorkerView],
    known: &[(String, i64)],
) -> Result<Vec<views::PoolView>, ConsoleError> {
    let mut pools: BTreeMap<String, views::PoolView> = BTreeMap::new();
    for pool in routes.values().chain(known.iter().map(|(pool, _)| pool)) {
        pools.entry(pool.clone()).or_insert_with(|| views::PoolView::new(pool));
    }
    for worker in workers {
        // A worker from before pools publishes none: it was `default`.
        let pool = worker.status["pool"].as_str().unwrap_or(DEFAULT_POOL);
        let view = pools.entry(pool.to_owned()).or_insert_with(|| views::PoolView::new(pool));
        view.workers += 1;
        view.busy += worker.status["busy"].as_u64().unwrap_or(0);
        view.slots += worker.status["slots"].as_u64().unwrap_or(0);
    }
    let names: Vec<String> = pools.keys().cloned().collect();
    let backlogs = futures::future::join_all(names.iter().map(|pool| state.store.backlog(shards(state), pool))).await;
    for (view, backlog) in pools.values_mut().zip(backlogs) {
        view.backlog = backlog?;
    }
    Ok(pools.into_values().collect())
}

/// Counts by (tenant, tool) and state over the newest tasks this viewer may see, and the
/// runs each worker holds among them.
async fn tally(state: &AppState, viewer: &Viewer) -> Result<Tallies, ConsoleError> {
    let filter = Filter { tenant: viewer.confine(None), ..Filter::default() };
    let page = state.store.list_tasks(shards(state), &filter, None, OVERVIEW_SAMPLE, now_ms()).await?;
    let mut tallies: BTreeMap<(String, String), Tally> = BTreeMap::new();
    let mut held: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for row in &page.rows {
        if let (Some(holder), "working") = (&row.holder, row.status.as_str()) {
            *held.entry(holder.clone()).or_default() += 1;
        }
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
    Ok(Tallies { by_tool: tallies, sampled: page.rows.len(), held })
}

struct Tallies {
    by_tool: BTreeMap<(String, String), Tally>,
    sampled: usize,
    /// Runs under way by worker id, read from the task records with the page.
    held: std::collections::HashMap<String, usize>,
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
    let (id, mut inspection) = inspect(&state, &viewer, &id).await?;
    let reveal = params.reveal == "1";
    if reveal {
        // Recorded before anything is shown: a reveal that cannot be recorded shows nothing.
        // The page shows it too, as the timeline's newest entry.
        let entry = state.store.record_reveal(&id, &viewer.name(), taskgate_shared::task::now_ms()).await?;
        inspection.timeline.push(entry);
        tracing::info!(target: "taskgate::audit", action = "reveal", task_id = %id, by = %viewer.name(), "console: sensitive fields shown");
    }
    let waiting_for = waiting_for_pool(&state, &inspection).await;
    let view = TaskView {
        id: id.as_str(),
        inspection: &inspection,
        reveal,
        trace_url: trace_url(&state, &inspection),
        waiting_for,
    };
    Ok(html(views::task(&viewer, &view)))
}

/// The pool a queued task waits for, when no live worker of that pool has sent a heartbeat
/// lately (one read of the live workers, with the page; the self-refreshing part never asks).
async fn waiting_for_pool(state: &AppState, inspection: &taskgate_shared::store::Inspection) -> Option<String> {
    let record = &inspection.record;
    if record.get("status").map(String::as_str) != Some("working") || record.contains_key("holder") {
        return None;
    }
    // A record or a worker status from before pools is the default pool's.
    let pool = record.get("pool").map_or(DEFAULT_POOL, String::as_str);
    let workers = state.store.live_workers().await.ok()?;
    let served = workers.iter().any(|(_, status, _)| status["pool"].as_str().unwrap_or(DEFAULT_POOL) == pool);
    (!served).then(|| pool.to_owned())
}

async fn task_fragment(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Result<Response, ConsoleError> {
    let (id, inspection) = inspect(&state, &viewer, &id).await?;
    // Never revealed: the fragment refreshes without a page load that could be logged.
    let view = TaskView { id: id.as_str(), inspection: &inspection, reveal: false, trace_url: None, waiting_for: None };
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
    let mut fields: serde_json::Map<String, serde_json::Value> =
        shown.iter().filter_map(|f| record.get(*f).map(|v| ((*f).to_owned(), v.clone().into()))).collect();
    if views::message_is_a_question(record.get("status").map(String::as_str)) {
        fields.insert("msg".into(), views::REDACTED_QUESTION.into());
    }
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
    Path(id): Path<String>,
    request: axum::extract::Request,
) -> Result<Response, ConsoleError> {
    let (parts, body) = request.into_parts();
    let headers = parts.headers.clone();
    let form: ActionForm = edge::read_form(&state, parts, body).await?;
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
    Path(id): Path<String>,
    request: axum::extract::Request,
) -> Result<Response, ConsoleError> {
    let (parts, body) = request.into_parts();
    let headers = parts.headers.clone();
    let form: ActionForm = edge::read_form(&state, parts, body).await?;
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

/// Checks the token as every request will, then keeps it in the login cookie. The host and
/// origin are checked before the form is read, and the form is read within its bounds.
async fn login(State(state): State<AppState>, request: axum::extract::Request) -> Response {
    let (parts, body) = request.into_parts();
    if let Err(refused) = access::check_host(&state, &parts) {
        return refused.into_response();
    }
    if !access::same_origin(&parts.headers) {
        return ConsoleError::Forbidden("Sign in from the console's own page.").into_response();
    }
    let form: LoginForm = match edge::read_form(&state, parts.clone(), body).await {
        Ok(form) => form,
        Err(refused) => return refused.into_response(),
    };
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
    let mut response = Redirect::to("/console/").into_response();
    if let Ok(cookie) = HeaderValue::from_str(&access::login_cookie(token, state.origin_policy.loopback())) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

async fn logout(
    State(state): State<AppState>,
    viewer: Viewer,
    request: axum::extract::Request,
) -> Result<Response, ConsoleError> {
    let (parts, body) = request.into_parts();
    let headers = parts.headers.clone();
    let form: ActionForm = edge::read_form(&state, parts, body).await?;
    if !access::same_origin(&headers) || viewer.check_csrf(&form.csrf).is_err() {
        return Err(ConsoleError::Forbidden("Sign out from the console's own page."));
    }
    let mut response = Redirect::to("/console/login").into_response();
    if let Ok(cookie) = HeaderValue::from_str(&access::logout_cookie(state.origin_policy.loopback())) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    Ok(response)
}
