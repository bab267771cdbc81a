//! The console's static files, compiled into the binary: nothing to build or fetch on the
//! user's machine.

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// htmx 2.0.4 from the npm registry, unchanged (Zero-Clause BSD: `assets/htmx-LICENSE`).
const HTMX: &[u8] = include_bytes!("../../assets/htmx-2.0.4.min.js");
const CSS: &[u8] = include_bytes!("../../assets/console.css");

pub(super) async fn serve(Path(name): Path<String>) -> Response {
    let (body, kind) = match name.as_str() {
        "htmx.min.js" => (HTMX, "text/javascript; charset=utf-8"),
        "console.css" => (CSS, "text/css; charset=utf-8"),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=3600"));
    response
}
