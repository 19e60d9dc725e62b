//! The cgroups pipeline's kernel/userspace contract: CPU time and run-queue wait per cgroup,
//! aggregated in the kernel at the context switch.
//!
//! `sched_switch` already knows the outgoing thread's slice (the CPU pipeline) and its growth
//! of run-queue wait (the waits pipeline). It also reads the thread's cgroup in one hierarchy,
//! chosen by userspace at load: the unified (v2) one, `css_set.dfl_cgrp`, or a v1 controller's,
//! `css_set.subsys[ssid]->cgroup` (the CPU accounting controller on a v1 or hybrid machine).
//! Both end in a `struct cgroup` whose kernfs node id is the inode number of the cgroup's
//! directory, so userspace maps ids to paths by walking the mounted hierarchy. The chain is four
//! dependent loads through BTF-typed pointers, no helper call.
//!
//! The key is the low 32 bits of the kernfs id. kernfs allocates those bits with an IDR, unique
//! among the live nodes of one hierarchy (the high half only counts wrap-arounds), so two live
//! cgroups never share a key.
//!
//! Charges go to a per-CPU HashPipe sketch by CPU time (the same update code as every other
//! sketch), written under the CPU pipeline's epoch and parity, so a cgroup's interval closes
//! with the same switch as its processes'. With `SHADOW_ON` an exact per-CPU hash keeps the
//! same sums for tests.

use crate::hashpipe;

/// Stages of the cgroup sketch.
pub const CG_STAGES: usize = 4;
/// Slots per stage (a power of two). A systemd machine has one cgroup per unit and scope, a few
/// hundred at most, and few of them run in any one interval.
pub const CG_SLOTS: usize = 64;
/// Capacity of each exact shadow map (one per interval parity).
pub const CG_SHADOW_ENTRIES: u32 = 4096;
/// Cgroup key of a hierarchy's root (kernfs ids start at 1 for the root directory).
pub const ROOT_KEY: u32 = 1;

/// One slot of the cgroup sketch.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgSlot {
    /// Low 32 bits of the cgroup's kernfs id; 0 marks an empty slot.
    pub key: u32,
    /// Reserved, 0.
    pub flags: u32,
    /// On-CPU nanoseconds of the cgroup's threads.
    pub cpu_ns: u64,
    /// Run-queue wait of its threads, ns (0 when the kernel lacks `sched_info`).
    pub wait_ns: u64,
}

impl hashpipe::Slot for CgSlot {
    #[inline(always)]
    fn key(&self) -> u32 {
        self.key
    }
    #[inline(always)]
    fn weight(&self) -> u64 {
        self.cpu_ns
    }
    #[inline(always)]
    fn merge(&mut self, other: &Self) {
        self.cpu_ns += other.cpu_ns;
        self.wait_ns += other.wait_ns;
    }
}

/// `u64`s that pad [`CgSketch`] to whole cache lines.
pub const CG_PAD: usize =
    crate::pad_words(core::mem::size_of::<[[CgSlot; CG_SLOTS]; CG_STAGES]>() + 4 * 8);

/// One interval's cgroup sketch on one CPU (an entry of a per-(CPU, parity) array: [`crate::cpu::sketch_entry`]).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CgSketch {
    pub stages: [[CgSlot; CG_SLOTS]; CG_STAGES],
    /// CPU time carried out of the last stage and lost.
    pub evicted_ns: u64,
    /// Entries carried out of the last stage.
    pub evictions: u64,
    /// Charges in this interval.
    pub updates: u64,
    /// Charges the exact shadow could not record (shadow map full).
    pub shadow_full: u64,
    /// Up to a whole number of cache lines: see [`crate::cache_lines`].
    pub pad: [u64; CG_PAD],
}

impl Default for CgSketch {
    fn default() -> Self {
        Self {
            stages: [[CgSlot::default(); CG_SLOTS]; CG_STAGES],
            evicted_ns: 0,
            evictions: 0,
            updates: 0,
            shadow_full: 0,
            pad: [0; CG_PAD],
        }
    }
}

impl CgSketch {
    /// Insert one charge; count what falls out of the last stage.
    #[inline(always)]
    pub fn add(&mut self, slot: CgSlot) {
        self.updates += 1;
        if let Some(out) = hashpipe::update(&mut self.stages, slot) {
            self.evicted_ns += out.cpu_ns;
            self.evictions += 1;
        }
    }
}

/// Offsets of the load chain task -> cgroup key, from the kernel's BTF (a load-time global).
/// `on` is 0 when the pipeline is off (no cgroup hierarchy mounted, the fields missing, or
/// `--no-cgroups`): then no load is made and every key is 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgOffsets {
    /// `task_struct.cgroups` (a `struct css_set *`).
    pub task_cgroups: u32,
    /// In `css_set`: `dfl_cgrp` (v2; a `struct cgroup` starts with its own
    /// `cgroup_subsys_state`), or `subsys[ssid]` (v1).
    pub css: u32,
    /// `cgroup_subsys_state.cgroup`.
    pub css_cgroup: u32,
    /// `cgroup.kn`.
    pub cgroup_kn: u32,
    /// `kernfs_node.id`.
    pub kn_id: u32,
    /// 1 when on.
    pub on: u32,
}

crate::counted_by!(CgSketch, CgSlot, CG_SLOTS, CG_STAGES, updates);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_has_no_padding() {
        assert_eq!(core::mem::size_of::<CgSlot>(), 24);
        assert_eq!(core::mem::size_of::<CgOffsets>(), 24);
        assert_eq!(
            core::mem::size_of::<CgSketch>(),
            crate::cache_lines(24 * CG_SLOTS * CG_STAGES + 32)
        );
        assert!(core::mem::size_of::<CgSketch>() <= 32 * 1024);
    }

    #[test]
    fn the_heavier_cgroup_stays() {
        let mut sk = CgSketch::default();
        for key in 1..=1000u32 {
            sk.add(CgSlot {
                key,
                cpu_ns: u64::from(key),
                ..Default::default()
            });
        }
        sk.add(CgSlot {
            key: 7,
            cpu_ns: 1_000_000,
            wait_ns: 5,
            ..Default::default()
        });
        let total: u64 = sk
            .stages
            .iter()
            .flatten()
            .filter(|s| s.key == 7)
            .map(|s| s.cpu_ns)
            .sum();
        assert!(total >= 1_000_000);
        let top = sk.stages.iter().flatten().filter(|s| s.key == 1000).count();
        assert_eq!(top, 1, "the heaviest of the many stays");
    }
}
