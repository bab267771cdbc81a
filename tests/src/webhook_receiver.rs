//! A webhook receiver for the Events tests: an HTTPS server on loopback (certificate from the
//! test PKI's CA, for 127.0.0.1 and localhost) that records every request and answers as the
//! test tells it: 2xx (echoing a verification challenge), another status, a redirect, or no
//! connection at all (the listener closed and open connections cut).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::tls::Pki;

/// How the receiver answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// 200; a verification challenge is echoed.
    Accept,
    /// 200 with `{}`: a verification fails.
    NoEcho,
    /// This status, with an empty body.
    Status(u16),
    /// 307 to this location.
    Redirect(String),
}

/// One request, as received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    /// Header names in lower case.
    pub headers: HashMap<String, String>,
    pub body: Bytes,
    pub at: Instant,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

#[derive(Default)]
struct Shared {
    requests: Mutex<Vec<Recorded>>,
    /// By path; paths not named get `default`.
    answers: Mutex<HashMap<String, Answer>>,
    default: Mutex<Option<Answer>>,
}

/// The accept loop and the connections it serves, while listening.
type Serving = (JoinHandle<()>, Arc<Mutex<JoinSet<()>>>);

pub struct Receiver {
    pub port: u16,
    shared: Arc<Shared>,
    acceptor: TlsAcceptor,
    serving: Option<Serving>,
    /// Kept for the CA file.
    pub pki: Pki,
}

impl Receiver {
    /// Starts on a free loopback port.
    pub async fn start() -> Self {
        let pki = Pki::generate();
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(pki.server_cert())
            .expect("the server certificate")
            .collect::<Result<_, _>>()
            .expect("PEM certificates");
        let key = PrivateKeyDer::from_pem_file(pki.server_key()).expect("the server key");
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("a server config");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let port = listener.local_addr().unwrap().port();
        let mut receiver =
            Self { port, shared: Arc::default(), acceptor: TlsAcceptor::from(Arc::new(config)), serving: None, pki };
        receiver.serve(listener);
        receiver
    }

    /// The CA that signed the receiver's certificate (`--events-webhook-ca-file`).
    pub fn ca_file(&self) -> String {
        self.pki.ca().to_str().unwrap().to_owned()
    }

    /// `https://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// How requests to `path` are answered from now on.
    pub fn answer(&self, path: &str, answer: Answer) {
        self.shared.answers.lock().unwrap().insert(path.to_owned(), answer);
    }

    /// How requests to paths not named are answered (at first: [`Answer::Accept`]).
    pub fn answer_all(&self, answer: Answer) {
        *self.shared.default.lock().unwrap() = Some(answer);
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// The requests to `path` so far.
    pub fn requests_to(&self, path: &str) -> Vec<Recorded> {
        self.requests().into_iter().filter(|r| r.path == path).collect()
    }

    /// Closes the listener and cuts every open connection: connections are refused.
    pub fn down(&mut self) {
        if let Some((accept, connections)) = self.serving.take() {
            accept.abort();
            connections.lock().unwrap().abort_all();
        }
    }

    /// Listens again on the same port.
    pub async fn up(&mut self) {
        if self.serving.is_some() {
            return;
        }
        let addr: SocketAddr = format!("127.0.0.1:{}", self.port).parse().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let listener = loop {
            match TcpListener::bind(addr).await {
                Ok(listener) => break listener,
                Err(err) if std::time::Instant::now() > deadline => panic!("the receiver's port {addr}: {err}"),
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
        };
        self.serve(listener);
    }

    fn serve(&mut self, listener: TcpListener) {
        let connections = Arc::new(Mutex::new(JoinSet::new()));
        let (shared, acceptor, set) = (self.shared.clone(), self.acceptor.clone(), connections.clone());
        let accept = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { continue };
                let (shared, acceptor) = (shared.clone(), acceptor.clone());
                set.lock().unwrap().spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let service = hyper::service::service_fn(move |request| handle(shared.clone(), request));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        self.serving = Some((accept, connections));
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.down();
    }
}

async fn handle(
    shared: Arc<Shared>,
    request: hyper::Request<hyper::body::Incoming>,
) -> Result<hyper::Response<http_body_util::Full<Bytes>>, std::convert::Infallible> {
    use http_body_util::BodyExt as _;
    let path = request.uri().path().to_owned();
    let headers = request
        .headers()
        .iter()
        .map(|(name, value)| (name.as_str().to_ascii_lowercase(), value.to_str().unwrap_or_default().to_owned()))
        .collect();
    let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let answer = shared
        .answers
        .lock()
        .unwrap()
        .get(&path)
        .cloned()
        .or_else(|| shared.default.lock().unwrap().clone())
        .unwrap_or(Answer::Accept);
    let challenge = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .filter(|v| v["type"] == "verification")
        .and_then(|v| v["challenge"].as_str().map(str::to_owned));
    shared.requests.lock().unwrap().push(Recorded { path, headers, body, at: Instant::now() });
    let response = match answer {
        Answer::Accept => {
            let echo = challenge.map(|c| serde_json::json!({ "challenge": c }).to_string()).unwrap_or_default();
            hyper::Response::builder().status(200).body(http_body_util::Full::new(Bytes::from(echo)))
        }
        Answer::NoEcho => hyper::Response::builder().status(200).body(http_body_util::Full::new(Bytes::from("{}"))),
        Answer::Status(status) => {
            hyper::Response::builder().status(status).body(http_body_util::Full::new(Bytes::new()))
        }
        Answer::Redirect(location) => hyper::Response::builder()
            .status(307)
            .header("location", location)
            .body(http_body_util::Full::new(Bytes::new())),
    };
    Ok(response.expect("a valid response"))
}
