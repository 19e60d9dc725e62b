//! Recordings: a stream of Batches in a file (format in docs/recording-format.md), the writer
//! and the thread that keeps disk I/O off the drain and UI loops, and a reader that trusts
//! nothing in the file.

pub mod codec;
pub mod columns;
pub mod dir;
pub mod format;
pub mod rc;
pub mod reader;
pub mod recorder;
pub mod timeline;
pub mod writer;

use std::path::{Path, PathBuf};

pub use format::Meta;
pub use reader::{Damage, Reader};
pub use recorder::{RecStatus, Recorder, Tap};
pub use timeline::Timeline;
pub use writer::{RecordOptions, Writer};

/// A recording file that cannot be used. Each variant maps to an exit code (exit.rs).
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{}: no such file", .0.display())]
    Missing(PathBuf),
    #[error("{} is a directory, not a recording file", .0.display())]
    Directory(PathBuf),
    #[error("{} is a symbolic link; refusing to write through it (give the real path)", .0.display())]
    Symlink(PathBuf),
    #[error("{} is not a regular file", .0.display())]
    NotRegular(PathBuf),
    #[error("{} already exists; use --force to replace it", .0.display())]
    Exists(PathBuf),
    #[error("{} is empty: not an ebee-top recording", .0.display())]
    Empty(PathBuf),
    #[error("{} is not an ebee-top recording (its first bytes are not the recording magic)", .0.display())]
    NotRecording(PathBuf),
    #[error(
        "{} was written by a newer ebee-top (recording format {version}; this one reads up to {})",
        path.display(),
        format::VERSION
    )]
    Newer { path: PathBuf, version: u16 },
    #[error("{}: damaged recording header: {why}", path.display())]
    Corrupt { path: PathBuf, why: String },
    #[error("{}: holds no complete interval{}", path.display(), detail)]
    NoFrames { path: PathBuf, detail: String },
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Other {
        what: &'static str,
        source: codec::CodecError,
    },
}

impl RecordError {
    pub fn io(what: &'static str, path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            what,
            path: path.into(),
            source,
        }
    }

    pub fn io_other(what: &'static str, source: codec::CodecError) -> Self {
        Self::Other { what, source }
    }

    /// True when the file could not be opened or created as asked (exit code 6); the other
    /// cases are about what is in it.
    pub fn is_path_problem(&self) -> bool {
        matches!(
            self,
            Self::Missing(_)
                | Self::Directory(_)
                | Self::Symlink(_)
                | Self::NotRegular(_)
                | Self::Exists(_)
                | Self::Io { .. }
        )
    }
}

#[cfg(test)]
pub(crate) mod tests;
