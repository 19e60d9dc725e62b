//! `--web-config FILE`: the Prometheus exporter toolkit's web configuration (the file
//! node_exporter reads with `--web.config.file`), so ebee-top joins a fleet's TLS and basic auth
//! as its other exporters do. [`Web::load`] reads and checks it all at start (a broken file is
//! one line and exit code 10); [`Web::current`], called for each new connection, re-reads the
//! file, certificate, key and CA when one of them changed on disk, and keeps serving the last
//! good configuration (counted) when the new one does not load.
//!
//! Basic auth: credentials are checked with bcrypt (constant-time) on the runtime's one
//! blocking thread, never on the thread that serves scrapes, and at most [`MAX_QUEUED_CHECKS`]
//! wait there; the verdict is cached per credential (by its SHA-256, compared in constant
//! time), so a scraper's credential costs one bcrypt and a flood of wrong ones cannot push it
//! out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use base64::Engine as _;
use hyper::header::{HeaderName, HeaderValue};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use serde::Deserialize;
use tokio::sync::Semaphore;

/// Credential checks waiting for bcrypt at most; beyond, a request is refused unchecked.
pub const MAX_QUEUED_CHECKS: usize = 8;
/// Verdicts cached: right credentials (only a right password adds one) and wrong ones.
const MAX_GOOD: usize = 64;
const MAX_BAD: usize = 1024;

/// `--web-config` cannot be used (exit code 10).
#[derive(Debug, thiserror::Error)]
#[error("web config {}: {why}", path.display())]
pub struct WebConfigError {
    pub path: PathBuf,
    why: String,
}

fn bad(path: &Path, why: impl Into<String>) -> WebConfigError {
    WebConfigError {
        path: path.to_owned(),
        why: why.into(),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    tls_server_config: Option<TlsFile>,
    http_server_config: Option<HttpFile>,
    basic_auth_users: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    client_auth_type: Option<String>,
    client_ca_file: Option<PathBuf>,
    min_version: Option<String>,
    max_version: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpFile {
    headers: Option<BTreeMap<String, String>>,
    http2: Option<bool>,
}

/// The headers the toolkit lets a web config set (others are an error there and here).
const ALLOWED_HEADERS: &[&str] = &[
    "content-security-policy",
    "x-frame-options",
    "x-content-type-options",
    "x-xss-protection",
    "strict-transport-security",
];

/// One loaded configuration, as connections use it.
pub struct Active {
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    pub auth: Option<Auth>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl Active {
    /// No web config: plain HTTP, no auth, no extra headers.
    pub fn plain() -> Self {
        Self {
            tls: None,
            auth: None,
            headers: Vec::new(),
        }
    }
}

/// Modification time and size of each file a configuration was read from.
type Stamp = Vec<Option<(SystemTime, u64)>>;

fn stamp(files: &[PathBuf]) -> Stamp {
    files
        .iter()
        .map(|f| {
            let m = std::fs::metadata(f).ok()?;
            Some((m.modified().ok()?, m.len()))
        })
        .collect()
}

struct Loaded {
    files: Vec<PathBuf>,
    stamp: Stamp,
    active: Arc<Active>,
}

/// The web config file and what was last loaded from it.
pub struct Web {
    path: PathBuf,
    loaded: Mutex<Loaded>,
    /// Changes on disk that did not load (the previous configuration stayed in use).
    pub reload_errors: AtomicU64,
}

impl std::fmt::Debug for Web {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Web").field("path", &self.path).finish()
    }
}

impl Web {
    /// Read and check the whole configuration: YAML, keys, certificate, key, CA, hashes.
    pub fn load(path: &Path) -> Result<Self, WebConfigError> {
        let (files, active) = read(path)?;
        Ok(Self {
            path: path.to_owned(),
            loaded: Mutex::new(Loaded {
                stamp: stamp(&files),
                files,
                active: Arc::new(active),
            }),
            reload_errors: AtomicU64::new(0),
        })
    }

    /// Whether connections are served over TLS.
    pub fn tls(&self) -> bool {
        self.current().tls.is_some()
    }

    /// The configuration for a new connection, re-read first if a file it came from changed.
    pub fn current(&self) -> Arc<Active> {
        let mut l = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        let now = stamp(&l.files);
        if now != l.stamp {
            // Whatever happens, this version of the files is not tried again.
            l.stamp = now;
            match read(&self.path) {
                Ok((files, active)) => {
                    l.stamp = stamp(&files);
                    l.files = files;
                    l.active = Arc::new(active);
                }
                Err(_) => {
                    self.reload_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        l.active.clone()
    }
}

/// The files a configuration depends on, and the configuration.
fn read(path: &Path) -> Result<(Vec<PathBuf>, Active), WebConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| bad(path, e.to_string()))?;
    let file: FileConfig = if text.trim().is_empty() {
        FileConfig::default()
    } else {
        serde_yaml::from_str(&text).map_err(|e| bad(path, e.to_string()))?
    };
    // As the toolkit does: relative paths are relative to the config file's folder.
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut files = vec![path.to_owned()];
    let tls = match file.tls_server_config {
        Some(t) => Some(tls_config(path, dir, t, &mut files)?),
        None => None,
    };
    let mut headers = Vec::new();
    if let Some(h) = file.http_server_config {
        if h.http2 == Some(true) {
            return Err(bad(
                path,
                "http_server_config.http2: true is not supported (HTTP/1.1 only)",
            ));
        }
        for (name, value) in h.headers.unwrap_or_default() {
            let lower = name.to_ascii_lowercase();
            if !ALLOWED_HEADERS.contains(&lower.as_str()) {
                return Err(bad(
                    path,
                    format!(
                        "http_server_config.headers: {name} may not be set (allowed: {})",
                        ALLOWED_HEADERS.join(", ")
                    ),
                ));
            }
            let n =
                HeaderName::from_bytes(lower.as_bytes()).map_err(|e| bad(path, e.to_string()))?;
            let v = HeaderValue::from_str(&value).map_err(|_| {
                bad(
                    path,
                    format!("http_server_config.headers.{name}: not a valid header value"),
                )
            })?;
            headers.push((n, v));
        }
    }
    let auth = match file.basic_auth_users {
        Some(users) if !users.is_empty() => Some(Auth::new(path, users)?),
        _ => None,
    };
    Ok((
        files,
        Active {
            tls: tls.map(|c| tokio_rustls::TlsAcceptor::from(Arc::new(c))),
            auth,
            headers,
        },
    ))
}

fn version(
    path: &Path,
    key: &str,
    v: &str,
) -> Result<&'static rustls::SupportedProtocolVersion, WebConfigError> {
    match v {
        "TLS12" => Ok(&rustls::version::TLS12),
        "TLS13" => Ok(&rustls::version::TLS13),
        "TLS10" | "TLS11" => Err(bad(
            path,
            format!("tls_server_config.{key}: {v} is not supported (TLS12 or TLS13)"),
        )),
        _ => Err(bad(
            path,
            format!("tls_server_config.{key}: unknown TLS version {v:?} (TLS12 or TLS13)"),
        )),
    }
}

fn tls_config(
    path: &Path,
    dir: &Path,
    t: TlsFile,
    files: &mut Vec<PathBuf>,
) -> Result<ServerConfig, WebConfigError> {
    let (Some(cert), Some(key)) = (t.cert_file, t.key_file) else {
        return Err(bad(
            path,
            "tls_server_config needs both cert_file and key_file",
        ));
    };
    let cert = dir.join(cert);
    let key = dir.join(key);
    files.push(cert.clone());
    files.push(key.clone());
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert)
        .and_then(|i| i.collect())
        .map_err(|e| bad(path, format!("cert_file {}: {e}", cert.display())))?;
    if chain.is_empty() {
        return Err(bad(
            path,
            format!("cert_file {}: no certificate in it", cert.display()),
        ));
    }
    let key_der = PrivateKeyDer::from_pem_file(&key)
        .map_err(|e| bad(path, format!("key_file {}: {e}", key.display())))?;
    let min = version(
        path,
        "min_version",
        t.min_version.as_deref().unwrap_or("TLS12"),
    )?;
    let max = version(
        path,
        "max_version",
        t.max_version.as_deref().unwrap_or("TLS13"),
    )?;
    let versions: Vec<&'static rustls::SupportedProtocolVersion> =
        [&rustls::version::TLS12, &rustls::version::TLS13]
            .into_iter()
            .filter(|v| {
                let n = |x: &rustls::SupportedProtocolVersion| u16::from(x.version);
                n(v) >= n(min) && n(v) <= n(max)
            })
            .collect();
    if versions.is_empty() {
        return Err(bad(
            path,
            "tls_server_config: min_version is above max_version",
        ));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| bad(path, e.to_string()))?;
    let auth_type = t.client_auth_type.as_deref().unwrap_or("NoClientCert");
    let builder = match auth_type {
        "" | "NoClientCert" => {
            if t.client_ca_file.is_some() {
                return Err(bad(
                    path,
                    "tls_server_config: client_ca_file is set but client_auth_type is NoClientCert",
                ));
            }
            builder.with_no_client_auth()
        }
        "RequireAndVerifyClientCert" | "VerifyClientCertIfGiven" => {
            let Some(ca) = t.client_ca_file else {
                return Err(bad(
                    path,
                    format!("tls_server_config: client_auth_type {auth_type} needs client_ca_file"),
                ));
            };
            let ca = dir.join(ca);
            files.push(ca.clone());
            let mut roots = RootCertStore::empty();
            let cas: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&ca)
                .and_then(|i| i.collect())
                .map_err(|e| bad(path, format!("client_ca_file {}: {e}", ca.display())))?;
            for c in cas {
                roots
                    .add(c)
                    .map_err(|e| bad(path, format!("client_ca_file {}: {e}", ca.display())))?;
            }
            if roots.is_empty() {
                return Err(bad(
                    path,
                    format!("client_ca_file {}: no certificate in it", ca.display()),
                ));
            }
            let v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let v = if auth_type == "VerifyClientCertIfGiven" {
                v.allow_unauthenticated()
            } else {
                v
            };
            let v = v
                .build()
                .map_err(|e| bad(path, format!("client_ca_file {}: {e}", ca.display())))?;
            builder.with_client_cert_verifier(v)
        }
        "RequestClientCert" | "RequireAnyClientCert" => {
            return Err(bad(
                path,
                format!(
                    "tls_server_config.client_auth_type: {auth_type} (a certificate nobody \
                     verifies) is not supported: use RequireAndVerifyClientCert or \
                     VerifyClientCertIfGiven"
                ),
            ));
        }
        other => {
            return Err(bad(
                path,
                format!("tls_server_config.client_auth_type: unknown {other:?}"),
            ));
        }
    };
    let mut config = builder.with_single_cert(chain, key_der).map_err(|e| {
        bad(
            path,
            format!(
                "cert_file {} with key_file {}: {e}",
                cert.display(),
                key.display()
            ),
        )
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A credential's SHA-256 (user, a NUL, password), the key of the verdict caches.
type Digest = [u8; 32];

fn digest(user: &str, pass: &str) -> Digest {
    let mut c = ring::digest::Context::new(&ring::digest::SHA256);
    c.update(user.as_bytes());
    c.update(&[0]);
    c.update(pass.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(c.finish().as_ref());
    out
}

/// Whether `d` is in `set`, comparing every byte of every entry whatever matches.
fn contains(set: &[Digest], d: &Digest) -> bool {
    let mut found = 0u8;
    for e in set {
        let mut diff = 0u8;
        for (a, b) in e.iter().zip(d) {
            diff |= a ^ b;
        }
        found |= u8::from(diff == 0);
    }
    found == 1
}

#[derive(Default)]
struct Verdicts {
    good: Vec<Digest>,
    bad: Vec<Digest>,
}

/// `basic_auth_users`: user names and their bcrypt hashes, with the verdicts cached.
pub struct Auth {
    users: BTreeMap<String, String>,
    /// A hash checked for an unknown user, so that answering takes as long as for a known one.
    decoy: String,
    verdicts: Arc<Mutex<Verdicts>>,
    queue: Arc<Semaphore>,
}

impl Auth {
    fn new(path: &Path, users: BTreeMap<String, String>) -> Result<Self, WebConfigError> {
        for (user, hash) in &users {
            hash.parse::<bcrypt::HashParts>().map_err(|_| {
                bad(
                    path,
                    format!(
                        "basic_auth_users.{user}: not a bcrypt hash (make one with \
                         htpasswd -nBC 10 {user})"
                    ),
                )
            })?;
        }
        // Checking a password against a real user's hash takes as long as a real check, and
        // its verdict is ignored.
        let decoy = users.values().next().cloned().unwrap_or_default();
        Ok(Self {
            users,
            decoy,
            verdicts: Arc::default(),
            queue: Arc::new(Semaphore::new(MAX_QUEUED_CHECKS)),
        })
    }

    /// Whether an `Authorization` header carries a right credential. bcrypt runs on the
    /// blocking pool; with [`MAX_QUEUED_CHECKS`] already waiting the answer is no, unchecked.
    pub async fn allows(&self, header: Option<&HeaderValue>) -> bool {
        let Some((user, pass)) = header.and_then(basic) else {
            return false;
        };
        let d = digest(&user, &pass);
        {
            let v = self.verdicts.lock().unwrap_or_else(PoisonError::into_inner);
            if contains(&v.good, &d) {
                return true;
            }
            if contains(&v.bad, &d) {
                return false;
            }
        }
        let Ok(permit) = self.queue.clone().try_acquire_owned() else {
            return false;
        };
        let (hash, known) = match self.users.get(&user) {
            Some(h) => (h.clone(), true),
            None => (self.decoy.clone(), false),
        };
        let verdicts = self.verdicts.clone();
        let checked = tokio::task::spawn_blocking(move || {
            let ok = bcrypt::verify(pass.as_bytes(), &hash).unwrap_or(false) && known;
            let mut v = verdicts.lock().unwrap_or_else(PoisonError::into_inner);
            let list = if ok { &mut v.good } else { &mut v.bad };
            let max = if ok { MAX_GOOD } else { MAX_BAD };
            if list.len() >= max {
                list.clear();
            }
            list.push(d);
            drop(permit);
            ok
        })
        .await;
        checked.unwrap_or(false)
    }
}

/// User and password of a `Basic` credential.
fn basic(h: &HeaderValue) -> Option<(String, String)> {
    let s = h.to_str().ok()?;
    let (scheme, b64) = s.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (u, p) = text.split_once(':')?;
    Some((u.to_owned(), p.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(yaml: &str) -> Result<Web, WebConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("web.yml");
        std::fs::write(&p, yaml).unwrap();
        Web::load(&p)
    }

    #[test]
    fn unknown_keys_and_bad_values_are_one_line_errors_naming_them() {
        for (yaml, want) in [
            (
                "tls_server_config:\n  cert_fil: x\n",
                "unknown field `cert_fil`",
            ),
            (
                "basic_auth_user:\n  a: b\n",
                "unknown field `basic_auth_user`",
            ),
            (
                "http_server_config:\n  headers:\n    Server: x\n",
                "Server may not be set",
            ),
            (
                "basic_auth_users:\n  alice: plaintext\n",
                "alice: not a bcrypt hash",
            ),
            (
                "tls_server_config:\n  cert_file: c.pem\n",
                "needs both cert_file and key_file",
            ),
            (
                "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n",
                "c.pem",
            ),
            ("tls_server_config: [\n", "web.yml"),
        ] {
            let e = load(yaml)
                .err()
                .unwrap_or_else(|| panic!("{yaml:?} loaded"));
            let m = e.to_string();
            assert!(m.contains(want), "{yaml:?}: {m}");
            assert!(!m.contains('\n'), "one line: {m}");
        }
        let e = Web::load(Path::new("/nonexistent/web.yml")).err().unwrap();
        assert!(e.to_string().contains("/nonexistent/web.yml"), "{e}");
    }

    #[test]
    fn an_empty_file_or_headers_alone_serve_plain_http() {
        let w = load("").unwrap();
        assert!(!w.tls() && w.current().auth.is_none());
        let w = load("http_server_config:\n  headers:\n    X-Frame-Options: deny\n").unwrap();
        let a = w.current();
        assert_eq!(a.headers.len(), 1);
        assert_eq!(a.headers[0].0, "x-frame-options");
    }

    #[test]
    fn credentials_are_checked_with_bcrypt_and_cached() {
        // Cost 4: the smallest bcrypt allows, for a quick test.
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let w = load(&format!("basic_auth_users:\n  alice: '{hash}'\n")).unwrap();
        let a = w.current();
        let auth = a.auth.as_ref().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let h = |user: &str, pass: &str| {
            let b = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
            HeaderValue::from_str(&format!("Basic {b}")).unwrap()
        };
        rt.block_on(async {
            assert!(auth.allows(Some(&h("alice", "s3cret"))).await);
            assert!(!auth.allows(Some(&h("alice", "wrong"))).await);
            assert!(!auth.allows(Some(&h("bob", "s3cret"))).await);
            assert!(!auth.allows(None).await);
            assert!(
                !auth
                    .allows(Some(&HeaderValue::from_static("Bearer x")))
                    .await
            );
            // Cached: a second time needs no bcrypt (a full queue would refuse a check).
            let _held = auth
                .queue
                .clone()
                .acquire_many_owned(MAX_QUEUED_CHECKS as u32)
                .await
                .unwrap();
            assert!(auth.allows(Some(&h("alice", "s3cret"))).await);
            assert!(
                !auth.allows(Some(&h("alice", "other"))).await,
                "no check, no"
            );
        });
    }

    #[test]
    fn constant_time_membership() {
        let a = [1u8; 32];
        let mut b = a;
        b[31] = 2;
        assert!(contains(&[b, a], &a));
        assert!(!contains(&[b], &a));
        assert!(!contains(&[], &a));
    }
}
