//! The status port every process serves (TiKV's `status-addr`): plain
//! HTTP/1.1 with hyper, apart from the gRPC port so that a scraper or a
//! load balancer's health check never competes with queries.
//!
//! * `GET /metrics`: the process's Prometheus metrics in the text format
//!   (`quarry_raftstore::metrics` in a storage process,
//!   `quarry_compute::metrics` in a compute process: whatever is
//!   registered in the default registry).
//! * `GET /health`: `ok`.
//! * In a compute process, the web console: `GET /` and the JSON it
//!   reads under `/api/` (`crate::console`).
//! * With the `failpoints` feature (`quarry_proto::failpoint`):
//!   `PUT /fail/NAME` with the actions as the body switches a failpoint
//!   on, `DELETE /fail/NAME` off, `GET /fail` lists those on. Without the
//!   feature, or when the status port is not on a loopback address (it
//!   binds 127.0.0.1 unless told otherwise), these answer 404 like any
//!   other path: no one off the machine can switch a fault on.
//!
//! Anything else is 404. The server binds before the process reports that
//! it is listening, so the address it prints is already served.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus::{Encoder, TextEncoder};
use tokio::net::TcpListener;

use crate::console::Console;

/// Binds `addr` (port 0 picks one) and serves the status endpoints until
/// the process exits; returns the bound address.
pub async fn serve(addr: &str, console: Option<Arc<Console>>) -> Result<SocketAddr> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the status address {addr}"))?;
    let local = listener.local_addr()?;
    let loopback = local.ip().is_loopback();
    tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!("status port: accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let console = console.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let console = console.clone();
                    async move { respond(req, loopback, console.as_deref()).await }
                });
                if let Err(e) = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await
                {
                    tracing::debug!("status port connection: {e}");
                }
            });
        }
    });
    Ok(local)
}

async fn respond(
    req: Request<Incoming>,
    loopback: bool,
    console: Option<&Console>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let reply = |status: StatusCode, content_type: &str, body: Vec<u8>| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        if let Ok(v) = content_type.parse() {
            r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
        }
        r
    };
    let path = req.uri().path();
    if quarry_proto::failpoint::ENABLED && loopback {
        if let Some(name) = path
            .strip_prefix("/fail")
            .filter(|rest| rest.is_empty() || rest.starts_with('/'))
        {
            let name = name.trim_start_matches('/').to_string();
            let (code, text) = failpoint_request(req, &name).await;
            return Ok(reply(code, "text/plain", text.into_bytes()));
        }
    }
    if let Some(console) = console {
        let from_page = req.headers().contains_key(crate::console::CANCEL_HEADER);
        if let Some((code, kind, body)) = console
            .respond(req.method(), path, loopback, from_page)
            .await
        {
            return Ok(reply(code, kind, body));
        }
    }
    Ok(match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => {
            let encoder = TextEncoder::new();
            let mut body = Vec::new();
            match encoder.encode(&prometheus::gather(), &mut body) {
                Ok(()) => reply(StatusCode::OK, encoder.format_type(), body),
                Err(e) => reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    format!("encoding the metrics failed: {e}\n").into_bytes(),
                ),
            }
        }
        (&Method::GET, "/health") => reply(StatusCode::OK, "text/plain", b"ok\n".to_vec()),
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            match console {
                Some(_) => {
                    b"not found; this port serves the console (/), /metrics and /health\n".to_vec()
                }
                None => b"not found; this port serves /metrics and /health\n".to_vec(),
            },
        ),
    })
}

/// `/fail[/NAME]`: switches failpoint `name` on (PUT, the body holds the
/// actions) or off (DELETE), or lists those on (GET).
async fn failpoint_request(req: Request<Incoming>, name: &str) -> (StatusCode, String) {
    use http_body_util::BodyExt;
    use quarry_proto::failpoint;
    match (req.method().clone(), name) {
        (Method::GET, "") => {
            let text: String = failpoint::list()
                .into_iter()
                .map(|(n, a)| format!("{n}={a}\n"))
                .collect();
            (StatusCode::OK, text)
        }
        (Method::PUT, n) if !n.is_empty() => {
            let body = match req.into_body().collect().await {
                Ok(b) => b.to_bytes(),
                Err(e) => return (StatusCode::BAD_REQUEST, format!("reading the body: {e}\n")),
            };
            let Ok(actions) = std::str::from_utf8(&body) else {
                return (
                    StatusCode::BAD_REQUEST,
                    "the actions are not UTF-8\n".into(),
                );
            };
            match failpoint::configure(n, actions.trim()) {
                Ok(()) => {
                    tracing::warn!(failpoint = n, actions = actions.trim(), "failpoint on");
                    (StatusCode::OK, format!("{n}={}\n", actions.trim()))
                }
                Err(e) => (StatusCode::BAD_REQUEST, format!("failpoint {n}: {e}\n")),
            }
        }
        (Method::DELETE, n) if !n.is_empty() => {
            failpoint::remove(n);
            tracing::warn!(failpoint = n, "failpoint off");
            (StatusCode::OK, format!("{n} off\n"))
        }
        _ => (
            StatusCode::NOT_FOUND,
            "use GET /fail, PUT /fail/NAME (body: actions) or DELETE /fail/NAME\n".into(),
        ),
    }
}

/// "http://HOST:PORT" for a bound status address.
pub fn url(addr: SocketAddr) -> String {
    format!("http://{addr}")
}
