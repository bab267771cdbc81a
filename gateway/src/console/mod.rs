//! The operator console under `/console/` (`--console`, off by default): find tasks, read one
//! whole (record, timeline, input requests, result), and cancel or fail it. Read-mostly,
//! server-rendered; what it reads comes from Redis, like everything else, so any replica serves
//! it. Who may see and do what is `access`; the markup is `views`; the types the handlers, the
//! cache and the markup share (the viewer, the overview) are `model`, below them all.

mod access;
mod actions;
mod assets;
mod cache;
mod credentials;
mod edge;
mod error;
mod login;
mod model;
mod overview;
mod tasks;
mod views;
mod webhooks;

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::Markup;

use crate::state::AppState;
use actions::{cancel, fail};
use cache::ConsoleState;
pub(crate) use edge::pipeline_error;
pub(crate) use error::ConsoleError;
use login::{login, login_form, logout};
use overview::{overview, overview_fragment};
use tasks::{task, task_fragment, task_json, task_list};

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
        .route("/console/credentials", get(credentials::page))
        .route("/console/webhooks", get(webhooks::page))
        .route("/console/webhooks/{id}/end", post(webhooks::end))
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
