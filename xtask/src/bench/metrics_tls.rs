//! `cargo xtask bench metrics --tls`: the endpoint locked with `--web-config` (TLS and basic
//! auth, bcrypt cost 10) and abused as issue 31 describes, beside a scraper that scrapes once a
//! second with the right password. Two runs of `ebee-top -b --listen --latency-report`, the
//! same length, with redis under load as in the plain modes: **tls** (the scraper alone) and
//! **tls-abused** (the scraper, plus 100 connections that never finish their TLS handshake,
//! each replaced when the server drops it; 1,000 wrong passwords a second, each a new one so
//! no verdict is cached; plain HTTP sent to the TLS port 20 times a second). Reported: scrapes
//! missed (not answered 200 within the 1 s a Prometheus scraping every second allows), the
//! drain's p99 in both runs, and what the abuse achieved (wrong passwords sent and answered
//! 401, plain requests answered with data, which must be none).

use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use serde_json::Value;

use super::metrics::{ADDR, besiege, ms, start_redis};
use super::{Workload, as_root, header, load_avg, median, publish, table_head};

/// The scraper's credential (user `prometheus`, password `s3cret`), base64.
const GOOD: &str = "cHJvbWV0aGV1czpzM2NyZXQ=";
/// Wrong passwords sent a second, in all.
const FLOOD_RATE: u64 = 1_000;
/// Threads sending them, each on its own keep-alive TLS connection, each waiting for its
/// answer: a request in the server's bcrypt queue holds its thread for up to a second, so
/// enough of them that the rest keep the rate (those beyond the queue are answered at once).
const FLOOD_THREADS: u64 = 100;
/// Plain HTTP requests to the TLS port a second.
const PLAIN_RATE: u64 = 20;
/// A scrape answered later than this is missed (a 1 s scrape interval allows no more).
const SCRAPE_DEADLINE: Duration = Duration::from_secs(1);
/// The first bytes of a TLS ClientHello (a handshake record announcing 512 bytes), then
/// nothing: a handshake that never finishes.
const PARTIAL_HELLO: &[u8] = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03";

fn run_cmd(cmd: &mut Command) -> Result<String> {
    let o = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    anyhow::ensure!(
        o.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// A CA, a server certificate for 127.0.0.1 signed by it, a bcrypt hash (cost 10) and the web
/// config naming them, in `dir`; returns the web config's path.
fn make_web_config(dir: &Path) -> Result<std::path::PathBuf> {
    let openssl = |args: &[&str]| run_cmd(Command::new("openssl").current_dir(dir).args(args));
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &["-days", "2", "-keyout", "ca.key", "-out", "ca.pem"],
            &["-subj", "/CN=ebee-top bench CA"],
        ]
        .concat(),
    )?;
    openssl(
        &[
            &["req"][..],
            &ec,
            &[
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=server",
            ],
        ]
        .concat(),
    )?;
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n",
    )?;
    openssl(&[
        "x509",
        "-req",
        "-days",
        "2",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-out",
        "server.pem",
        "-extfile",
        "server.ext",
    ])?;
    let line = run_cmd(Command::new("htpasswd").args(["-nbBC", "10", "prometheus", "s3cret"]))
        .context("htpasswd (apt-get install apache2-utils)")?;
    let hash = line
        .trim()
        .strip_prefix("prometheus:")
        .context("htpasswd printed no user:hash")?
        .to_owned();
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n\
             basic_auth_users:\n  prometheus: '{hash}'\n"
        ),
    )?;
    Ok(web)
}

/// A client that trusts the bench's CA only.
fn client_config(ca: &Path) -> Result<Arc<ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).context("reading the bench CA")? {
        roots.add(c.context("a certificate of the bench CA")?)?;
    }
    Ok(Arc::new(
        ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    ))
}

type Tls = StreamOwned<ClientConnection, TcpStream>;

fn connect(cfg: &Arc<ClientConfig>, timeout: Duration) -> Result<Tls> {
    let sock = TcpStream::connect(ADDR)?;
    sock.set_read_timeout(Some(timeout))?;
    sock.set_write_timeout(Some(timeout))?;
    let name = ServerName::try_from("127.0.0.1")?;
    let conn = ClientConnection::new(cfg.clone(), name)?;
    Ok(StreamOwned::new(conn, sock))
}

/// One request on `tls` (keep-alive) with the credential `cred` (base64): its status and body.
fn request(tls: &mut Tls, cred: &str) -> Result<(u16, Vec<u8>)> {
    write!(
        tls,
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Basic {cred}\r\n\r\n"
    )?;
    tls.flush()?;
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        tls.read_exact(&mut b)?;
        head.push(b[0]);
        anyhow::ensure!(head.len() < 16 * 1024, "response head too long");
    }
    let head = String::from_utf8_lossy(&head);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("no status line")?;
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .context("no Content-Length")?;
    let mut body = vec![0u8; len];
    tls.read_exact(&mut body)?;
    Ok((status, body))
}

/// One scrape on a new connection (as a scraper that does not keep connections): the time to
/// the whole response and the body, when it was 200.
fn scrape(cfg: &Arc<ClientConfig>, timeout: Duration) -> Result<(Duration, Vec<u8>)> {
    let t = Instant::now();
    let mut tls = connect(cfg, timeout).context("connecting")?;
    let (status, body) = request(&mut tls, GOOD)
        .with_context(|| format!("after {:.0} ms", t.elapsed().as_secs_f64() * 1e3))?;
    anyhow::ensure!(status == 200, "answered {status}");
    Ok((t.elapsed(), body))
}

/// `ebee_metrics_connections_closed_total{reason="REASON"}` in a scrape's body.
fn closed(body: &[u8], reason: &str) -> String {
    let prefix = format!("ebee_metrics_connections_closed_total{{reason=\"{reason}\"}} ");
    String::from_utf8_lossy(body)
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or_else(|| "n/a".into(), |v| format!("{v:.0}"))
}

/// What the abuse achieved.
#[derive(Default)]
struct Abuse {
    /// Wrong passwords sent, and answered 401.
    wrong_sent: AtomicU64,
    wrong_401: AtomicU64,
    /// Wrong passwords let in: must stay 0.
    wrong_leaked: AtomicU64,
    /// Plain HTTP requests sent to the TLS port, and those answered with HTTP (must be 0).
    plain_sent: AtomicU64,
    plain_answered: AtomicU64,
}

/// `FLOOD_THREADS` threads sending wrong passwords, every one new, `FLOOD_RATE` a second in
/// all, until `stop`.
fn flood(
    cfg: &Arc<ClientConfig>,
    abuse: &Arc<Abuse>,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..FLOOD_THREADS)
        .map(|t| {
            let (cfg, abuse, stop) = (cfg.clone(), abuse.clone(), stop.clone());
            std::thread::spawn(move || {
                let gap = Duration::from_secs(1) * FLOOD_THREADS as u32 / FLOOD_RATE as u32;
                let mut next = Instant::now();
                let mut conn: Option<Tls> = None;
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let cred = b64(&format!("prometheus:wrong-{t}-{n}"));
                    if conn.is_none() {
                        conn = connect(&cfg, Duration::from_secs(5)).ok();
                    }
                    if let Some(c) = conn.as_mut() {
                        abuse.wrong_sent.fetch_add(1, Ordering::Relaxed);
                        match request(c, &cred).map(|(s, _)| s) {
                            Ok(401) => {
                                abuse.wrong_401.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(200) => {
                                abuse.wrong_leaked.fetch_add(1, Ordering::Relaxed);
                            }
                            // Anything else, or a closed connection: a new one next time.
                            _ => conn = None,
                        }
                    }
                    next += gap;
                    match next.checked_duration_since(Instant::now()) {
                        Some(d) => std::thread::sleep(d),
                        // Behind: do not make up for it in a burst.
                        None => next = Instant::now(),
                    }
                }
            })
        })
        .collect()
}

/// Plain HTTP to the TLS port, `PLAIN_RATE` a second, until `stop`.
fn plain_to_tls(abuse: &Arc<Abuse>, stop: &Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let (abuse, stop) = (abuse.clone(), stop.clone());
    std::thread::spawn(move || {
        let gap = Duration::from_secs(1) / PLAIN_RATE as u32;
        while !stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            if let Ok(mut c) = TcpStream::connect(ADDR) {
                let _ = c.set_read_timeout(Some(Duration::from_secs(3)));
                abuse.plain_sent.fetch_add(1, Ordering::Relaxed);
                let _ = c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
                let mut out = Vec::new();
                let _ = c.read_to_end(&mut out);
                if out.windows(5).any(|w| w == b"HTTP/") {
                    abuse.plain_answered.fetch_add(1, Ordering::Relaxed);
                }
            }
            std::thread::sleep(gap.saturating_sub(t.elapsed()));
        }
    })
}

/// Base64 (RFC 4648, padded) for a Basic credential.
fn b64(s: &str) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in s.as_bytes().chunks(3) {
        let byte = |i: usize| u32::from(c.get(i).copied().unwrap_or(0));
        let n = (byte(0) << 16) | (byte(1) << 8) | byte(2);
        for i in 0..4 {
            if i <= c.len() {
                out.push(char::from(A[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// One run: its latency report, the scrape times, scrapes missed and what the abuse did.
struct Run {
    report: Value,
    times: Vec<f64>,
    /// Why each missed scrape was missed.
    missed: Vec<String>,
    /// The last scrape's body (for ebee-top's own counters).
    last: Vec<u8>,
    abuse: Arc<Abuse>,
    seconds: f64,
}

fn run_once(
    seconds: u64,
    abused: bool,
    web: &Path,
    cfg: &Arc<ClientConfig>,
    report: &Path,
) -> Result<Run> {
    // Two seconds to start, `seconds` measured, then a margin so it outlives the scraper.
    let n = ((seconds + 4) * 20).to_string();
    let mut top = Workload(
        as_root("ebee-top")
            .args(["-b", "--format", "json", "-d", "0.05", "-n", &n])
            .args(["--listen", ADDR, "--web-config"])
            .arg(web)
            .arg("--latency-report")
            .arg(report)
            .stdout(Stdio::null())
            .spawn()
            .context("starting ebee-top")?,
    );
    std::thread::sleep(Duration::from_secs(2));
    // The scraper's credential is checked (and its verdict cached) before any abuse, as a
    // Prometheus that has been scraping for a while.
    // That first bcrypt check may take more than a second on a loaded machine: wait for it.
    anyhow::ensure!(
        (0..3).any(|_| scrape(cfg, Duration::from_secs(10)).is_ok()),
        "the first scrape over TLS with the right password failed"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let abuse = Arc::new(Abuse::default());
    let mut threads = Vec::new();
    let mut siege = Vec::new();
    let started = Instant::now();
    if abused {
        siege.push(besiege(100, PARTIAL_HELLO, stop.clone()));
        threads.extend(flood(cfg, &abuse, &stop));
        threads.push(plain_to_tls(&abuse, &stop));
    }
    let c = cfg.clone();
    let window = Duration::from_secs(seconds);
    let scraper = std::thread::spawn(move || {
        let mut v = Vec::new();
        let mut missed = Vec::new();
        let mut last = Vec::new();
        let mut next = Instant::now();
        while started.elapsed() < window {
            match scrape(&c, SCRAPE_DEADLINE) {
                Ok((d, body)) if d <= SCRAPE_DEADLINE => {
                    v.push(d.as_secs_f64() * 1e3);
                    last = body;
                }
                Ok((d, _)) => missed.push(format!("200 after {:.0} ms", d.as_secs_f64() * 1e3)),
                Err(e) => missed.push(format!("{e:#}")),
            }
            next += Duration::from_secs(1);
            if let Some(d) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(d);
            }
        }
        (v, missed, last)
    });
    let (times, missed, last) = scraper.join().unwrap_or_default();
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    for h in threads {
        let _ = h.join();
    }
    for h in siege {
        let _ = h.join();
    }
    let status = top.0.wait().context("waiting for ebee-top")?;
    anyhow::ensure!(status.success(), "ebee-top failed ({status})");
    let text = std::fs::read_to_string(report).context("reading the latency report")?;
    Ok(Run {
        report: serde_json::from_str(&text)?,
        times,
        missed,
        last,
        abuse,
        seconds: elapsed,
    })
}

pub fn run(seconds: u64) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("ebee-bench-metrics-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let web = make_web_config(&dir)?;
    let cfg = client_config(&dir.join("ca.pem"))?;
    let (_redis, _bench) = start_redis(&dir)?;
    let mut body = String::new();
    let cmd = format!("cargo xtask bench metrics --tls --seconds {seconds}");
    let note = format!("  \nLoad average when it started: {}", load_avg());
    header(
        &mut body,
        "Metrics endpoint: TLS and basic auth under abuse",
        &cmd,
        &note,
    )?;
    writeln!(
        body,
        "`ebee-top -b --format json -d 0.05 --listen {ADDR} --web-config web.yml \
         --latency-report`, {seconds} s measured (after 2 s to start), with TLS (a P-256 certificate) and basic auth (a \
         bcrypt hash of cost 10, as `htpasswd -nbBC 10` makes), redis-server under \
         redis-benchmark beside it as in the plain modes. A scraper scrapes once a second \
         over TLS with the right password, each time on a new connection; **missed**: not \
         answered 200 within 1 s. **tls**: the scraper alone. **tls-abused**: the scraper, \
         plus 100 connections that send the first bytes of a ClientHello and never finish \
         the handshake (each replaced when the server drops it), {FLOOD_RATE} wrong \
         passwords a second (aimed at; the table says what was sent) (each one new, so no cached verdict helps; {FLOOD_THREADS} \
         keep-alive TLS connections) and {PLAIN_RATE} plain-HTTP requests a second to the \
         TLS port, all for the whole run. The abuse runs on the same 2 cores as ebee-top. \
         drain: from the kernel closing an interval to its Batch. The last three \
         columns are ebee-top's own counters (`ebee_metrics_connections_closed_total`) at \
         the last scrape.\n"
    )?;
    table_head(
        &mut body,
        &[
            "mode",
            "intervals",
            "drain p50 ms",
            "drain p99 ms",
            "drain max ms",
            "scrapes",
            "missed",
            "scrape p50 ms",
            "scrape max ms",
            "wrong passwords /s",
            "answered 401",
            "let in",
            "plain HTTP sent",
            "answered with data",
            "TLS failures counted",
            "evicted",
            "refused 503",
        ],
    )?;
    let mut misses = Vec::new();
    for (name, abused) in [("tls", false), ("tls-abused", true)] {
        let report = dir.join(format!("{name}.json"));
        let r = run_once(seconds, abused, &web, &cfg, &report)?;
        let max = r.times.iter().copied().fold(f64::NAN, f64::max);
        let a = &r.abuse;
        let load = |x: &AtomicU64| x.load(Ordering::Relaxed);
        let abuse_cells = if abused {
            format!(
                "{:.0} | {} | {} | {} | {}",
                load(&a.wrong_sent) as f64 / r.seconds,
                load(&a.wrong_401),
                load(&a.wrong_leaked),
                load(&a.plain_sent),
                load(&a.plain_answered),
            )
        } else {
            "– | – | – | – | –".into()
        };
        let dropped = format!(
            "{} | {} | {}",
            closed(&r.last, "tls_failed"),
            closed(&r.last, "evicted"),
            closed(&r.last, "refused")
        );
        misses.extend(r.missed.iter().map(|m| format!("{name}: {m}")));
        writeln!(
            body,
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {abuse_cells} | {dropped} |",
            r.report["drain"]["count"],
            ms(&r.report["drain"]["p50_us"]),
            ms(&r.report["drain"]["p99_us"]),
            ms(&r.report["drain"]["max_us"]),
            r.times.len(),
            r.missed.len(),
            if r.times.is_empty() {
                "–".into()
            } else {
                format!("{:.2}", median(r.times.clone()))
            },
            if r.times.is_empty() {
                "–".into()
            } else {
                format!("{max:.2}")
            },
        )?;
    }
    writeln!(body)?;
    if !misses.is_empty() {
        writeln!(body, "Scrapes missed: {}.\n", misses.join("; "))?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    publish("metrics-tls", &body)
}
