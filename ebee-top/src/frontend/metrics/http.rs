//! The HTTP side of the metrics endpoint: hyper (HTTP/1.1) on a single-threaded tokio runtime,
//! on a thread of its own, serving the last published [`Snapshot`]. It never touches the drain:
//! it reads the snapshot from a watch channel.
//!
//! Idle and slow clients must never crowd out a scrape, so every connection is in a table of
//! at most [`MAX_CONNECTIONS`] and has a [`Phase`]: *fresh* (no complete request yet), *serving*
//! (a request came in, its response is being made or sent; with TLS also a handshake whose
//! whole ClientHello came) or *kept* (keep-alive, between requests). When the table is full a new connection takes the place of the oldest fresh one,
//! else of the longest-kept one, else of one whose response has waited for its client more than
//! [`SLOW_RESPONSE`]; only when every connection is serving a request that is not yet slow is
//! the new one answered 503 and closed. A scraper sends its request as soon as it connects, so
//! it could only be displaced by `MAX_CONNECTIONS` newer connections arriving before its
//! request head does. Other limits: request heads of at most [`MAX_HEAD_BYTES`] (larger: 431),
//! [`HEAD_TIMEOUT`] to send a request head (hyper also applies it to a keep-alive connection
//! waiting for its next request), [`CONN_LIFETIME`] for a connection in all. The file
//! descriptors and memory taken are bounded by the table: connections being closed are counted
//! until their task has ended, and at most [`MAX_CLOSING`] of them. Malformed requests get
//! hyper's 400; unknown paths 404; other methods 405. The same server, limits, TLS and auth
//! serve a TCP port or a unix socket ([`Listener`]).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use http_body_util::Full;
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::header::{
    ACCEPT, ALLOW, AUTHORIZATION, CONTENT_TYPE, HeaderValue, VARY, WWW_AUTHENTICATE,
};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{oneshot, watch};
use tokio::task::AbortHandle;

use super::exposition::{Format, Snapshot};
use super::meter::EndpointCounts;
use super::web::{Active, Web};

/// Connections held at once, whatever their phase (each takes a descriptor and 16 to 40 KiB).
pub const MAX_CONNECTIONS: usize = 128;
/// Connections closed to make room whose task has not ended yet, at most.
pub const MAX_CLOSING: usize = 16;
/// Largest request head (request line and headers) read.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Time a client has to send a request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(2);
/// A response its client has not taken in this time may be cut off to make room.
pub const SLOW_RESPONSE: Duration = Duration::from_secs(1);
/// Longest life of a connection (keep-alive included).
pub const CONN_LIFETIME: Duration = Duration::from_secs(30);
/// After `CONN_LIFETIME`, time left to finish the response in flight.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Where a connection is in its life, for choosing which one makes room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Accepted, its task not run yet: it has had no chance to show what it is, so it never
    /// makes room (it becomes fresh at the accept loop's next yield). Without this, a burst
    /// of new connections closed a scraper's before its first bytes were read.
    New,
    /// No complete request head yet.
    Fresh,
    /// A request head came in; its response is being made or sent.
    Serving,
    /// Keep-alive: its last response is sent, no new request head yet.
    Kept,
    /// TLS: a whole ClientHello came; the handshake, then the first request head, are under
    /// way. A real client sends its ClientHello in its first packet; a connection that never
    /// finishes its hello stays fresh. Protected as a response is: were it fresh, a churn of new connections faster
    /// than a handshake would close every scraper mid-handshake (`bench metrics --tls`
    /// lost scrapes so).
    Handshake,
}

/// What the server closed or refused, for the metrics (cumulative).
#[derive(Debug, Default)]
pub struct HttpStats {
    /// Connections closed to make room for a new one.
    pub evicted: AtomicU64,
    /// Connections answered 503 (every one held was serving a request).
    pub refused: AtomicU64,
    /// TLS handshakes that failed or did not finish within [`HEAD_TIMEOUT`].
    pub tls_failed: AtomicU64,
    /// Requests answered 401.
    pub unauthorized: AtomicU64,
}

impl HttpStats {
    /// The counters for the metrics, with the web config's reload errors.
    pub fn counts(&self, reload_errors: u64) -> EndpointCounts {
        EndpointCounts {
            evicted: self.evicted.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            tls_failed: self.tls_failed.load(Ordering::Relaxed),
            unauthorized: self.unauthorized.load(Ordering::Relaxed),
            reload_errors,
        }
    }
}

/// One connection's phase and since when, shared by its task and the table.
#[derive(Debug)]
struct Slot(Mutex<(Phase, Instant)>);

impl Slot {
    fn new(now: Instant) -> Self {
        Self(Mutex::new((Phase::New, now)))
    }

    fn set(&self, p: Phase) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = (p, Instant::now());
    }

    fn get(&self) -> (Phase, Instant) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

struct Entry {
    id: u64,
    slot: Arc<Slot>,
    abort: Option<AbortHandle>,
    /// Aborted to make room; its task has not been dropped yet.
    closing: bool,
}

/// Every connection whose task is alive.
#[derive(Default)]
struct Table {
    entries: Vec<Entry>,
    next_id: u64,
}

type Shared = Arc<Mutex<Table>>;

fn lock(t: &Shared) -> std::sync::MutexGuard<'_, Table> {
    t.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Table {
    /// Connections not being closed.
    fn open(&self) -> usize {
        self.entries.iter().filter(|e| !e.closing).count()
    }

    /// Whether a connection's task has not run yet.
    fn has_new(&self) -> bool {
        self.entries
            .iter()
            .any(|e| !e.closing && e.slot.get().0 == Phase::New)
    }

    /// Abort the connection that should make room, if any may; true when one was.
    fn evict(&mut self, now: Instant) -> bool {
        let phases: Vec<Option<(Phase, Instant)>> = self
            .entries
            .iter()
            .map(|e| (!e.closing).then(|| e.slot.get()))
            .collect();
        let Some(i) = victim(&phases, now) else {
            return false;
        };
        let e = &mut self.entries[i];
        e.closing = true;
        if let Some(a) = &e.abort {
            a.abort();
        }
        true
    }
}

/// Which connection makes room for a new one (never one whose task has not run yet): the
/// oldest fresh one, else the one kept
/// longest, else the one whose response (or TLS handshake) has waited longest if that is over
/// [`SLOW_RESPONSE`]; `None` (closing ones) are never chosen.
fn victim(conns: &[Option<(Phase, Instant)>], now: Instant) -> Option<usize> {
    conns
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let (phase, since) = (*c)?;
            let rank = match phase {
                Phase::New => return None,
                Phase::Fresh => 0,
                Phase::Kept => 1,
                Phase::Serving | Phase::Handshake
                    if now.saturating_duration_since(since) >= SLOW_RESPONSE =>
                {
                    2
                }
                Phase::Serving | Phase::Handshake => return None,
            };
            Some(((rank, since), i))
        })
        .min()
        .map(|(_, i)| i)
}

/// Removes its connection from the table when the task ends, however it ends.
struct Registered {
    table: Shared,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut t = lock(&self.table);
        if let Some(i) = t.entries.iter().position(|e| e.id == self.id) {
            t.entries.swap_remove(i);
        }
    }
}

/// The bound socket the server accepts on.
#[derive(Debug)]
pub enum Listener {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
}

/// A listening socket of either kind, so one accept loop serves both.
trait Accept {
    type Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static;
    async fn next(&self) -> std::io::Result<Self::Stream>;
    /// One write that does not wait (for the 503 of a refused connection).
    fn try_write(s: &Self::Stream, b: &[u8]) -> std::io::Result<usize>;
}

impl Accept for tokio::net::TcpListener {
    type Stream = tokio::net::TcpStream;
    async fn next(&self) -> std::io::Result<Self::Stream> {
        self.accept().await.map(|(s, _)| s)
    }
    fn try_write(s: &Self::Stream, b: &[u8]) -> std::io::Result<usize> {
        s.try_write(b)
    }
}

impl Accept for tokio::net::UnixListener {
    type Stream = tokio::net::UnixStream;
    async fn next(&self) -> std::io::Result<Self::Stream> {
        self.accept().await.map(|(s, _)| s)
    }
    fn try_write(s: &Self::Stream, b: &[u8]) -> std::io::Result<usize> {
        s.try_write(b)
    }
}

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

/// Serve `snapshots` on `listener` (already bound) from a thread of its own, counting what it
/// closes and refuses in `stats`; with `web`, TLS, basic auth and headers as it says.
pub fn spawn(
    listener: Listener,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    stats: Arc<HttpStats>,
    web: Option<Arc<Web>>,
) -> anyhow::Result<Server> {
    match &listener {
        Listener::Tcp(l) => l.set_nonblocking(true),
        Listener::Unix(l) => l.set_nonblocking(true),
    }
    .context("making the metrics socket non-blocking")?;
    // One blocking thread: the bcrypt checks of basic auth run there one at a time, so a
    // flood of passwords takes at most one core from the drain.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .max_blocking_threads(1)
        .build()
        .context("starting the metrics runtime")?;
    let (stop_tx, stop_rx) = oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("metrics-http".into())
        .spawn(move || {
            rt.block_on(async move {
                match listener {
                    Listener::Tcp(l) => match tokio::net::TcpListener::from_std(l) {
                        Ok(l) => accept_loop(l, snapshots, stats, web, stop_rx).await,
                        Err(e) => eprintln!("ebee-top: metrics endpoint: {e}"),
                    },
                    Listener::Unix(l) => match tokio::net::UnixListener::from_std(l) {
                        Ok(l) => accept_loop(l, snapshots, stats, web, stop_rx).await,
                        Err(e) => eprintln!("ebee-top: metrics endpoint: {e}"),
                    },
                }
            });
        })
        .context("starting the metrics thread")?;
    Ok(Server {
        stop: Some(stop_tx),
        thread: Some(thread),
    })
}

/// Let the tasks of aborted connections run (and close their sockets) until at most
/// [`MAX_CLOSING`] are left, so the descriptors held stay bounded.
async fn wait_for_closing(table: &Shared) {
    let mut tries = 0u32;
    while lock(table).entries.len() >= MAX_CONNECTIONS + MAX_CLOSING {
        tries += 1;
        if tries < 8 {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

async fn accept_loop<L: Accept>(
    listener: L,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    stats: Arc<HttpStats>,
    web: Option<Arc<Web>>,
    mut stop: oneshot::Receiver<()>,
) {
    let table: Shared = Arc::default();
    let plain = Arc::new(Active::plain());
    loop {
        wait_for_closing(&table).await;
        let accepted = tokio::select! {
            _ = &mut stop => return,
            a = listener.next() => a,
        };
        let stream = match accepted {
            Ok(s) => s,
            Err(e) => {
                // Out of descriptors or memory: close a connection that may make room, or
                // wait a little rather than spin. Anything else (a connection reset before
                // we took it) concerns that connection only.
                let scarce = matches!(
                    e.raw_os_error(),
                    Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                );
                if scarce {
                    let evicted = lock(&table).evict(Instant::now());
                    if evicted {
                        stats.evicted.fetch_add(1, Ordering::Relaxed);
                        tokio::task::yield_now().await;
                    } else {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
                continue;
            }
        };
        let mut tries = 0;
        let (admitted, evicted) = loop {
            let (verdict, waiting) = {
                let mut t = lock(&table);
                let verdict = if t.open() < MAX_CONNECTIONS {
                    (true, false)
                } else if t.evict(Instant::now()) {
                    (true, true)
                } else {
                    (false, false)
                };
                (verdict, t.has_new())
            };
            // Connections whose task has not run yet are never closed: let them run (and
            // show whether they may be) before refusing this one.
            if verdict.0 || !waiting || tries == 8 {
                break verdict;
            }
            tries += 1;
            tokio::task::yield_now().await;
        };
        let now = Instant::now();
        if !admitted {
            // Every connection is serving a request: one attempt to say so without
            // waiting, then close.
            stats.refused.fetch_add(1, Ordering::Relaxed);
            let _ = L::try_write(
                &stream,
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            continue;
        }
        let slot = Arc::new(Slot::new(now));
        let id = {
            let mut t = lock(&table);
            t.next_id += 1;
            t.next_id
        };
        let guard = Registered {
            table: table.clone(),
            id,
        };
        let snaps = snapshots.clone();
        let s = slot.clone();
        // The configuration as it is on disk now (re-read if a file changed since).
        let active = web.as_ref().map_or_else(|| plain.clone(), |w| w.current());
        let st = stats.clone();
        // On this one-thread runtime the task cannot run (nor end) before it is in the table.
        let task = tokio::spawn(async move {
            let _guard = guard;
            s.set(Phase::Fresh);
            match active.tls.clone() {
                None => serve_connection(TokioIo::new(stream), snaps, s, active, st).await,
                Some(tls) => {
                    // Fresh (the first to make room) until its whole ClientHello has come,
                    // then protected while the handshake goes on (Phase::Handshake); plain
                    // HTTP, another CA's certificate or a handshake left unfinished end here,
                    // with a TLS alert and no data.
                    let hs_slot = s.clone();
                    let handshake = async move {
                        let lazy = tokio_rustls::LazyConfigAcceptor::new(
                            rustls::server::Acceptor::default(),
                            stream,
                        );
                        let start = lazy.await?;
                        hs_slot.set(Phase::Handshake);
                        start.into_stream(tls.config().clone()).await
                    };
                    match tokio::time::timeout(HEAD_TIMEOUT, handshake).await {
                        Ok(Ok(t)) => {
                            // Still protected until its request head comes (Serving): its
                            // request may follow the handshake by a moment, and a churn of
                            // new connections would close it in that moment were it fresh.
                            serve_connection(TokioIo::new(t), snaps, s, active, st).await;
                        }
                        _ => {
                            st.tls_failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
        });
        lock(&table).entries.push(Entry {
            id,
            slot,
            abort: Some(task.abort_handle()),
            closing: false,
        });
        if evicted {
            stats.evicted.fetch_add(1, Ordering::Relaxed);
            // Let the aborted task run now, so its socket is closed before the next accept.
            tokio::task::yield_now().await;
        }
    }
}

/// A response body that marks its connection kept once hyper has taken all of it.
pub struct Tracked {
    body: Full<Bytes>,
    slot: Option<Arc<Slot>>,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if let Some(s) = self.slot.take() {
            s.set(Phase::Kept);
        }
    }
}

async fn serve_connection<I>(
    io: TokioIo<I>,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    slot: Arc<Slot>,
    active: Arc<Active>,
    stats: Arc<HttpStats>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(true);
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        slot.set(Phase::Serving);
        let snapshots = snapshots.clone();
        let slot = slot.clone();
        let active = active.clone();
        let stats = stats.clone();
        async move {
            let allowed = match &active.auth {
                None => true,
                Some(a) => a.allows(req.headers().get(AUTHORIZATION)).await,
            };
            let mut r = if allowed {
                let snap = snapshots.borrow().clone();
                respond(&req, &snap)
            } else {
                stats.unauthorized.fetch_add(1, Ordering::Relaxed);
                unauthorized()
            };
            for (name, value) in &active.headers {
                r.headers_mut().insert(name.clone(), value.clone());
            }
            let r = r.map(|body| Tracked {
                body,
                slot: Some(slot),
            });
            Ok::<_, Infallible>(r)
        }
    });
    let conn = http.serve_connection(io, service);
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

/// No credential, or a wrong one.
fn unauthorized() -> Response<Full<Bytes>> {
    let mut r = plain(StatusCode::UNAUTHORIZED, "unauthorized\n");
    r.headers_mut().insert(
        WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"ebee-top\", charset=\"UTF-8\""),
    );
    r
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
    use std::io::{Read as _, Write as _};
    use std::net::TcpStream;

    use super::*;

    #[test]
    fn the_oldest_fresh_connection_makes_room_first() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let now = at(10_000);
        let fresh = |ms| Some((Phase::Fresh, at(ms)));
        let kept = |ms| Some((Phase::Kept, at(ms)));
        let serving = |ms| Some((Phase::Serving, at(ms)));
        // Fresh before kept before slow, oldest first within each; closing ones never.
        assert_eq!(victim(&[kept(1), fresh(5), fresh(3), None], now), Some(2));
        assert_eq!(victim(&[serving(1), kept(7), kept(4)], now), Some(2));
        assert_eq!(
            victim(&[serving(9_500), serving(2_000), None], now),
            Some(1)
        );
        // A response under way for less than SLOW_RESPONSE is never cut off, nor a TLS
        // handshake whose ClientHello came; a fresh one goes first.
        assert_eq!(victim(&[serving(9_500), None, serving(9_999)], now), None);
        let handshake = |ms| Some((Phase::Handshake, at(ms)));
        assert_eq!(victim(&[handshake(9_990), serving(9_500)], now), None);
        assert_eq!(victim(&[handshake(1), fresh(9_999)], now), Some(1));
        assert_eq!(victim(&[handshake(8_000), serving(8_500)], now), Some(0));
        // A connection whose task has not run yet is never closed, however old.
        let new = |ms| Some((Phase::New, at(ms)));
        assert_eq!(victim(&[new(1), fresh(9_000)], now), Some(1));
        assert_eq!(victim(&[new(1), new(2)], now), None);
        assert_eq!(victim(&[], now), None);
    }

    fn start() -> (std::net::SocketAddr, Arc<HttpStats>, Server) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (_tx, rx) = watch::channel(Arc::new(Snapshot::default()));
        let stats = Arc::new(HttpStats::default());
        let server = spawn(Listener::Tcp(l), rx, stats.clone(), None).unwrap();
        (addr, stats, server)
    }

    fn get(addr: std::net::SocketAddr) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    /// Twice the table's worth of silent and half-sent connections: a scrape is still served,
    /// and the connections held stay within the table (the rest were closed to make room).
    #[test]
    fn silent_connections_never_crowd_out_a_scrape() {
        let (addr, stats, _server) = start();
        let mut held = Vec::new();
        for i in 0..2 * MAX_CONNECTIONS {
            let mut c = TcpStream::connect(addr).unwrap();
            if i % 2 == 1 {
                c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                    .unwrap();
            }
            held.push(c);
        }
        for _ in 0..5 {
            let r = get(addr);
            assert!(r.starts_with("HTTP/1.1 200"), "{r:?}");
        }
        assert_eq!(stats.refused.load(Ordering::Relaxed), 0);
        // Every scrape above that found the table full took the place of a silent one.
        let evicted = stats.evicted.load(Ordering::Relaxed);
        assert!(
            evicted >= MAX_CONNECTIONS as u64,
            "{evicted} evicted of {} held",
            held.len()
        );
        // The evicted ones are closed (a read sees the end or a reset); no more than the
        // table's worth are still open (a read would wait).
        let mut open = 0;
        for c in &mut held {
            c.set_nonblocking(true).unwrap();
            let mut b = [0u8; 64];
            if matches!(c.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock) {
                open += 1;
            }
        }
        assert!(open <= MAX_CONNECTIONS, "{open} of {} open", held.len());
    }

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
