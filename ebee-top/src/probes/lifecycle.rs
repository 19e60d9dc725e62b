//! Reading process exec/exit events from the lifecycle ring buffer.

use aya::{
    Ebpf,
    maps::{MapData, RingBuf},
};
use ebee_shared::{lifecycle::LifecycleEvent, map_names};

use super::{ProbeError, take_map};

pub(super) struct LifecycleReader {
    ring: RingBuf<MapData>,
}

impl LifecycleReader {
    /// Take the lifecycle ring out of the object.
    pub(super) fn take(ebpf: &mut Ebpf) -> Result<Self, ProbeError> {
        let ring = take_map(ebpf, map_names::LIFECYCLE, RingBuf::try_from)?;
        Ok(Self { ring })
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
