//! The QoS pipeline's maps and the writes the pin slots ask for: the pin table with its pid
//! bitmap, clearing a slot's data, the open-syscall filter and the listening-port bitmap.

use std::collections::BTreeMap;

use aya::{
    Ebpf,
    maps::{Array, MapData, PerCpuArray},
};
use ebee_shared::{
    map_names as n,
    qos::{
        BUCKETS, HistIdx, HistTable, MAX_PINS, NR_SLOTS, OPEN_SLOTS, OpenStacks, PIN_BIT_WORDS,
        PORT_WORDS, PinStat, PinState, PinTable, QosCpu, RunqStat, SYS_HISTS, StackCache, SysStat,
        SysTable, next_stack_gen,
    },
};

use super::super::{ProbeError, classify, raw_array::RawArray, take_map};

/// The maps of the QoS pipeline, with what userspace last wrote to its bitmaps.
pub(super) struct QosMaps {
    table: Array<MapData, PinTable>,
    /// The kernel's first filter: one bit per tgid, set for the pinned processes.
    pin_bits: Array<MapData, u64>,
    /// Nonzero words of `pin_bits` as last written, by index.
    bit_words: BTreeMap<u32, u64>,
    /// Per interval parity and slot (`parity * MAX_PINS + slot`), per CPU.
    pub(super) sys: RawArray<SysTable>,
    pub(super) hist: RawArray<HistTable>,
    pub(super) pin: RawArray<PinStat>,
    /// Run-queue waits, per interval parity and slot (not per CPU: atomic adds).
    pub(super) runq: RawArray<RunqStat>,
    /// Per slot.
    pub(super) hist_idx: RawArray<HistIdx>,
    pin_state: Array<MapData, PinState>,
    open: RawArray<OpenStacks>,
    /// The kernel's cache of stacks found unpinned, and the generation last written to it.
    stacks: RawArray<StackCache>,
    stack_gen: u64,
    /// Per CPU: odd while a `sys_exit` run is in flight.
    pub(super) cpu: PerCpuArray<MapData, QosCpu>,
    ports: Array<MapData, u64>,
    /// The port bitmap as last written.
    port_words: Vec<u64>,
}

impl QosMaps {
    pub(super) fn take(ebpf: &mut Ebpf, ncpus: usize) -> Result<Self, ProbeError> {
        fn raw<V>(ebpf: &mut Ebpf, name: &str, ncpus: usize) -> Result<RawArray<V>, ProbeError> {
            take_map(ebpf, name, |m| RawArray::new(m, name, ncpus))
        }
        Ok(Self {
            table: take_map(ebpf, n::QOS_PINS, Array::try_from)?,
            pin_bits: take_map(ebpf, n::QOS_PIN_BITS, Array::try_from)?,
            bit_words: BTreeMap::new(),
            sys: raw(ebpf, n::QOS_SYS, ncpus)?,
            hist: raw(ebpf, n::QOS_HIST, ncpus)?,
            hist_idx: raw(ebpf, n::QOS_HIST_IDX, ncpus)?,
            pin: raw(ebpf, n::QOS_PIN, ncpus)?,
            runq: raw(ebpf, n::QOS_RUNQ, ncpus)?,
            pin_state: take_map(ebpf, n::QOS_PIN_STATE, Array::try_from)?,
            open: raw(ebpf, n::QOS_OPEN, ncpus)?,
            stacks: raw(ebpf, n::QOS_STACKS, ncpus)?,
            stack_gen: 0,
            cpu: take_map(ebpf, n::QOS_CPU, PerCpuArray::try_from)?,
            ports: take_map(ebpf, n::QOS_PORTS, Array::try_from)?,
            port_words: vec![0; PORT_WORDS as usize],
        })
    }

    /// Make the kernel's pin table `t`, and the pid bitmap match it.
    pub(super) fn write_table(&mut self, t: &PinTable) -> Result<(), ProbeError> {
        let words = bit_words(t);
        let (before, after) = bit_writes(&self.bit_words, &words);
        for (i, w) in before {
            self.pin_bits
                .set(i, w, 0)
                .map_err(classify("writing QOS_PIN_BITS"))?;
        }
        self.table
            .set(0, *t, 0)
            .map_err(classify("writing QOS_PINS"))?;
        for (i, w) in after {
            self.pin_bits
                .set(i, w, 0)
                .map_err(classify("writing QOS_PIN_BITS"))?;
        }
        self.bit_words = words;
        // Last, once every new pin's bit is set: a new generation, so no thread stays cached
        // as unpinned from before (its entries zeroed too; see `StackCache`).
        self.stack_gen = next_stack_gen(self.stack_gen);
        let mut cache = vec![0u64; std::mem::size_of::<StackCache>() / 8];
        cache[0] = self.stack_gen;
        self.stacks
            .write(0, &cache)
            .map_err(classify("writing QOS_STACKS"))?;
        // Order the table write before any later read of the per-CPU marks (see drain).
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// Zero a slot's data in both interval buffers and its histogram assignment. Only for a
    /// slot absent from the kernel's table, after the handshake (`QosProbes::wait_cpus`).
    pub(super) fn clear_slot(&mut self, i: usize) -> Result<(), ProbeError> {
        let i = i as u32;
        let zero_sys = vec![SysStat::default(); NR_SLOTS * self.sys.copies()];
        let zero_hist = vec![0u32; SYS_HISTS * BUCKETS];
        let zero_pin = vec![PinStat::default(); self.pin.copies()];
        for parity in 0..2u32 {
            let k = parity * MAX_PINS as u32 + i;
            self.sys
                .write(k, &zero_sys)
                .map_err(classify("clearing QOS_SYS"))?;
            self.hist
                .write(k, &zero_hist)
                .map_err(classify("clearing QOS_HIST"))?;
            self.pin
                .write(k, &zero_pin)
                .map_err(classify("clearing QOS_PIN"))?;
            self.runq
                .write(k, &[RunqStat::default()])
                .map_err(classify("clearing QOS_RUNQ"))?;
        }
        self.hist_idx
            .write(i, &vec![0u64; NR_SLOTS])
            .map_err(classify("clearing QOS_HIST_IDX"))?;
        self.pin_state
            .set(i, PinState::default(), 0)
            .map_err(classify("clearing QOS_PIN_STATE"))
    }

    /// Forget which kernel stacks had pinned syscalls (only while no syscall program runs).
    pub(super) fn clear_open(&mut self) -> Result<(), ProbeError> {
        self.open
            .write(0, &vec![0u8; OPEN_SLOTS])
            .map_err(classify("clearing QOS_OPEN"))
    }

    /// Rebuild the listening-port bitmap from the sockets of `pids` in /proc. (The kernel
    /// adds the ports of `listen()` calls made while pinned by itself.)
    pub(super) fn refresh_ports(&mut self, pids: &[u32]) -> Result<(), ProbeError> {
        let mut words = vec![0u64; PORT_WORDS as usize];
        for &pid in pids {
            for port in crate::os::ports::listening_ports(pid) {
                words[usize::from(port >> 6)] |= 1 << (port & 63);
            }
        }
        for (i, (w, old)) in words.iter().zip(&mut self.port_words).enumerate() {
            // Words the kernel may have set by itself are rewritten too.
            if *w != 0 || *old != 0 || i == 0 {
                self.ports
                    .set(i as u32, *w, 0)
                    .map_err(classify("writing QOS_PORTS"))?;
                *old = *w;
            }
        }
        Ok(())
    }
}

/// The nonzero words of the pid bitmap for table `t`, by index.
fn bit_words(t: &PinTable) -> BTreeMap<u32, u64> {
    let mut words = BTreeMap::<u32, u64>::new();
    for &e in t.pins.iter().filter(|e| **e != 0) {
        let pid = e as u32;
        *words.entry((pid >> 6) & (PIN_BIT_WORDS - 1)).or_default() |= 1 << (pid & 63);
    }
    words
}

/// (index, value) of pid-bitmap words to write.
type WordWrites = Vec<(u32, u64)>;

/// The bitmap words to write before the table and after it, to go from `old` to `new`. The
/// bitmap only filters, the table decides: so new bits go in before the table (a new pin is
/// seen from its first syscall after the table write), old ones come out after it.
fn bit_writes(old: &BTreeMap<u32, u64>, new: &BTreeMap<u32, u64>) -> (WordWrites, WordWrites) {
    let get = |m: &BTreeMap<u32, u64>, i: u32| m.get(&i).copied().unwrap_or(0);
    let before = new
        .iter()
        .filter(|&(&i, &w)| w & !get(old, i) != 0)
        .map(|(&i, &w)| (i, w | get(old, i)))
        .collect();
    let after = old
        .iter()
        .filter(|&(&i, &w)| get(new, i) != w)
        .map(|(&i, _)| (i, get(new, i)))
        .collect();
    (before, after)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmap_bits_are_added_before_the_table_and_removed_after() {
        let mut t = PinTable::default();
        t.pins[0] = ebee_shared::qos::pin_entry(1, 1);
        t.pins[1] = ebee_shared::qos::pin_entry(65, 2);
        let old = bit_words(&t);
        assert_eq!(old, BTreeMap::from([(0, 1 << 1), (1, 1 << 1)]));
        // 1 stays, 65 goes, 2 comes (same word as 1).
        t.pins[1] = 0;
        t.pins[2] = ebee_shared::qos::pin_entry(2, 3);
        let new = bit_words(&t);
        let (before, after) = bit_writes(&old, &new);
        // Before the table: the union, so no pid in either table is ever filtered out.
        assert_eq!(before, vec![(0, 0b110)]);
        assert_eq!(after, vec![(0, 0b110), (1, 0)]);
        // Nothing changes: nothing written.
        assert_eq!(bit_writes(&new, &new), (vec![], vec![]));
    }
}
