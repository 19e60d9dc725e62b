//! The Recorder: a thread that owns the Writer, so neither the drain loop nor the UI loop ever
//! waits on the disk. Batches reach it through a bounded queue; when the disk falls that far
//! behind, intervals are dropped from the recording (counted and shown), never from the screen.

use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::thread::JoinHandle;

use std::path::Path;

use super::RecordError;
use super::writer::{Appended, Writer};
use crate::batch::Batch;

/// Where a Recorder writes: one file (`--record`, with its own rotation) or the flight
/// recorder's folder (`serve --record-dir`).
pub trait Sink: Send {
    /// Append one interval.
    fn append(&mut self, b: &Batch) -> Result<Appended, RecordError>;
    /// The file being written.
    fn path(&self) -> &Path;
    /// Bytes in the file being written.
    fn bytes(&self) -> u64;
    /// Intervals written, all files.
    fn records(&self) -> u64;
    /// Flush everything to the disk.
    fn sync(&mut self) -> Result<(), RecordError>;
}

impl Sink for Writer {
    fn append(&mut self, b: &Batch) -> Result<Appended, RecordError> {
        Writer::append(self, b)
    }
    fn path(&self) -> &Path {
        Writer::path(self)
    }
    fn bytes(&self) -> u64 {
        Writer::len(self)
    }
    fn records(&self) -> u64 {
        Writer::records(self)
    }
    fn sync(&mut self) -> Result<(), RecordError> {
        Writer::sync(self)
    }
}

/// Batches queued for the disk before new ones are dropped (5 s at the default 50 ms).
pub const QUEUE: usize = 100;

/// Where the recording stands; sent to whoever shows it after every change.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecStatus {
    pub path: String,
    /// Intervals written, all files.
    pub records: u64,
    /// Bytes in the current file.
    pub bytes: u64,
    /// Intervals not recorded because the queue to the disk was full.
    pub dropped: u64,
    /// Files rotated so far.
    pub rotations: u32,
    /// Set once recording has stopped (file full, write error), with the reason.
    pub stopped: Option<String>,
}

impl RecStatus {
    /// One line for the screen or stderr.
    pub fn line(&self) -> String {
        let mb = self.bytes as f64 / (1024.0 * 1024.0);
        let mut s = match &self.stopped {
            Some(why) => format!("recording stopped: {why}"),
            None => format!("REC {}  {} intervals  {mb:.1} MiB", self.path, self.records),
        };
        if self.rotations > 0 {
            s.push_str(&format!("  {} rotations", self.rotations));
        }
        if self.dropped > 0 {
            s.push_str(&format!(
                "  {} intervals not recorded (disk too slow)",
                self.dropped
            ));
        }
        s
    }
}

enum Cmd {
    Batch(Box<Batch>),
    Stop,
}

/// Handle to the recording thread.
pub struct Recorder {
    tx: SyncSender<Cmd>,
    dropped: std::sync::Arc<std::sync::atomic::AtomicU64>,
    handle: Option<JoinHandle<RecStatus>>,
}

/// Called from the recording thread with the new status: after a stop, a rotation or a drop
/// at once, and otherwise at most every `NOTIFY_EVERY` records.
pub type Notify = Box<dyn FnMut(&RecStatus) + Send>;

/// Records between routine status notifications.
const NOTIFY_EVERY: u64 = 20;

impl Recorder {
    /// Start the thread that writes through `w`.
    pub fn start(mut w: impl Sink + 'static, mut notify: Notify) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::sync_channel::<Cmd>(QUEUE);
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let dropped_t = dropped.clone();
        let handle = std::thread::Builder::new()
            .name("recorder".into())
            .spawn(move || {
                let mut st = RecStatus {
                    path: Sink::path(&w).display().to_string(),
                    bytes: w.bytes(),
                    ..Default::default()
                };
                let mut last_dropped = 0;
                while let Ok(Cmd::Batch(b)) = rx.recv() {
                    let r = w.append(&b);
                    st.records = w.records();
                    st.bytes = w.bytes();
                    st.dropped = dropped_t.load(std::sync::atomic::Ordering::Relaxed);
                    let mut now = st.dropped != last_dropped;
                    last_dropped = st.dropped;
                    match r {
                        Ok(Appended::Written) => {}
                        Ok(Appended::Rotated) => {
                            st.rotations += 1;
                            // The flight recorder's new file has a name of its own.
                            st.path = Sink::path(&w).display().to_string();
                            now = true;
                        }
                        Ok(Appended::Full) => {
                            st.stopped = Some(format!(
                                "{} reached --record-max-size ({} intervals, {} bytes); \
                                 monitoring goes on",
                                st.path, st.records, st.bytes
                            ));
                        }
                        Err(e) => {
                            st.stopped = Some(format!(
                                "{e} ({} intervals kept); monitoring goes on",
                                st.records
                            ));
                        }
                    }
                    if st.stopped.is_some() {
                        break;
                    }
                    if now || st.records % NOTIFY_EVERY == 1 {
                        notify(&st);
                    }
                }
                let _ = w.sync();
                if st.stopped.is_some() {
                    notify(&st);
                }
                st
            })?;
        Ok(Self {
            tx,
            dropped,
            handle: Some(handle),
        })
    }

    /// A handle that queues batches for this recorder (for the thread that produces them).
    pub fn tap(&self) -> Tap {
        Tap {
            tx: self.tx.clone(),
            dropped: self.dropped.clone(),
        }
    }

    /// Write what is queued, sync, and return the final status.
    pub fn finish(mut self) -> RecStatus {
        self.stop()
    }

    fn stop(&mut self) -> RecStatus {
        let _ = self.tx.send(Cmd::Stop);
        match self.handle.take().map(JoinHandle::join) {
            Some(Ok(st)) => st,
            _ => RecStatus::default(),
        }
    }
}

/// Queues batches for a Recorder; cheap to clone, never blocks.
#[derive(Clone)]
pub struct Tap {
    tx: SyncSender<Cmd>,
    dropped: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Tap {
    /// Queue a copy of `b` for the disk.
    pub fn record(&self, b: &Batch) {
        match self.tx.try_send(Cmd::Batch(Box::new(b.clone()))) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.dropped
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            // The thread stopped (file full, write error, finish) and said why.
            Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if self.handle.is_some() {
            self.stop();
        }
    }
}
