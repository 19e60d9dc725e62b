//! One slot of a per-CPU array read, and then cleared, every interval through a buffer kept
//! between drains. aya's `get` and `set` allocate every CPU's copy anew on each call, and a
//! sketch is kilobytes per CPU: with glibc's mmap threshold lowered for a steady resident size
//! (`os::residency`), each such buffer was a fresh mapping, page faults and zeroing, several
//! times an interval. Measured on a quiet machine at 50 ms: a fifth of ebee-top's own CPU.

use std::io;
use std::os::fd::AsFd as _;
use std::sync::OnceLock;

use aya::maps::{IterableMap as _, MapData, MapError, PerCpuArray};

use super::sys;

/// Every CPU's copy of one value of a per-CPU array, back to back, reused from drain to drain.
pub(super) struct SlotBuf<V> {
    buf: Vec<V>,
    /// What a clear writes, kept from drain to drain: refilling `buf` with `V::default()` before
    /// every clear was a memset of every sketch on every CPU, a sixth of batch mode's
    /// instructions. The zeros shared by every buffer when `V::default()` is all zero bytes
    /// (every sketch's is), else a copy of its own.
    clear_with: Clear<V>,
    /// The map's value size was found to be `V`'s, a multiple of 8 (at the first read).
    checked: bool,
}

enum Clear<V> {
    Zeros(&'static [u64]),
    Own(Vec<V>),
}

/// Zero bytes enough for `bytes`, shared by every buffer and never written: 32 KiB (the most
/// a per-CPU value may hold) for each of `ncpus` CPUs, or `bytes` if more. Allocated zeroed
/// (calloc), at or above glibc's mmap threshold as `os::residency` sets it it is a fresh
/// mapping that is only ever read, so its pages stay the kernel's shared zero page rather than
/// memory of ours.
fn zeros(ncpus: usize, bytes: usize) -> Option<&'static [u64]> {
    static ZEROS: OnceLock<Vec<u64>> = OnceLock::new();
    let words = bytes.div_ceil(8);
    let z = ZEROS.get_or_init(|| vec![0u64; (32 * 1024 / 8 * ncpus.max(1)).max(words)]);
    z.get(..words)
}

impl<V: aya::Pod + Default + Clone> SlotBuf<V> {
    /// A buffer for `ncpus` possible CPUs: the kernel copies one value per possible CPU, each
    /// padded to 8 bytes, so the values lie back to back when `V` is a multiple of 8 bytes.
    pub(super) fn new(ncpus: usize) -> Self {
        let n = ncpus.max(1);
        let dflt = V::default();
        // SAFETY: `dflt` is a live `V`, and `V: Pod` has no bytes that may not be read.
        let bytes = unsafe {
            std::slice::from_raw_parts((&raw const dflt).cast::<u8>(), std::mem::size_of::<V>())
        };
        let shared = if bytes.iter().all(|&b| b == 0) {
            zeros(n, std::mem::size_of::<V>() * n)
        } else {
            None
        };
        let clear_with = shared.map_or_else(|| Clear::Own(vec![V::default(); n]), Clear::Zeros);
        Self {
            buf: vec![V::default(); n],
            clear_with,
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

    /// Set slot `key` of `map` to `V::default()` on every CPU.
    pub(super) fn clear(
        &mut self,
        map: &PerCpuArray<MapData, V>,
        key: u32,
    ) -> Result<(), MapError> {
        self.check(map)?;
        let src: *const u8 = match &self.clear_with {
            Clear::Zeros(z) => z.as_ptr().cast(),
            Clear::Own(v) => v.as_ptr().cast(),
        };
        // SAFETY: the kernel reads one value per possible CPU, `size_of::<V>()` bytes each
        // (`check`), back to back: `Own` holds that many `V`s, and `Zeros` was taken at least
        // that many bytes long (`zeros`). The kernel only reads it.
        unsafe { sys::map_update_elem(map.map().fd().as_fd(), key, src) }.map_err(MapError::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_zeros_are_zero_and_long_enough_or_none() {
        let z = zeros(2, 100).unwrap();
        assert_eq!(z.len(), 13);
        assert!(z.iter().all(|&w| w == 0));
        // Longer than the first caller made it: the buffer falls back to its own copy.
        assert!(zeros(2, 1 << 30).is_none());
    }
}
