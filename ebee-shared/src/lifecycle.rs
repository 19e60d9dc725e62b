//! Process lifecycle events (exec, exit) sent from the kernel through a ring buffer, so
//! short-lived processes keep their names and a reused pid never inherits a dead one's.

/// Ring buffer size for lifecycle events.
pub const LIFECYCLE_BYTES: u32 = 1 << 18;

/// Event kinds.
pub const EVENT_EXIT: u32 = 1;
pub const EVENT_EXEC: u32 = 2;

/// One lifecycle event.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LifecycleEvent {
    /// [`EVENT_EXIT`] or [`EVENT_EXEC`].
    pub kind: u32,
    /// Process id.
    pub tgid: u32,
    /// Thread id that triggered the event.
    pub pid: u32,
    /// Reserved, 0.
    pub flags: u32,
    /// `CLOCK_MONOTONIC` ns of the event.
    pub ts: u64,
    /// `comm` of the task at the event, NUL padded.
    pub comm: [u8; 16],
}
