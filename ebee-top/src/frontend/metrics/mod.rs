//! The Prometheus endpoint: `--listen ADDR:PORT` beside the screen or batch mode, and
//! `ebee-top serve`, headless. The flow, so the drain never waits on a scrape:
//!
//! ```text
//! drain ─► Metered source ─try_send(Batch)─► "metrics" thread: Meter::ingest, snapshot ─┐
//!                                                                   watch (Arc<Snapshot>) │
//!                         scrapes ◄─ hyper on its own tokio thread ◄─────────────────────┘
//! ```
//!
//! The socket is bound first ([`Endpoint::bind`], before anything is loaded), so a port in use
//! (or a path that cannot be a socket) is one line and exit code 9. [`meter`] holds the fold
//! and the extension point for new pipelines' metrics; [`exposition`] the formats; [`http`] the
//! server and its limits; [`web`] the `--web-config` file (TLS, client certificates, basic
//! auth), read with the socket; [`unix`] the socket file of `--listen unix:PATH`.

mod cgroups;
pub mod exposition;
pub mod histogram;
pub mod http;
pub mod meter;
mod own;
mod pinned;
mod process;
mod servers;
pub mod unix;
pub mod web;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::time::Duration;

use anyhow::Context as _;

use crate::batch::Batch;
use crate::cli::{ListenAddr, ServeArgs};
use crate::probes::ProbeConfig;
use crate::record::Recorder;
use crate::record::dir::{DirOptions, DirWriter};
use crate::record::writer::local_meta;
use crate::source::{Live, Source, Tee};

pub use meter::{Meter, Section};

/// Batches queued for the metrics thread before new ones are dropped (and counted).
pub const QUEUE: usize = 100;
/// Connections the kernel queues for the metrics socket before it is accepted.
pub const LISTEN_BACKLOG: i32 = 1024;
/// Seconds the kernel holds a connection that has sent nothing before handing it over.
pub const DEFER_ACCEPT_S: i32 = 1;

/// `--listen` could not be used: the address is taken, not ours, or not allowed; a unix
/// socket's path holds something that is not a stale socket (exit code 9).
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}: {why}")]
pub struct ListenError {
    pub addr: ListenAddr,
    why: String,
}

/// `--listen-group` used wrongly: a usage error (exit code 2), found before anything is made.
#[derive(Debug, thiserror::Error)]
pub enum ListenGroupError {
    #[error("--listen-group: no group {0:?} (not a group name, nor a gid)")]
    NoSuchGroup(String),
    #[error("--listen-group: only with --listen unix:PATH (a TCP port has no group)")]
    NotUnix,
}

/// The bound metrics socket, made before anything is loaded.
#[derive(Debug)]
pub struct Endpoint {
    listener: http::Listener,
    addr: ListenAddr,
    web: Option<Arc<web::Web>>,
    /// The socket file of `--listen unix:PATH`, removed when the endpoint is dropped.
    socket_file: Option<unix::SocketFile>,
}

impl Endpoint {
    /// Bind `addr` (with `group`, the unix socket's group): an unknown group is a usage error
    /// (exit code 2); a port in use, an address that is not this machine's, or a path that
    /// cannot be a socket is a [`ListenError`] (exit code 9).
    pub fn bind(addr: &ListenAddr, group: Option<&str>) -> anyhow::Result<Self> {
        let (listener, socket_file) = match addr {
            ListenAddr::Tcp(a) => {
                if group.is_some() {
                    return Err(ListenGroupError::NotUnix.into());
                }
                (http::Listener::Tcp(bind_tcp(*a)?), None)
            }
            ListenAddr::Unix(p) => {
                let gid = match group {
                    Some(g) => Some(
                        crate::os::group::gid_of(g)
                            .ok_or_else(|| ListenGroupError::NoSuchGroup(g.to_owned()))?,
                    ),
                    None => None,
                };
                let (l, f) = unix::bind(p, gid)?;
                (http::Listener::Unix(l), Some(f))
            }
        };
        // Port 0 asks the kernel for a free one: report the one it gave.
        let addr = match (&listener, addr) {
            (http::Listener::Tcp(l), ListenAddr::Tcp(a)) => {
                ListenAddr::Tcp(l.local_addr().unwrap_or(*a))
            }
            _ => addr.clone(),
        };
        Ok(Self {
            listener,
            addr,
            web: None,
            socket_file,
        })
    }

    /// Read `--web-config` when given (a broken one is a typed error: exit code 10).
    pub fn secure(mut self, web_config: Option<&Path>) -> Result<Self, web::WebConfigError> {
        if let Some(p) = web_config {
            self.web = Some(Arc::new(web::Web::load(p)?));
        }
        Ok(self)
    }

    /// The address actually bound.
    pub fn addr(&self) -> &ListenAddr {
        &self.addr
    }
}

/// Bind a TCP address, with the endpoint's backlog and `TCP_DEFER_ACCEPT`.
fn bind_tcp(addr: SocketAddr) -> Result<std::net::TcpListener, ListenError> {
    let listener = std::net::TcpListener::bind(addr).map_err(|e| ListenError {
        addr: ListenAddr::Tcp(addr),
        why: match e.kind() {
            std::io::ErrorKind::AddrInUse => {
                "address already in use (another process listens there; pick another port)"
                    .to_owned()
            }
            std::io::ErrorKind::AddrNotAvailable => "no such address on this machine".to_owned(),
            std::io::ErrorKind::PermissionDenied => {
                "permission denied (ports below 1024 need CAP_NET_BIND_SERVICE)".to_owned()
            }
            _ => e.to_string(),
        },
    })?;
    // std listens with a backlog of 128: a few hundred connections opened at once (a
    // scanner, or silent clients replaced as fast as they are evicted) would fill it, and
    // a scrape's SYN dropped there waits a second for its retransmission. A second
    // listen() only raises the queue (the kernel caps it at net.core.somaxconn).
    // TCP_DEFER_ACCEPT: a connection that has sent nothing is not handed to accept()
    // for DEFER_ACCEPT_S, so silent ones wait in the kernel (no descriptor, no task) while
    // every HTTP client and TLS handshake, which speak first, come straight through.
    {
        use std::os::fd::AsRawFd as _;
        let fd = listener.as_raw_fd();
        let secs: libc::c_int = DEFER_ACCEPT_S;
        // SAFETY: listen(2) and setsockopt(2) on a socket we own and that stays open; the
        // option's value is a c_int that lives across the call, with its size.
        unsafe {
            libc::listen(fd, LISTEN_BACKLOG);
            libc::setsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_DEFER_ACCEPT,
                (&raw const secs).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
    Ok(listener)
}

/// Bind `--listen` if it was given (with `--listen-group`), and read its `--web-config`.
pub fn bind(
    listen: Option<&ListenAddr>,
    group: Option<&str>,
    web_config: Option<&Path>,
) -> anyhow::Result<Option<Endpoint>> {
    match listen {
        Some(a) => Ok(Some(Endpoint::bind(a, group)?.secure(web_config)?)),
        None => Ok(None),
    }
}

/// The running endpoint: the fold thread and the HTTP server.
pub struct Metrics {
    tx: SyncSender<Box<Batch>>,
    dropped: Arc<AtomicU64>,
    _http: http::Server,
    addr: ListenAddr,
    tls: bool,
    /// Dropped after the server (fields drop in order): the file goes once nothing serves it.
    _socket_file: Option<unix::SocketFile>,
}

/// What the drain side holds: hands each Batch to the metrics thread without waiting.
#[derive(Clone)]
pub struct Tap {
    tx: SyncSender<Box<Batch>>,
    dropped: Arc<AtomicU64>,
}

impl Tap {
    /// Offer one interval; when the metrics thread is that far behind it is dropped and
    /// counted (`ebee_metrics_intervals_dropped_total`).
    pub fn offer(&self, b: &Batch) {
        match self.tx.try_send(Box::new(b.clone())) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl Metrics {
    /// Start folding and serving on `endpoint`, exporting the top `k` processes per measure.
    pub fn start(endpoint: Endpoint, k: usize) -> anyhow::Result<Self> {
        let mut meter = Meter::new(k);
        let (snap_tx, snap_rx) = tokio::sync::watch::channel(Arc::new(meter.snapshot()));
        let (tx, rx) = mpsc::sync_channel::<Box<Batch>>(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let d = dropped.clone();
        let stats = Arc::new(http::HttpStats::default());
        let st = stats.clone();
        let web = endpoint.web.clone();
        // The thread ends when every sender is gone (the Metered source holds clones).
        std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                while let Ok(b) = rx.recv() {
                    meter.ingest(&b);
                    meter.set_queue_dropped(d.load(Ordering::Relaxed));
                    let reload_errors = web
                        .as_ref()
                        .map_or(0, |w| w.reload_errors.load(Ordering::Relaxed));
                    meter.set_connections(st.counts(reload_errors));
                    snap_tx.send_replace(Arc::new(meter.snapshot()));
                }
            })
            .context("starting the metrics thread")?;
        let tls = endpoint.web.as_ref().is_some_and(|w| w.tls());
        let http = http::spawn(endpoint.listener, snap_rx, stats, endpoint.web)?;
        Ok(Self {
            tx,
            dropped,
            _http: http,
            addr: endpoint.addr,
            tls,
            _socket_file: endpoint.socket_file,
        })
    }

    pub fn addr(&self) -> &ListenAddr {
        &self.addr
    }

    /// Where a scraper finds the metrics, for the start-up line: the URL, and for a unix
    /// socket the path to give curl's `--unix-socket`.
    pub fn location(&self) -> String {
        match &self.addr {
            ListenAddr::Tcp(a) => format!("{}://{a}/metrics", self.scheme()),
            ListenAddr::Unix(p) => format!(
                "{}://localhost/metrics over unix:{} (mode 0660)",
                self.scheme(),
                p.display()
            ),
        }
    }

    /// `https` with TLS from `--web-config`, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls { "https" } else { "http" }
    }

    pub fn tap(&self) -> Tap {
        Tap {
            tx: self.tx.clone(),
            dropped: self.dropped.clone(),
        }
    }

    /// Wrap `source` so that every Batch it gives is also offered to the endpoint.
    pub fn wrap(&self, source: Box<dyn Source + Send>) -> Box<dyn Source + Send> {
        Box::new(Metered {
            inner: source,
            tap: self.tap(),
        })
    }
}

/// Wrap `source` when an endpoint runs.
pub fn wrap(source: Box<dyn Source + Send>, m: Option<&Metrics>) -> Box<dyn Source + Send> {
    match m {
        Some(m) => m.wrap(source),
        None => source,
    }
}

/// A Source whose every Batch is also offered to the metrics endpoint.
pub struct Metered {
    pub inner: Box<dyn Source + Send>,
    pub tap: Tap,
}

impl Source for Metered {
    fn next_batch(&mut self) -> anyhow::Result<Option<Batch>> {
        let b = self.inner.next_batch()?;
        if let Some(b) = &b {
            self.tap.offer(b);
        }
        Ok(b)
    }

    fn set_interval(&mut self, interval: Duration) -> anyhow::Result<()> {
        self.inner.set_interval(interval)
    }

    fn set_pins(&mut self, pids: &[u32]) -> anyhow::Result<()> {
        self.inner.set_pins(pids)
    }

    fn set_threads(&mut self, on: bool) -> anyhow::Result<()> {
        self.inner.set_threads(on)
    }
}

/// Start the endpoint given with `--listen` (bound earlier by main, before anything loaded).
pub fn start(endpoint: Option<Endpoint>, k: u32) -> anyhow::Result<Option<Metrics>> {
    let Some(ep) = endpoint else {
        return Ok(None);
    };
    let m = Metrics::start(ep, k as usize)?;
    Ok(Some(m))
}

/// `ebee-top serve`: load, then fold every interval into the endpoint until SIGTERM, SIGINT or
/// SIGHUP. No terminal; messages go to stderr.
pub fn serve(a: &ServeArgs, endpoint: Option<Endpoint>) -> anyhow::Result<()> {
    let quit = super::signal_flag()?;
    let cfg = ProbeConfig {
        shadow: false,
        trace: false,
        bpf_stats: !a.no_bpf_stats,
        no_servers: a.no_servers,
        no_culprits: a.no_culprits,
        stats_sampled: true,
        cgroups: crate::os::cgroup::Want::Auto,
        syscalls_now: !a.pids.is_empty(),
    };
    let mut live = Live::start(cfg, a.delay)?;
    super::say_pipelines_off(&live);
    if !a.pids.is_empty() {
        live.set_pins(&a.pids)?;
    }
    // The flight recorder: every interval, as the metrics see it, into the folder.
    let recorder = match &a.record_dir {
        Some(dir) => {
            let opts = DirOptions {
                dir: crate::record::dir::prepare(dir)?,
                retain: a.retain,
                retain_for: a.retain_for,
            };
            let w = DirWriter::create(opts, local_meta(a.delay))?;
            Some(
                Recorder::start(w, super::recording::stderr_notify())
                    .context("starting the recorder thread")?,
            )
        }
        None => None,
    };
    let source: Box<dyn Source + Send> = match &recorder {
        Some(r) => Box::new(Tee {
            inner: live,
            tap: r.tap(),
        }),
        None => Box::new(live),
    };
    let metrics = match endpoint {
        Some(endpoint) => {
            let metrics = Metrics::start(endpoint, a.metrics_top as usize)?;
            eprintln!(
                "ebee-top: serving metrics at {} (interval {:?}, top {} per measure)",
                metrics.location(),
                a.delay,
                a.metrics_top
            );
            Some(metrics)
        }
        None => None,
    };
    if let Some(dir) = &a.record_dir {
        eprintln!(
            "ebee-top: recording into {} (a new file every hour; at most {} MiB, {} kept)",
            dir.display(),
            a.retain >> 20,
            crate::time::fmt_span(a.retain_for.as_millis() as u64)
        );
    }
    let mut source = wrap(source, metrics.as_ref());
    while !quit.load(Ordering::Relaxed) {
        if source.next_batch()?.is_none() {
            break;
        }
    }
    drop(source);
    if let Some(r) = recorder {
        let st = r.finish();
        eprintln!("ebee-top: {}", st.line());
    }
    eprintln!("ebee-top: stopping");
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};

    use super::*;
    use crate::batch::ProcInfo;

    #[test]
    fn the_drain_never_waits_on_a_stalled_metrics_thread() {
        // A queue nobody reads: every offer past its capacity returns at once, counted.
        let (tx, _rx) = mpsc::sync_channel::<Box<Batch>>(QUEUE);
        let tap = Tap {
            tx,
            dropped: Arc::new(AtomicU64::new(0)),
        };
        let b = Batch::build(1, 0, 1).done();
        for _ in 0..QUEUE + 10 {
            tap.offer(&b);
        }
        assert_eq!(tap.dropped.load(Ordering::Relaxed), 10);
    }

    fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    /// Batches through the tap, the fold thread and hyper on a real socket (no eBPF needed).
    #[test]
    fn batches_offered_are_served() {
        let ep = Endpoint::bind(&ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()), None).unwrap();
        let ListenAddr::Tcp(addr) = *ep.addr() else {
            panic!("{:?}", ep.addr())
        };
        assert_ne!(addr.port(), 0, "the port the kernel chose");
        let m = Metrics::start(ep, 5).unwrap();
        let tap = m.tap();
        for seq in 1..=3 {
            tap.offer(
                &Batch::build(seq, seq * 1_000_000, 1_000_000)
                    .cpu(42, 500_000, &[])
                    .proc(ProcInfo::named(42, "worker"))
                    .done(),
            );
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let body = loop {
            let r = get(addr, "/metrics");
            if r.contains("ebee_intervals_total 3") || std::time::Instant::now() > deadline {
                break r;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(body.starts_with("HTTP/1.1 200"), "{body}");
        assert!(body.contains("ebee_intervals_total 3"), "{body}");
        assert!(
            body.contains(r#"ebee_process_cpu_seconds_total{pid="42",comm="worker"} 0.0015"#),
            "{body}"
        );
        assert!(get(addr, "/nope").starts_with("HTTP/1.1 404"));
        // A second bind of the same address is the typed error behind exit code 9.
        let e = Endpoint::bind(&ListenAddr::Tcp(addr), None).unwrap_err();
        assert!(e.to_string().contains("already in use"), "{e}");
        assert!(
            e.downcast_ref::<ListenError>().is_some(),
            "exit code 9: {e}"
        );
        drop(m);
        // Another test may bind the freed port for a moment: look for a while, not once.
        let gone = (0..100).any(|_| {
            let refused = std::net::TcpStream::connect(addr).is_err();
            if !refused {
                std::thread::sleep(Duration::from_millis(20));
            }
            refused
        });
        assert!(gone, "the server is gone with the handle");
    }
}
