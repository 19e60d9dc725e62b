//! One slot of a per-CPU array read, and then cleared, every interval through a buffer kept
//! between drains. aya's `get` and `set` allocate every CPU's copy anew on each call, and a
//! sketch is kilobytes per CPU: with glibc's mmap threshold lowered for a steady resident size
//! (`os::residency`), each such buffer was a fresh mapping, page faults and zeroing, several
//! times an interval. Measured on a quiet machine at 50 ms: a fifth of ebee-top's own CPU.

use std::io;
use std::os::fd::AsFd as _;

use aya::maps::{IterableMap as _, MapData, MapError, PerCpuArray};

use super::sys;

/// Every CPU's copy of one value of a per-CPU array, back to back, reused from drain to drain.
pub(super) struct SlotBuf<V> {
    buf: Vec<V>,
    /// The map's value size was found to be `V`'s, a multiple of 8 (at the first read).
    checked: bool,
}

impl<V: aya::Pod + Default + Clone> SlotBuf<V> {
    /// A buffer for `ncpus` possible CPUs: the kernel copies one value per possible CPU, each
    /// padded to 8 bytes, so the values lie back to back when `V` is a multiple of 8 bytes.
    pub(super) fn new(ncpus: usize) -> Self {
        Self {
            buf: vec![V::default(); ncpus.max(1)],
            checked: false,
        }
    }

    fn check(&mut self, map: &PerCpuArray<MapData, V>) -> Result<(), MapError> {
        if self.checked {
            return Ok(());
        }
        let size = std::mem::size_of::<V>();
        let kernel = map.map().info()?.value_size() as usize;
        if !size.is_multiple_of(8) || kernel != size {
            return Err(MapError::from(io::Error::other(format!(
                "a per-CPU value of {size} bytes (the kernel's: {kernel}) cannot be read in place"
            ))));
        }
        self.checked = true;
        Ok(())
    }

    /// Read slot `key` of `map`, every CPU's copy.
    pub(super) fn read(
        &mut self,
        map: &PerCpuArray<MapData, V>,
        key: u32,
    ) -> Result<&[V], MapError> {
        self.check(map)?;
        // SAFETY: `buf` holds one `V` per possible CPU (the count aya's maps use) and `V`'s
        // size is the map's value size, a multiple of 8 (`check`): exactly the bytes the kernel
        // writes for a per-CPU lookup. Any bytes are a valid `V` (Pod).
        unsafe { sys::map_lookup_elem(map.map().fd().as_fd(), key, self.buf.as_mut_ptr().cast()) }
            .map_err(MapError::from)?;
        Ok(&self.buf)
    }

    /// Zero slot `key` of `map` on every CPU (the buffer is zeroed and written).
    pub(super) fn clear(
        &mut self,
        map: &PerCpuArray<MapData, V>,
        key: u32,
    ) -> Result<(), MapError> {
        self.check(map)?;
        self.buf.fill(V::default());
        // SAFETY: as in `read`: the buffer is exactly the kernel's per-CPU value layout.
        unsafe { sys::map_update_elem(map.map().fd().as_fd(), key, self.buf.as_ptr().cast()) }
            .map_err(MapError::from)
    }
}
