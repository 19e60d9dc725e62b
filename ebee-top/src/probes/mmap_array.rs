//! A per-(CPU, parity) sketch array (`BPF_F_MMAPABLE`, `2 * ncpus` entries laid out by
//! `ebee_shared::cpu::sketch_entry`), mapped into our address space once at load: a closed
//! interval is read where the kernel wrote it and zeroed with a memset, with no bpf(2) call
//! (a sketch with no insert counted only has its counters zeroed: see [`Counted`]).
//! A per-CPU array had to be copied out with BPF_MAP_LOOKUP_ELEM and cleared with
//! BPF_MAP_UPDATE_ELEM, every CPU's copy of every sketch every interval: measured, the larger
//! part of batch mode's own CPU time went to those copies and their system calls. The
//! one-entry control block is mapped the same way, read-only ([`MappedValue`]), for the epoch
//! word after each flip.
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
use ebee_shared::hashpipe::Counted;

/// `BPF_F_MMAPABLE` (include/uapi/linux/bpf.h).
const BPF_F_MMAPABLE: u32 = 1 << 10;

/// A shared mapping of every value of a `BPF_F_MMAPABLE` array, made after checking the
/// kernel's view of the map (every offset used later relies on it); unmapped on drop.
struct Mapping {
    base: NonNull<u8>,
    /// Bytes mapped.
    len: usize,
}

impl Mapping {
    /// Map the `entries` values of `value_size` bytes of `map` (the array `name`), with `prot`.
    fn new(
        map: &MapData,
        name: &str,
        value_size: usize,
        entries: usize,
        prot: libc::c_int,
    ) -> Result<Self, MapError> {
        let wrong = |why: String| MapError::from(io::Error::other(format!("{name}: {why}")));
        let info = map.info()?;
        if info.value_size() as usize != value_size {
            return Err(wrong(format!(
                "value of {} bytes in the kernel, {value_size} here",
                info.value_size()
            )));
        }
        if info.max_entries() as usize != entries || entries == 0 {
            return Err(wrong(format!(
                "{} entries, not {entries}",
                info.max_entries()
            )));
        }
        if info.map_flags() & BPF_F_MMAPABLE == 0 {
            return Err(wrong("created without BPF_F_MMAPABLE".into()));
        }
        let len = value_size * entries;
        // SAFETY: a new shared mapping of the map's data at offset 0, no longer than its
        // entries (the kernel refuses more); nothing else is at the address the kernel picks.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                map.fd().as_fd().as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(MapError::from(io::Error::last_os_error()));
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or_else(|| wrong("mmap gave null".into()))?;
        Ok(Self { base, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, of `len` bytes; its owners borrow nothing of it
        // past themselves.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// A sketch array mapped read-write and shared with the kernel.
pub(super) struct SketchArray<V> {
    /// Held open so the map stays in the maps report (which walks our map fds); the mapping
    /// alone would keep the map alive but not listed.
    _map: MapData,
    mapping: Mapping,
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
        let size = std::mem::size_of::<V>();
        // Entries are `value_size` rounded up to 8 bytes apart; `V` must be exactly that so a
        // run of entries is a `[V]`, and its alignment must be met by an 8-byte multiple
        // from a page boundary.
        if !size.is_multiple_of(8) || std::mem::align_of::<V>() > 8 {
            return Err(wrong(format!(
                "a value of {size} bytes cannot be laid out as an array"
            )));
        }
        // Clearing writes zero bytes: that must be the empty sketch.
        let dflt = V::default();
        // SAFETY: `dflt` is a live `V`, and `V: Pod` has no bytes that may not be read.
        let bytes = unsafe { std::slice::from_raw_parts((&raw const dflt).cast::<u8>(), size) };
        if bytes.iter().any(|&b| b != 0) {
            return Err(wrong("its empty value is not all zero bytes".into()));
        }
        // Two per possible CPU.
        let mapping = Mapping::new(
            &data,
            name,
            size,
            2 * ncpus,
            libc::PROT_READ | libc::PROT_WRITE,
        )?;
        Ok(Self {
            _map: data,
            mapping,
            ncpus,
            _value: PhantomData,
        })
    }

    /// The first entry of `parity`'s run of `ncpus` sketches.
    fn run(&self, parity: u32) -> *mut V {
        let first = sketch_entry(parity, 0, self.ncpus as u32) as usize;
        // SAFETY: `first` is 0 or `ncpus`, and the mapping holds `2 * ncpus` values.
        unsafe { self.mapping.base.as_ptr().cast::<V>().add(first) }
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

    /// Zero every CPU's sketch of `parity` (the empty sketch), for the interval two flips on:
    /// the whole of each sketch something was inserted into, the counters after the stages
    /// of the others.
    ///
    /// # Safety
    /// As for [`Self::closed`]: no program writes a sketch of `parity` until the next flip
    /// back to it, which comes after this returns.
    pub(super) unsafe fn clear(&mut self, parity: u32)
    where
        V: Counted,
    {
        let size = std::mem::size_of::<V>();
        let run = self.run(parity);
        for cpu in 0..self.ncpus {
            // SAFETY: value `cpu` of the run of `ncpus` inside the mapping; any bytes are a
            // valid `V` (Pod), and nothing writes it now (the caller's contract).
            let v = unsafe { run.add(cpu) };
            // SAFETY: as above: an initialised, aligned value that nothing writes meanwhile;
            // the borrow ends with this statement.
            let inserts = unsafe { &*v }.inserts();
            // A sketch nothing was inserted into has its stages as they were cleared (only
            // `add` writes them, and counts it): only the counters after them are zeroed.
            let from = if inserts == 0 {
                V::STAGE_BYTES.min(size)
            } else {
                0
            };
            // SAFETY: bytes `from..size` of that value, inside the mapping, to which no shared
            // borrow is live (`&mut self`).
            unsafe { std::ptr::write_bytes(v.cast::<u8>().add(from), 0, size - from) };
        }
        // The zeros are in memory before the flip that hands the parity back to the kernel.
        fence(Ordering::SeqCst);
    }
}

/// The single value of a one-entry `BPF_F_MMAPABLE` array (the control block), mapped
/// read-only: userspace reads a word a program wrote without a bpf(2) call. Writes still go
/// through the map (`Array::set`).
pub(super) struct MappedValue<V> {
    mapping: Mapping,
    _value: PhantomData<V>,
}

// SAFETY: as for `SketchArray`: plain memory owned by this value, unmapped on drop.
unsafe impl<V: Send> Send for MappedValue<V> {}

impl<V: aya::Pod> MappedValue<V> {
    /// Map the value of `map` (the array `name`), whose layout is checked against `V` first.
    pub(super) fn new(map: &MapData, name: &str) -> Result<Self, MapError> {
        let size = std::mem::size_of::<V>();
        Ok(Self {
            mapping: Mapping::new(map, name, size, 1, libc::PROT_READ)?,
            _value: PhantomData,
        })
    }

    /// The `u64` at byte `OFFSET` of the value (`std::mem::offset_of!`; checked at compile
    /// time), read whole (a program's atomic store to it is never seen half done), after
    /// whatever this thread did before (the flip's system call).
    pub(super) fn word_at<const OFFSET: usize>(&self) -> u64 {
        const {
            assert!(
                OFFSET.is_multiple_of(8) && OFFSET + 8 <= std::mem::size_of::<V>(),
                "no aligned u64 at that offset of the value"
            );
        }
        fence(Ordering::SeqCst);
        // SAFETY: an aligned `u64` inside the value (checked above), inside the mapping (a
        // page from a page boundary), which lives as long as `self`; any bits are a `u64`.
        unsafe { std::ptr::read_volatile(self.mapping.base.as_ptr().add(OFFSET).cast::<u64>()) }
    }
}
