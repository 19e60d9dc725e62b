//! `--listen unix:PATH`: the metrics endpoint on a unix socket, for a collector on the same
//! machine. ebee-top usually runs as root, so the path is handled as an attacker might have
//! prepared it: a symlink there is never followed, a socket left by an earlier run is replaced
//! only when nobody listens on it, and anything else is refused. The socket is made in a
//! private folder (mode 0700) beside PATH, given its group and mode 0660 there, where nobody
//! else can swap it, and only then moved to PATH without replacing anything; so it is never
//! reachable with other rights. [`SocketFile`] removes it on exit if it is still ours.

use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{DirBuilderExt as _, FileTypeExt as _, MetadataExt as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use super::{LISTEN_BACKLOG, ListenError};
use crate::cli::{ListenAddr, MAX_UNIX_PATH};

/// Mode of the socket file: owner and group may connect (connecting needs write permission).
pub const SOCKET_MODE: u32 = 0o660;

/// The socket file ebee-top made; removed on drop if the path still names it (not one that
/// another run put there since).
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl SocketFile {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        let ours = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|m| m.file_type().is_socket() && m.dev() == self.dev && m.ino() == self.ino);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn refuse(path: &Path, why: impl Into<String>) -> ListenError {
    ListenError {
        addr: ListenAddr::Unix(path.to_owned()),
        why: why.into(),
    }
}

/// What is at `path` now, as far as binding there goes.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    Nothing,
    /// A socket nobody listens on (left by a run that was killed): (dev, ino).
    Stale(u64, u64),
}

/// Look at `path` without following it: nothing, a stale socket, or a refusal.
fn inspect(path: &Path) -> Result<Found, ListenError> {
    let m = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Found::Nothing),
        Err(e) => return Err(refuse(path, format!("cannot look at it: {e}"))),
    };
    let t = m.file_type();
    if t.is_symlink() {
        return Err(refuse(
            path,
            "a symbolic link is there, and ebee-top never follows one (remove it, or give the \
             real path)",
        ));
    }
    if !t.is_socket() {
        let what = if t.is_dir() {
            "a directory"
        } else if t.is_file() {
            "a regular file"
        } else {
            "a file that is not a socket"
        };
        return Err(refuse(
            path,
            format!(
                "{what} is there; ebee-top replaces only a socket left by an earlier run \
                 (remove it, or choose another path)"
            ),
        ));
    }
    // A socket: in use if something accepts a connection there.
    match UnixStream::connect(path) {
        Ok(_) => Err(refuse(
            path,
            "address already in use (another process listens on this socket)",
        )),
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => Ok(Found::Stale(m.dev(), m.ino())),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(Found::Nothing),
        // A full backlog (EAGAIN) means someone listens; anything else is not ours to judge.
        Err(e) if e.kind() == ErrorKind::WouldBlock => Err(refuse(
            path,
            "address already in use (another process listens on this socket)",
        )),
        Err(e) => Err(refuse(
            path,
            format!("a socket is there and cannot be checked: {e}"),
        )),
    }
}

/// The private folder the socket is made in, removed (with what is left in it) on drop.
struct Staging {
    dir: PathBuf,
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.dir.join("s"));
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Bind a unix socket at `path`, mode 0660 and group `gid` (else the group we run as),
/// listening with the endpoint's backlog.
pub fn bind(path: &Path, gid: Option<u32>) -> Result<(UnixListener, SocketFile), ListenError> {
    let found = inspect(path)?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = parent.join(format!(".ebee-top.{}.{nanos}", std::process::id()));
    let tmp = dir.join("s");
    if tmp.as_os_str().as_bytes().len() > MAX_UNIX_PATH {
        return Err(refuse(
            path,
            format!(
                "its folder's path is too long (the socket is made in a folder beside it, and \
                 that path must fit in {MAX_UNIX_PATH} bytes)"
            ),
        ));
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| {
            refuse(
                path,
                format!("cannot make a folder in {}: {e}", parent.display()),
            )
        })?;
    let staging = Staging { dir };
    let listener =
        UnixListener::bind(&tmp).map_err(|e| refuse(path, format!("cannot bind: {e}")))?;
    {
        use std::os::fd::AsRawFd as _;
        // SAFETY: listen(2) on a socket we own that stays open: it only raises the backlog
        // from std's 128, as for TCP.
        unsafe { libc::listen(listener.as_raw_fd(), LISTEN_BACKLOG) };
    }
    // In the private folder nobody else can put a symlink in the socket's place, so changing
    // it by path is safe here (and not once it is at PATH).
    if let Some(g) = gid {
        std::os::unix::fs::chown(&tmp, None, Some(g)).map_err(|e| {
            refuse(
                path,
                format!(
                    "cannot give the socket to group {g}: {e} (only root, or a member of it, may)"
                ),
            )
        })?;
    }
    std::fs::set_permissions(
        &tmp,
        std::os::unix::fs::PermissionsExt::from_mode(SOCKET_MODE),
    )
    .map_err(|e| refuse(path, format!("cannot set the socket's mode: {e}")))?;
    let m = std::fs::symlink_metadata(&tmp)
        .map_err(|e| refuse(path, format!("cannot look at the new socket: {e}")))?;
    if let Found::Stale(dev, ino) = found {
        // Remove the stale socket only if it is still the one found; a socket, a file or a
        // link put there since is left alone (the move below then fails).
        let same = std::fs::symlink_metadata(path)
            .is_ok_and(|n| n.file_type().is_socket() && n.dev() == dev && n.ino() == ino);
        if same {
            std::fs::remove_file(path)
                .map_err(|e| refuse(path, format!("cannot remove the stale socket: {e}")))?;
        }
    }
    move_no_replace(&tmp, path).map_err(|e| {
        if e.kind() == ErrorKind::AlreadyExists {
            refuse(
                path,
                "something was put there while ebee-top bound it; try again",
            )
        } else {
            refuse(path, format!("cannot put the socket there: {e}"))
        }
    })?;
    drop(staging);
    // Relative paths are kept as given: ebee-top never changes its working folder.
    Ok((
        listener,
        SocketFile {
            path: path.to_owned(),
            dev: m.dev(),
            ino: m.ino(),
        },
    ))
}

/// rename(2) that fails instead of replacing what is at `to` (renameat2 RENAME_NOREPLACE).
fn move_no_replace(from: &Path, to: &Path) -> std::io::Result<()> {
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::new(ErrorKind::InvalidInput, "a NUL byte in the path"))
    };
    let (from, to) = (c(from)?, c(to)?);
    // SAFETY: two NUL-terminated paths that outlive the call; AT_FDCWD resolves them as
    // rename(2) would.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn egid() -> u32 {
        // SAFETY: getegid has no preconditions.
        unsafe { libc::getegid() }
    }

    #[test]
    fn made_0660_with_its_group_and_removed_on_drop() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("m.sock");
        let (l, f) = bind(&p, Some(egid())).unwrap();
        let m = std::fs::symlink_metadata(&p).unwrap();
        assert!(m.file_type().is_socket());
        assert_eq!(m.permissions().mode() & 0o7777, SOCKET_MODE);
        assert_eq!(m.gid(), egid());
        // Nothing left beside it: the private folder is gone.
        let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "{names:?}");
        // It is the listening socket (renamed after bind).
        let mut c = UnixStream::connect(&p).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        drop(f);
        assert!(!p.exists(), "removed on drop");
    }

    #[test]
    fn a_stale_socket_is_replaced_a_live_one_is_not() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("m.sock");
        // Left by a killed run: the file stays, nobody listens.
        drop(UnixListener::bind(&p).unwrap());
        assert!(p.exists());
        let (_l, f) = bind(&p, None).unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777,
            SOCKET_MODE
        );
        // Now it is live: a second run is refused, and leaves it alone.
        let e = bind(&p, None).unwrap_err();
        assert!(e.to_string().contains("already in use"), "{e}");
        assert!(UnixStream::connect(&p).is_ok());
        // A socket another run put there since is not removed with ours.
        std::fs::remove_file(&p).unwrap();
        drop(UnixListener::bind(&p).unwrap());
        drop(f);
        assert!(p.exists(), "not ours: kept");
    }

    #[test]
    fn anything_else_is_refused_and_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("file");
        std::fs::write(&file, "precious").unwrap();
        let e = bind(&file, None).unwrap_err().to_string();
        assert!(e.contains("a regular file is there"), "{e}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "precious");
        let dir = d.path().join("dir");
        std::fs::create_dir(&dir).unwrap();
        let e = bind(&dir, None).unwrap_err().to_string();
        assert!(e.contains("a directory is there"), "{e}");
        // A symlink, to a stale socket or anything else, is never followed nor replaced.
        let stale = d.path().join("stale.sock");
        drop(UnixListener::bind(&stale).unwrap());
        let link = d.path().join("link.sock");
        std::os::unix::fs::symlink(&stale, &link).unwrap();
        let e = bind(&link, None).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        let e = bind(&d.path().join("nowhere/m.sock"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot make a folder"), "{e}");
        // Nothing was left behind by the refusals.
        let mut names: Vec<String> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["dir", "file", "link.sock", "stale.sock"]);
    }
}
