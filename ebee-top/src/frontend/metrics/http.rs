//! The HTTP side of the metrics endpoint: hyper (HTTP/1.1) on a single-threaded tokio runtime,
//! on a thread of its own, serving the last published [`Snapshot`]. It never touches the drain:
//! it reads the snapshot from a watch channel. Limits: at most [`MAX_CONNECTIONS`] at once
//! (more are answered 503 and closed), request heads of at most [`MAX_HEAD_BYTES`] (larger:
//! 431), [`HEAD_TIMEOUT`] to send a request head, and [`CONN_LIFETIME`] for a connection in
//! all (then it is closed after the response in flight, so an idle or slow client cannot hold
//! a slot). Malformed requests get hyper's 400; unknown paths 404; other methods 405.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ACCEPT, ALLOW, CONTENT_TYPE, HeaderValue, VARY};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{Semaphore, oneshot, watch};

use super::exposition::{Format, Snapshot};

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// Largest request head (request line and headers) read.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Time a client has to send a request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest life of a connection (keep-alive included).
pub const CONN_LIFETIME: Duration = Duration::from_secs(30);
/// After `CONN_LIFETIME`, time left to finish the response in flight.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The running server; stopped and joined on drop.
pub struct Server {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serve `snapshots` on `listener` (already bound) from a thread of its own.
pub fn spawn(
    listener: std::net::TcpListener,
    snapshots: watch::Receiver<Arc<Snapshot>>,
) -> anyhow::Result<Server> {
    listener
        .set_nonblocking(true)
        .context("making the metrics socket non-blocking")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .context("starting the metrics runtime")?;
    let (stop_tx, stop_rx) = oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("metrics-http".into())
        .spawn(move || {
            rt.block_on(async move {
                match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => accept_loop(l, snapshots, stop_rx).await,
                    Err(e) => eprintln!("ebee-top: metrics endpoint: {e}"),
                }
            });
        })
        .context("starting the metrics thread")?;
    Ok(Server {
        stop: Some(stop_tx),
        thread: Some(thread),
    })
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    mut stop: oneshot::Receiver<()>,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => return,
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok((s, _)) => s,
            // Out of descriptors, or a connection reset before we took it: wait a little
            // rather than spin, and go on.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // Too many: one attempt to say so without waiting, then close.
            let _ = stream.try_write(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            continue;
        };
        let snapshots = snapshots.clone();
        tokio::spawn(async move {
            serve_connection(stream, snapshots).await;
            drop(slot);
        });
    }
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    snapshots: watch::Receiver<Arc<Snapshot>>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(true);
    let service = hyper::service::service_fn(move |req| {
        let snap = snapshots.borrow().clone();
        async move { Ok::<_, Infallible>(respond(&req, &snap)) }
    });
    let conn = http.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = tokio::time::sleep(CONN_LIFETIME) => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(CLOSE_GRACE, conn).await;
        }
    }
}

/// The response to one request.
pub fn respond(req: &Request<Incoming>, snap: &Snapshot) -> Response<Full<Bytes>> {
    respond_to(
        req.method(),
        req.uri().path(),
        req.headers().get(ACCEPT).and_then(|v| v.to_str().ok()),
        snap,
    )
}

fn respond_to(
    method: &Method,
    path: &str,
    accept: Option<&str>,
    snap: &Snapshot,
) -> Response<Full<Bytes>> {
    let readable = matches!(*method, Method::GET | Method::HEAD);
    match path {
        "/metrics" if readable => {
            let format = Format::negotiate(accept);
            let mut r = Response::new(Full::new(snap.render(format)));
            let h = r.headers_mut();
            h.insert(
                CONTENT_TYPE,
                HeaderValue::from_static(format.content_type()),
            );
            h.insert(VARY, HeaderValue::from_static("Accept"));
            r
        }
        "/" if readable => plain(
            StatusCode::OK,
            "ebee-top: Prometheus metrics are at /metrics\n",
        ),
        "/" | "/metrics" => {
            let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
            r.headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
            r
        }
        _ => plain(
            StatusCode::NOT_FOUND,
            "not found: metrics are at /metrics\n",
        ),
    }
}

fn plain(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_and_methods() {
        let s = Snapshot::default();
        let status = |m: Method, p: &str| respond_to(&m, p, None, &s).status();
        assert_eq!(status(Method::GET, "/metrics"), StatusCode::OK);
        assert_eq!(status(Method::HEAD, "/metrics"), StatusCode::OK);
        assert_eq!(status(Method::GET, "/"), StatusCode::OK);
        assert_eq!(
            status(Method::POST, "/metrics"),
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(status(Method::DELETE, "/"), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(status(Method::GET, "/metrics/"), StatusCode::NOT_FOUND);
        assert_eq!(status(Method::GET, "/../etc/passwd"), StatusCode::NOT_FOUND);
        let r = respond_to(
            &Method::GET,
            "/metrics",
            Some("application/openmetrics-text; version=1.0.0"),
            &s,
        );
        assert_eq!(
            r.headers()[CONTENT_TYPE],
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        );
        let r = respond_to(&Method::GET, "/metrics", None, &s);
        assert_eq!(
            r.headers()[CONTENT_TYPE],
            "text/plain; version=0.0.4; charset=utf-8"
        );
    }
}
