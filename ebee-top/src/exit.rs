//! Exit codes, documented in the README. Every failure prints one line to stderr and exits
//! with one of these; none prints a backtrace.

/// Success.
pub const OK: i32 = 0;
/// A runtime failure not covered below (the message says what).
pub const FAILURE: i32 = 1;
/// Bad command-line usage (clap's own code).
pub const USAGE: i32 = 2;
/// Missing privileges to load eBPF (CAP_BPF + CAP_PERFMON, or root).
pub const NO_PRIVILEGE: i32 = 3;
/// The kernel lacks something ebee-top needs (BTF, a tracepoint).
pub const UNSUPPORTED: i32 = 4;
/// A process given with `-p` does not exist.
pub const NO_SUCH_PROCESS: i32 = 5;
/// A file named on the command line cannot be used as asked: missing, a directory, not a
/// regular file, a symlink to record through, or an existing file to record over without
/// --force.
pub const BAD_PATH: i32 = 6;
/// Not a readable recording: empty, not a recording (wrong magic), a damaged header, or no
/// complete interval in it.
pub const BAD_RECORDING: i32 = 7;
/// A recording written by a newer ebee-top (an unknown format version).
pub const NEWER_RECORDING: i32 = 8;

/// `--listen` cannot be used: the port is in use, the address is not this machine's, or
/// binding it is not allowed; for unix:PATH, something other than a stale socket is at PATH
/// (a live socket, a file, a directory, a symlink) or the socket cannot be made there.
pub const CANNOT_LISTEN: i32 = 9;
/// `--web-config` cannot be used: unreadable, not valid YAML, an unknown key, a certificate,
/// key or CA that does not load, a key that does not match its certificate, a hash not bcrypt.
pub const BAD_WEB_CONFIG: i32 = 10;

/// The flight recorder's folder (`serve --record-dir`) is a symlink, not a directory, not
/// writable, or another ebee-top records into it.
pub const BAD_RECORD_DIR: i32 = 11;

/// The exit code for an error, from the first typed cause in its chain.
pub fn code_for(err: &anyhow::Error) -> i32 {
    use crate::probes::{ProbeError, qos::PinError};
    for cause in err.chain() {
        if cause
            .downcast_ref::<crate::frontend::metrics::ListenError>()
            .is_some()
        {
            return CANNOT_LISTEN;
        }
        if cause
            .downcast_ref::<crate::frontend::metrics::web::WebConfigError>()
            .is_some()
        {
            return BAD_WEB_CONFIG;
        }
        if cause
            .downcast_ref::<crate::record::dir::DirError>()
            .is_some()
        {
            return BAD_RECORD_DIR;
        }
        if let Some(p) = cause.downcast_ref::<ProbeError>() {
            return match p {
                ProbeError::Permission => NO_PRIVILEGE,
                ProbeError::Unsupported(_) | ProbeError::NoObject => UNSUPPORTED,
                ProbeError::Pin(PinError::NoSuchProcess(_)) => NO_SUCH_PROCESS,
                ProbeError::Pin(PinError::TooMany(_)) => USAGE,
                ProbeError::Pin(PinError::Unsupported | PinError::Refused(_)) => UNSUPPORTED,
                ProbeError::Other(_) => FAILURE,
            };
        }
        if cause
            .downcast_ref::<crate::frontend::metrics::ListenGroupError>()
            .is_some()
        {
            return USAGE;
        }
        if cause
            .downcast_ref::<crate::frontend::live::NoSuchUser>()
            .is_some()
        {
            return USAGE;
        }
        if let Some(r) = cause.downcast_ref::<crate::record::RecordError>() {
            use crate::record::RecordError as R;
            return match r {
                R::Newer { .. } => NEWER_RECORDING,
                R::Other { .. } => FAILURE,
                r if r.is_path_problem() => BAD_PATH,
                _ => BAD_RECORDING,
            };
        }
    }
    FAILURE
}
