//! The HTTP client of Streamable HTTP upstreams: bounded connects and reads, redirects only
//! within the configured origin, and errors that never carry the server's URL (hosted servers
//! put credentials in the path or the query, and error texts reach tasks and logs).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::common::client_side_sse::BoxedSseResponse;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use std::collections::BTreeMap;

use super::config::Secret;
use super::identity::Live;

/// Redirects followed for one request, all within the origin and keeping the request.
const MAX_REDIRECTS: usize = 3;

/// Why a redirect was not followed.
#[derive(Debug, thiserror::Error)]
enum RedirectRefused {
    /// The session id and the configured headers (credentials among them) would go to another
    /// host, and a redirect could reach internal addresses.
    #[error("refused a redirect to another origin")]
    OtherOrigin,
    /// 301, 302 and 303 turn the POST into a GET and lose the message.
    #[error("refused a {0} redirect: only 307 and 308 keep the request")]
    ChangesTheRequest(u16),
    #[error("refused more than {MAX_REDIRECTS} redirects")]
    TooMany,
}

/// A per-identity instance's caller, and the headers taken from its credential on every
/// request.
pub(super) type PerRequest = (Arc<Live>, BTreeMap<String, Secret>);

/// A reqwest client whose errors are stripped of their URL before the SDK sees them, so none
/// of its texts (the task's error, the "down" reason, the SDK's own log lines) names it.
#[derive(Clone)]
pub(super) struct HttpClient {
    client: reqwest::Client,
    /// Set for a per-identity instance: the caller's headers, rendered for each request from
    /// the credential as it is then (an OAuth token refreshed while the session lasts).
    identity: Option<Arc<PerRequest>>,
}

impl HttpClient {
    pub(super) fn new(
        connect_timeout: Duration,
        read_timeout: Duration,
        identity: Option<PerRequest>,
    ) -> Result<Self, reqwest::Error> {
        reqwest::Client::builder()
            .redirect(redirect_policy())
            .connect_timeout(connect_timeout)
            .read_timeout(read_timeout)
            .build()
            .map(|client| Self { client, identity: identity.map(Arc::new) })
            .map_err(reqwest::Error::without_url)
    }

    /// `custom` with the caller's headers added. The error names the header, never a value.
    async fn headers(&self, mut custom: HashMap<HeaderName, HeaderValue>) -> Sent<HashMap<HeaderName, HeaderValue>> {
        let Some(identity) = &self.identity else { return Ok(custom) };
        let (live, templates) = &**identity;
        let credential =
            live.current().await.map_err(|e| StreamableHttpError::Io(std::io::Error::other(e.to_string())))?;
        for (name, template) in templates {
            let value = template
                .render(Some(&credential))
                .map_err(|e| StreamableHttpError::Io(std::io::Error::other(format!("header {name}: {e}"))))?;
            if let Some(value) = value {
                let (name, value) =
                    header(name, value).map_err(|e| StreamableHttpError::Io(std::io::Error::other(e)))?;
                custom.insert(name, value);
            }
        }
        Ok(custom)
    }
}

/// A configured header; the error names it, never its value.
pub(super) fn header(name: &str, value: String) -> Result<(HeaderName, HeaderValue), String> {
    let name = HeaderName::try_from(name).map_err(|_| format!("header name {name:?} is not valid"))?;
    let mut value =
        HeaderValue::try_from(value).map_err(|_| format!("header {name} has a value that is not valid in HTTP"))?;
    value.set_sensitive(true);
    Ok((name, value))
}

fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let same_origin = attempt.previous().first().is_some_and(|first| first.origin() == attempt.url().origin());
        let status = attempt.status();
        if !same_origin {
            attempt.error(RedirectRefused::OtherOrigin)
        } else if !matches!(status, StatusCode::TEMPORARY_REDIRECT | StatusCode::PERMANENT_REDIRECT) {
            attempt.error(RedirectRefused::ChangesTheRequest(status.as_u16()))
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(RedirectRefused::TooMany)
        } else {
            attempt.follow()
        }
    })
}

type Sent<T> = Result<T, StreamableHttpError<reqwest::Error>>;

fn scrubbed<T>(result: Sent<T>) -> Sent<T> {
    result.map_err(|err| match err {
        StreamableHttpError::Client(err) => StreamableHttpError::Client(err.without_url()),
        // Other variants carry a status, a bounded body preview or a fixed text; response
        // body errors (the SSE streams) are made without a URL by reqwest.
        other => other,
    })
}

impl StreamableHttpClient for HttpClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Sent<StreamableHttpPostResponse> {
        let custom_headers = self.headers(custom_headers).await?;
        scrubbed(self.client.post_message(uri, message, session_id, auth_header, custom_headers).await)
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Sent<StreamableHttpPostResponse> {
        let custom_headers = self.headers(custom_headers).await?;
        let posted = self.client.post_message_with_max_sse_event_size(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            max_sse_event_size,
        );
        scrubbed(posted.await)
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Sent<StreamableHttpPostResponse> {
        let custom_headers = self.headers(custom_headers).await?;
        let posted = self.client.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        );
        scrubbed(posted.await)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Sent<()> {
        let custom_headers = self.headers(custom_headers).await?;
        scrubbed(self.client.delete_session(uri, session_id, auth_header, custom_headers).await)
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Sent<BoxedSseResponse> {
        let custom_headers = self.headers(custom_headers).await?;
        scrubbed(self.client.get_stream(uri, session_id, last_event_id, auth_header, custom_headers).await)
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Sent<BoxedSseResponse> {
        let custom_headers = self.headers(custom_headers).await?;
        let stream = self.client.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            max_sse_event_size,
        );
        scrubbed(stream.await)
    }
}

/// `text` with every `http://` or `https://` URL in it replaced by `<url>`: the last guard on
/// a transport error's text before it is shown or logged.
pub(super) fn without_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = ["http://", "https://"].iter().filter_map(|scheme| rest.find(scheme)).min() {
        out.push_str(&rest[..at]);
        out.push_str("<url>");
        let tail = &rest[at..];
        let end =
            tail.find(|c: char| c.is_whitespace() || matches!(c, ')' | '"' | '\'' | '>' | ',')).unwrap_or(tail.len());
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// An error and its causes, `a: b: c`, so that the root cause (a refused connection, a refused
/// redirect, a timeout) shows; any URL in them is taken out.
pub(super) fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut next = cause(err);
    while let Some(inner) = next {
        let inner_text = inner.to_string();
        if !text.contains(&inner_text) {
            text = format!("{text}: {inner_text}");
        }
        next = cause(inner);
    }
    without_urls(&text)
}

/// The error's source; the SDK's client error names none, so its reqwest error is taken out.
fn cause<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a (dyn std::error::Error + 'static)> {
    if let Some(StreamableHttpError::Client(inner)) = err.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
        return Some(inner);
    }
    err.source()
}
