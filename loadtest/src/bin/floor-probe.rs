//! The floor a gateway's `tasks/get` is compared against: a bare hyper server that takes a
//! JSON-RPC POST, parses it with serde_json, and replies with a task's fields as JSON. With
//! `--redis-url` each request first reads the task's hash (`HGETALL`, on one multiplexed
//! connection, as the gateway reads); without, the hash is read once at start and only
//! serialized per request (the work a cached poll cannot avoid). No auth, routing, limits,
//! metrics or tracing: what the gateway spends beyond this is its own (docs/performance.md).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use redis::AsyncCommands;
use redis::AsyncConnectionConfig;
use serde::Deserialize;
use serde_json::value::RawValue;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(about = "A minimal JSON-RPC server: the floor for tasks/get")]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// The Redis holding the hash (always needed: the no-Redis variant reads it once at start).
    #[arg(long)]
    redis_url: String,
    /// The hash to read: a real task's key, so the reply is task-sized.
    #[arg(long)]
    key: String,
    /// One `HGETALL` per request (else the hash read at start is served).
    #[arg(long)]
    per_request: bool,
    /// Connection and response timeout of the Redis connection. The gateway's default (2 s),
    /// not the client library's (1 s to connect, 500 ms per reply), which a probe slowed down
    /// by valgrind overruns: its replies then become 503s.
    #[arg(long, default_value_t = 2000)]
    redis_timeout_ms: u64,
}

/// The fields of a JSON-RPC request the probe looks at; the rest is parsed and skipped.
#[derive(Deserialize)]
struct Rpc<'a> {
    #[serde(borrow)]
    id: &'a RawValue,
    method: &'a str,
}

#[derive(serde::Serialize)]
struct Reply<'a> {
    jsonrpc: &'static str,
    id: &'a RawValue,
    result: &'a BTreeMap<String, String>,
}

struct Probe {
    redis: redis::aio::MultiplexedConnection,
    key: String,
    per_request: bool,
    cached: BTreeMap<String, String>,
}

impl Probe {
    async fn serve(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        let body = match request.into_body().collect().await {
            Ok(body) => body.to_bytes(),
            Err(_) => return status(StatusCode::BAD_REQUEST),
        };
        let Ok(rpc) = serde_json::from_slice::<Rpc<'_>>(&body) else {
            return status(StatusCode::BAD_REQUEST);
        };
        if rpc.method != "tasks/get" {
            return status(StatusCode::NOT_FOUND);
        }
        let fresh;
        let fields = if self.per_request {
            let mut redis = self.redis.clone();
            fresh = match redis.hgetall::<_, BTreeMap<String, String>>(&self.key).await {
                Ok(fields) => fields,
                Err(_) => return status(StatusCode::SERVICE_UNAVAILABLE),
            };
            &fresh
        } else {
            &self.cached
        };
        let reply = Reply { jsonrpc: "2.0", id: rpc.id, result: fields };
        match serde_json::to_vec(&reply) {
            Ok(json) => {
                let mut response = Response::new(Full::new(Bytes::from(json)));
                response
                    .headers_mut()
                    .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
                response
            }
            Err(_) => status(StatusCode::INTERNAL_SERVER_ERROR),
        }
    }
}

fn status(code: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = code;
    response
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let client = redis::Client::open(args.redis_url.as_str())?;
    let timeout = Some(Duration::from_millis(args.redis_timeout_ms));
    let config = AsyncConnectionConfig::new().set_connection_timeout(timeout).set_response_timeout(timeout);
    let mut redis = client.get_multiplexed_async_connection_with_config(&config).await?;
    let cached: BTreeMap<String, String> = redis.hgetall(&args.key).await?;
    anyhow::ensure!(!cached.is_empty(), "no hash at {}", args.key);
    let probe = Arc::new(Probe { redis, key: args.key, per_request: args.per_request, cached });
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    // The scripts read the port from this line.
    println!("listening on {}", listener.local_addr()?);
    let builder = Arc::new(auto::Builder::new(TokioExecutor::new()));
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let (probe, builder) = (probe.clone(), builder.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let probe = probe.clone();
                async move { Ok::<_, Infallible>(probe.serve(request).await) }
            });
            let _ = builder.serve_connection(TokioIo::new(stream), service).await;
        });
    }
}
