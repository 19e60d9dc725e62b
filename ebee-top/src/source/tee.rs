//! A Source whose every interval is also recorded, exactly as the Model receives it: the live
//! source wrapped when `--record` is given.

use crate::batch::Batch;
use crate::record::Tap;

use super::Source;

/// A Source whose every batch is also recorded, exactly as the Model receives it.
pub struct Tee<S> {
    pub inner: S,
    pub tap: Tap,
}

impl<S: Source> Source for Tee<S> {
    fn next_batch(&mut self) -> anyhow::Result<Option<Batch>> {
        let b = self.inner.next_batch()?;
        if let Some(b) = &b {
            self.tap.record(b);
        }
        Ok(b)
    }

    fn set_interval(&mut self, interval: std::time::Duration) -> anyhow::Result<()> {
        self.inner.set_interval(interval)
    }

    fn set_threads(&mut self, on: bool) -> anyhow::Result<()> {
        self.inner.set_threads(on)
    }

    fn set_pins(&mut self, pids: &[u32]) -> anyhow::Result<()> {
        self.inner.set_pins(pids)
    }
}
