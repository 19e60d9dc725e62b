//! A per-(CPU, parity) sketch array (`BPF_F_MMAPABLE`, `2 * ncpus` entries laid out by
//! `ebee_shared::cpu::sketch_entry`), mapped into our address space once at load: a closed
//! interval is read where the kernel wrote it and zeroed with a memset, with no bpf(2) call.
//! A per-CPU array had to be copied out with BPF_MAP_LOOKUP_ELEM and cleared with
//! BPF_MAP_UPDATE_ELEM, every CPU's copy of every sketch every interval: measured, the larger
//! part of batch mode's own CPU time went to those copies and their system calls.
//!
//! Memory ordering. The kernel writes the sketches of parity `p` while we read and zero those
//! of `!p`; the epoch protocol (`super::cpu`) says when a parity is ours:
//! - Reading: a CPU's closed sketch is complete once we have seen that CPU's `CpuState` show
//!   the new epoch (the `sched_switch` program stores the epoch after its sketch stores,
//!   behind a compiler barrier, and x86 keeps stores in order and loads in order) or once
//!   `cpu_flip` has returned from that CPU (the IPI's completion is a full barrier). [`closed`]
//!   adds an acquire fence so that neither the compiler nor a weaker CPU moves our reads of
//!   the sketch before that observation. (On a weakly ordered machine the program's epoch
//!   store would need release order too; the kernel side assumes x86, as it always has.)
//! - Clearing: our zeroing stores must reach memory before any CPU writes that parity again,
//!   which it does only after the next flip. [`clear`] ends with a full fence (`mfence`, which
//!   also orders the non-temporal stores a large memset may use), and the next flip is a
//!   system call whose program changes the epoch with a locked instruction after it; a CPU
//!   sees the new epoch (a load) before it loads or stores anything of that parity.
//!
//! [`closed`]: SketchArray::closed
//! [`clear`]: SketchArray::clear

use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsFd as _, AsRawFd as _};
use std::ptr::NonNull;
use std::sync::atomic::{Ordering, fence};

use aya::maps::{Map, MapData, MapError};
use ebee_shared::cpu::sketch_entry;

/// `BPF_F_MMAPABLE` (include/uapi/linux/bpf.h).
const BPF_F_MMAPABLE: u32 = 1 << 10;

/// A sketch array mapped read-write and shared with the kernel.
pub(super) struct SketchArray<V> {
    /// Held open so the map stays in the maps report (which walks our map fds); the mapping
    /// alone would keep the map alive but not listed.
    _map: MapData,
    base: NonNull<V>,
    /// Bytes mapped.
    len: usize,
    ncpus: usize,
    _value: PhantomData<V>,
}

// SAFETY: the mapping is plain memory owned by this value (unmapped on drop); access to it is
// governed by `&self`/`&mut self` and the unsafe contracts below, not by the thread.
unsafe impl<V: Send> Send for SketchArray<V> {}

impl<V: aya::Pod + Default> SketchArray<V> {
    /// Map `map` (the array `name`, created with `2 * ncpus` entries of `V`) into memory. The
    /// kernel's view of the map is checked first: every offset used later relies on it.
    pub(super) fn new(map: Map, name: &str, ncpus: usize) -> Result<Self, MapError> {
        let wrong = |why: String| MapError::from(io::Error::other(format!("{name}: {why}")));
        let Map::Array(data) = map else {
            return Err(wrong("not a plain array map".into()));
        };
        let info = data.info()?;
        let size = std::mem::size_of::<V>();
        // Entries are `value_size` rounded up to 8 bytes apart; `V` must be exactly that so a
        // run of entries is a `[V]`, and its alignment must be met by an 8-byte multiple
        // from a page boundary.
        if info.value_size() as usize != size
            || !size.is_multiple_of(8)
            || std::mem::align_of::<V>() > 8
        {
            return Err(wrong(format!(
                "value of {} bytes in the kernel, {size} here",
                info.value_size()
            )));
        }
        if info.max_entries() as usize != 2 * ncpus || ncpus == 0 {
            return Err(wrong(format!(
                "{} entries, not two per possible CPU ({ncpus})",
                info.max_entries()
            )));
        }
        if info.map_flags() & BPF_F_MMAPABLE == 0 {
            return Err(wrong("created without BPF_F_MMAPABLE".into()));
        }
        // Clearing writes zero bytes: that must be the empty sketch.
        let dflt = V::default();
        // SAFETY: `dflt` is a live `V`, and `V: Pod` has no bytes that may not be read.
        let bytes = unsafe { std::slice::from_raw_parts((&raw const dflt).cast::<u8>(), size) };
        if bytes.iter().any(|&b| b != 0) {
            return Err(wrong("its empty value is not all zero bytes".into()));
        }
        let len = size * 2 * ncpus;
        // SAFETY: a new shared mapping of the map's data at offset 0, no longer than its
        // entries (the kernel refuses more); nothing else is at the address the kernel picks.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                data.fd().as_fd().as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(MapError::from(io::Error::last_os_error()));
        }
        let base = NonNull::new(p.cast::<V>()).ok_or_else(|| wrong("mmap gave null".into()))?;
        Ok(Self {
            _map: data,
            base,
            len,
            ncpus,
            _value: PhantomData,
        })
    }

    /// The first entry of `parity`'s run of `ncpus` sketches.
    fn run(&self, parity: u32) -> *mut V {
        let first = sketch_entry(parity, 0, self.ncpus as u32) as usize;
        // SAFETY: `first` is 0 or `ncpus`, and the mapping holds `2 * ncpus` values.
        unsafe { self.base.as_ptr().add(first) }
    }

    /// Every CPU's sketch of `parity`, in CPU order, read in place.
    ///
    /// # Safety
    /// No program may write a sketch of `parity` while the returned slice lives: every CPU
    /// has been seen to move past the interval of that parity (the epoch protocol), and the
    /// next flip back to it happens only after the slice is dropped.
    pub(super) unsafe fn closed(&self, parity: u32) -> &[V] {
        // Our reads of the sketches come after the observation that made them quiescent.
        fence(Ordering::Acquire);
        // SAFETY: `ncpus` initialised (any bytes are a valid `V: Pod`) and aligned values in
        // the mapping, which lives as long as `self`; nothing writes them meanwhile (the
        // caller's contract).
        unsafe { std::slice::from_raw_parts(self.run(parity), self.ncpus) }
    }

    /// Zero every CPU's sketch of `parity` (the empty sketch), for the interval two flips on.
    ///
    /// # Safety
    /// As for [`Self::closed`]: no program writes a sketch of `parity` until the next flip
    /// back to it, which comes after this returns.
    pub(super) unsafe fn clear(&mut self, parity: u32) {
        // SAFETY: `ncpus` values inside the mapping, which no program writes now (the caller's
        // contract) and to which no shared borrow is live (`&mut self`).
        unsafe { std::ptr::write_bytes(self.run(parity), 0, self.ncpus) };
        // The zeros are in memory before the flip that hands the parity back to the kernel.
        fence(Ordering::SeqCst);
    }
}

impl<V> Drop for SketchArray<V> {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, of `len` bytes; no borrow of it outlives `self`.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// The single value of a one-entry `BPF_F_MMAPABLE` array (the control block), mapped
/// read-only: userspace reads the word a program wrote without a bpf(2) call. Writes still go
/// through the map (`Array::set`).
pub(super) struct MappedValue<V> {
    base: NonNull<V>,
    len: usize,
}

// SAFETY: as for `SketchArray`: plain memory owned by this value, unmapped on drop.
unsafe impl<V: Send> Send for MappedValue<V> {}

impl<V: aya::Pod> MappedValue<V> {
    /// Map the value of `map` (the array `name`), whose layout is checked against `V` first.
    pub(super) fn new(map: &MapData, name: &str) -> Result<Self, MapError> {
        let wrong = |why: String| MapError::from(io::Error::other(format!("{name}: {why}")));
        let info = map.info()?;
        let size = std::mem::size_of::<V>();
        if info.value_size() as usize != size || std::mem::align_of::<V>() > 8 {
            return Err(wrong(format!(
                "value of {} bytes in the kernel, {size} here",
                info.value_size()
            )));
        }
        if info.max_entries() != 1 {
            return Err(wrong(format!("{} entries, not one", info.max_entries())));
        }
        if info.map_flags() & BPF_F_MMAPABLE == 0 {
            return Err(wrong("created without BPF_F_MMAPABLE".into()));
        }
        // SAFETY: a new read-only shared mapping of the map's one value at offset 0 (the
        // kernel rounds it up to a page); nothing else is at the address the kernel picks.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ,
                libc::MAP_SHARED,
                map.fd().as_fd().as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(MapError::from(io::Error::last_os_error()));
        }
        let base = NonNull::new(p.cast::<V>()).ok_or_else(|| wrong("mmap gave null".into()))?;
        Ok(Self { base, len: size })
    }

    /// A `u64` field of the value, read whole (a program's atomic store to it is never seen
    /// half done), after whatever this thread did before (the flip's system call).
    pub(super) fn word(&self, field: impl FnOnce(*const V) -> *const u64) -> u64 {
        fence(Ordering::SeqCst);
        // SAFETY: `field` gives the address of a field of the value, an aligned `u64` inside
        // the mapping, which lives as long as `self`; any bits are a valid `u64`.
        unsafe { std::ptr::read_volatile(field(self.base.as_ptr())) }
    }
}

impl<V> Drop for MappedValue<V> {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, of `len` bytes; nothing borrows it past `self`.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}
