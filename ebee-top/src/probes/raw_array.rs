//! A BPF array map (plain or per-CPU) read and written through [`super::sys`] into buffers
//! the caller owns: aya copies a value through the stack, and the QoS values (a table per
//! syscall number, histograms) are tens of KiB, times the CPUs for a per-CPU map.

use std::io;
use std::marker::PhantomData;
use std::os::fd::AsFd as _;

use aya::maps::{Map, MapData, MapError};

use super::sys;

/// An array map whose values are `V`, as one element buffer of `copies` values back to back.
pub(super) struct RawArray<V> {
    data: MapData,
    /// Copies of each value: 1, or the number of possible CPUs for a per-CPU array.
    copies: usize,
    _value: PhantomData<V>,
}

impl<V> RawArray<V> {
    /// Take `map` (an array or per-CPU array of `V`) for `ncpus` possible CPUs. The value size
    /// is checked against the kernel's, so every buffer length checked later is the real one.
    pub(super) fn new(map: Map, name: &str, ncpus: usize) -> Result<Self, MapError> {
        let wrong = || MapError::InvalidName {
            name: name.to_owned(),
        };
        let (data, copies) = match map {
            Map::Array(data) => (data, 1),
            // The kernel lays per-CPU copies out 8-byte aligned: back to back only when the
            // value size is a multiple of 8.
            Map::PerCpuArray(data) if std::mem::size_of::<V>().is_multiple_of(8) => (data, ncpus),
            _ => return Err(wrong()),
        };
        if data.info()?.value_size() as usize != std::mem::size_of::<V>() {
            return Err(wrong());
        }
        Ok(Self {
            data,
            copies,
            _value: PhantomData,
        })
    }

    /// Copies of each value (1, or the possible CPUs).
    pub(super) fn copies(&self) -> usize {
        self.copies
    }

    /// Read element `key` into `out`, whose byte length must be the value size times the
    /// copies.
    pub(super) fn read<T: aya::Pod>(&self, key: u32, out: &mut [T]) -> io::Result<()> {
        self.check_len::<T>(out.len())?;
        // SAFETY: `out` is writable for exactly the map's whole value (length checked against
        // the value size the kernel reported at `new`), and any bytes are a valid `T` (Pod).
        unsafe { sys::map_lookup_elem(self.data.fd().as_fd(), key, out.as_mut_ptr().cast()) }
    }

    /// Write element `key` from `val`, whose byte length must be the value size times the
    /// copies.
    pub(super) fn write<T: aya::Pod>(&self, key: u32, val: &[T]) -> io::Result<()> {
        self.check_len::<T>(val.len())?;
        // SAFETY: `val` is readable for exactly the map's whole value (length checked as in
        // `read`).
        unsafe { sys::map_update_elem(self.data.fd().as_fd(), key, val.as_ptr().cast()) }
    }

    fn check_len<T>(&self, n: usize) -> io::Result<()> {
        if n * std::mem::size_of::<T>() == std::mem::size_of::<V>() * self.copies {
            Ok(())
        } else {
            Err(io::Error::other("map value buffer of the wrong size"))
        }
    }
}

/// A per-CPU array's elements (every CPU's copy of one), read into a buffer kept from one
/// read to the next. aya's `PerCpuArray::get` allocates and frees two buffers a read, and
/// the drain reads such values (`CPU_STATE`, `MEM_CPU`, `SRV_CPU`, `DROPS`; `SRV_HIST` for
/// each server's histogram slot) every interval.
pub(super) struct PerCpuValue<V> {
    raw: RawArray<V>,
    buf: Vec<V>,
}

impl<V: aya::Pod + Default + Clone> PerCpuValue<V> {
    /// Take `map` (a per-CPU array of `V`) for `ncpus` possible CPUs.
    pub(super) fn new(map: Map, name: &str, ncpus: usize) -> Result<Self, MapError> {
        if !matches!(map, Map::PerCpuArray(_)) {
            return Err(MapError::InvalidName {
                name: name.to_owned(),
            });
        }
        let raw = RawArray::new(map, name, ncpus)?;
        let buf = vec![V::default(); raw.copies()];
        Ok(Self { raw, buf })
    }

    /// Every possible CPU's copy of element 0, in CPU order, as the kernel holds them now.
    pub(super) fn read(&mut self) -> io::Result<&[V]> {
        self.read_at(0)
    }

    /// Every possible CPU's copy of element `key`, in CPU order.
    pub(super) fn read_at(&mut self, key: u32) -> io::Result<&[V]> {
        self.raw.read(key, &mut self.buf)?;
        Ok(&self.buf)
    }

    /// Set every CPU's copy of element `key` to `V::default()`.
    pub(super) fn clear_at(&mut self, key: u32) -> io::Result<()> {
        self.buf.fill(V::default());
        self.raw.write(key, &self.buf)
    }

    /// Write every CPU's copy; `vals` holds one per possible CPU.
    pub(super) fn write(&self, vals: &[V]) -> io::Result<()> {
        self.raw.write(0, vals)
    }
}
