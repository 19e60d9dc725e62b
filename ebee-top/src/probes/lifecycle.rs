//! Reading process exec/exit events from the lifecycle ring buffer.

use aya::maps::{MapData, RingBuf};
use ebee_shared::lifecycle::LifecycleEvent;

pub(super) struct LifecycleReader {
    ring: RingBuf<MapData>,
}

impl LifecycleReader {
    pub(super) fn new(ring: RingBuf<MapData>) -> Self {
        Self { ring }
    }

    /// Every event available now, oldest first.
    pub(super) fn read(&mut self) -> Vec<LifecycleEvent> {
        let mut out = Vec::new();
        while let Some(item) = self.ring.next() {
            if item.len() >= std::mem::size_of::<LifecycleEvent>() {
                // SAFETY: the kernel wrote a whole `LifecycleEvent` (plain old data) and the
                // length was checked; read_unaligned does not assume alignment.
                out.push(unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) });
            }
        }
        out
    }
}
