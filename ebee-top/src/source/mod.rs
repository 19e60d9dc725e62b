//! Where Batches come from: the [`Source`] trait, and its two kinds. [`Live`] loads the eBPF
//! programs and drains the kernel every tick, adding what /proc knows of each process; a
//! recording ([`replay::Replay`]) reads them back from a file. Everything downstream of a Batch
//! is shared, and [`Tee`] records what a source gives, exactly as the Model receives it.

pub mod live;
pub mod replay;
mod tee;

use std::time::Duration;

use crate::batch::Batch;

pub use live::Live;
pub use tee::Tee;

/// A producer of closed intervals.
pub trait Source {
    /// Block until the next interval is closed. `None` when the source has no more.
    fn next_batch(&mut self) -> anyhow::Result<Option<Batch>>;
    /// Change the interval length (live sources only; others ignore it).
    fn set_interval(&mut self, interval: Duration) -> anyhow::Result<()>;
    /// Set the processes pinned for detailed tracking (live sources only).
    fn set_pins(&mut self, pids: &[u32]) -> anyhow::Result<()>;
    /// Turn the per-thread mode on or off (live sources only; a recording has the threads it
    /// was recorded with).
    fn set_threads(&mut self, on: bool) -> anyhow::Result<()>;
}
