//! The QoS pin slots as a pure state machine: which slot each pinned process gets, its
//! generation, when a slot that lost its process is read for the last time and freed, and what
//! the kernel's maps must be told, in order. No aya, no I/O, no clock: the caller passes the
//! time and applies the returned [`Action`]s (see `QosProbes`).
//!
//! Why the care: the kernel programs write a slot's statistics while the slot is in the pin
//! table, and a run that read the table just before a change may still be writing. So a slot
//! whose process was unpinned (or exited) is read once more at the next drain, so its last
//! interval is reported, and only then cleared and freed; and a new owner gets a new
//! generation, so per-thread and per-connection state left in the kernel by the old one is
//! recognised and ignored.

use ebee_shared::qos::{MAX_PINS, PinTable, pin_entry};

use super::PinError;

/// What one slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SlotState {
    Free,
    /// Pinned: in the kernel's table with this generation.
    Pinned {
        pid: u32,
        gen_: u32,
    },
    /// Removed from the kernel's table; read (and freed) by the first drain whose interval
    /// ends at or after `until_ns` (`CLOCK_MONOTONIC`), which then reports it as the last.
    Draining {
        pid: u32,
        exited: bool,
        until_ns: u64,
    },
}

/// One step the kernel side must take, in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Action {
    /// Make the kernel's pin table (and its pid bitmap) this.
    Table(PinTable),
    /// Wait until no CPU is still inside a syscall program run that may have read an earlier
    /// table: after it, a slot absent from the table is written by nobody.
    WaitCpus,
    /// Zero slot `i`'s data: both interval buffers, its histogram assignment and its request
    /// state. Only ever asked for a slot absent from the table, after a [`Action::WaitCpus`].
    Clear(usize),
    /// Rebuild the listening-port bitmap from these processes' sockets.
    Ports(Vec<u32>),
    /// The syscall programs must be attached (true: something is pinned) or detached.
    Attached(bool),
}

/// A slot to read in a drain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SlotRead {
    pub slot: usize,
    pub pid: u32,
    /// The pin ended: this is its last interval, and the slot is now free (clear it after
    /// reading).
    pub last: bool,
    /// The process exited (only with `last`).
    pub exited: bool,
}

/// The slots, and the generation the next pin gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct PinSlots {
    slots: [SlotState; MAX_PINS],
    /// Never 0: a 0 table entry means "free".
    next_gen: u32,
}

impl Default for PinSlots {
    fn default() -> Self {
        Self {
            slots: [SlotState::Free; MAX_PINS],
            next_gen: 1,
        }
    }
}

impl PinSlots {
    /// The pinned processes, in slot order.
    pub(super) fn pinned(&self) -> Vec<u32> {
        self.slots
            .iter()
            .filter_map(|s| match s {
                SlotState::Pinned { pid, .. } => Some(*pid),
                _ => None,
            })
            .collect()
    }

    /// True while something is pinned (the syscall programs are then attached).
    pub(super) fn any_pinned(&self) -> bool {
        self.slots
            .iter()
            .any(|s| matches!(s, SlotState::Pinned { .. }))
    }

    /// The kernel's pin table as the slots stand.
    pub(super) fn table(&self) -> PinTable {
        let mut t = PinTable::default();
        for (e, s) in t.pins.iter_mut().zip(&self.slots) {
            if let SlotState::Pinned { pid, gen_ } = *s {
                *e = pin_entry(pid, gen_);
            }
        }
        t
    }

    fn count(&self, f: impl Fn(&SlotState) -> bool) -> usize {
        self.slots.iter().filter(|s| f(s)).count()
    }

    /// Make `pids` (duplicates allowed) the pinned set at `now_ns`: new ones get a free slot
    /// and a new generation, missing ones start draining and are reported one last time at
    /// the next drain. More than [`MAX_PINS`] distinct pids are refused and nothing changes.
    ///
    /// Slots still draining are freed at the next drain; when the new set does not fit beside
    /// them, they are freed now instead (losing their last partial interval) rather than
    /// refusing the user: first those draining already, then, if that is not enough, those
    /// just unpinned.
    pub(super) fn set_pins(&mut self, pids: &[u32], now_ns: u64) -> Result<Vec<Action>, PinError> {
        let mut want = pids.to_vec();
        want.sort_unstable();
        want.dedup();
        if want.len() > MAX_PINS {
            return Err(PinError::TooMany(want.len()));
        }
        let pinned = self.pinned();
        let kept = pinned.iter().filter(|p| want.contains(p)).count();
        let newly: Vec<u32> = want
            .iter()
            .copied()
            .filter(|p| !pinned.contains(p))
            .collect();
        let mut out = Vec::new();
        let draining = self.count(|s| matches!(s, SlotState::Draining { .. }));
        if kept + newly.len() + draining > MAX_PINS {
            self.release_draining(&mut out);
        }
        for s in self.slots.iter_mut() {
            if let SlotState::Pinned { pid, .. } = *s {
                if !want.contains(&pid) {
                    *s = SlotState::Draining {
                        pid,
                        exited: false,
                        until_ns: now_ns,
                    };
                }
            }
        }
        if self.count(|s| *s == SlotState::Free) < newly.len() {
            self.release_draining(&mut out);
        }
        for pid in newly {
            // Kept and new pins are at most MAX_PINS, and every other slot is free by now.
            let Some(i) = self.slots.iter().position(|s| *s == SlotState::Free) else {
                return Err(PinError::TooMany(want.len()));
            };
            // Already clear when it was freed; cleared again so a new owner never starts
            // from anything but zeros.
            out.push(Action::Clear(i));
            let gen_ = self.next_gen;
            self.next_gen = self.next_gen.wrapping_add(1).max(1);
            self.slots[i] = SlotState::Pinned { pid, gen_ };
        }
        out.push(Action::Ports(self.pinned()));
        out.push(Action::Table(self.table()));
        out.push(Action::Attached(self.any_pinned()));
        Ok(out)
    }

    /// Free every draining slot now, without reading it: out of the table, waited out, cleared.
    fn release_draining(&mut self, out: &mut Vec<Action>) {
        out.push(Action::Table(self.table()));
        out.push(Action::WaitCpus);
        for (i, s) in self.slots.iter_mut().enumerate() {
            if matches!(s, SlotState::Draining { .. }) {
                out.push(Action::Clear(i));
                *s = SlotState::Free;
            }
        }
    }

    /// A pinned process ended at `ts_ns`: stop following it; the drain of the interval that
    /// holds its exit reports it as exited with its last numbers. Nothing to do (no actions)
    /// for a pid that is not pinned.
    pub(super) fn exited(&mut self, pid: u32, ts_ns: u64) -> Vec<Action> {
        let mut changed = false;
        for s in self.slots.iter_mut() {
            if matches!(*s, SlotState::Pinned { pid: p, .. } if p == pid) {
                *s = SlotState::Draining {
                    pid,
                    exited: true,
                    until_ns: ts_ns,
                };
                changed = true;
            }
        }
        if !changed {
            return Vec::new();
        }
        vec![
            Action::Table(self.table()),
            Action::Attached(self.any_pinned()),
        ]
    }

    /// The interval ending at `end_ns` has closed: the slots to read, in slot order. Empty
    /// when every slot is free (then nothing needs waiting for either); otherwise the caller
    /// waits out in-flight runs ([`Action::WaitCpus`]) before reading, and clears each slot
    /// read as `last`, which is free from now on.
    pub(super) fn drain(&mut self, end_ns: u64) -> Vec<SlotRead> {
        let mut out = Vec::new();
        for (slot, s) in self.slots.iter_mut().enumerate() {
            let (pid, last, exited) = match *s {
                SlotState::Free => continue,
                SlotState::Pinned { pid, .. } => (pid, false, false),
                SlotState::Draining {
                    pid,
                    exited,
                    until_ns,
                } => (pid, until_ns <= end_ns, exited),
            };
            if last {
                // Both buffers of a draining slot are read or empty after this read.
                *s = SlotState::Free;
            }
            out.push(SlotRead {
                slot,
                pid,
                last,
                exited: exited && last,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap};

    use proptest::prelude::*;

    use super::*;

    fn pid_of(entry: u64) -> u32 {
        entry as u32
    }

    fn gen_of(entry: u64) -> u32 {
        (entry >> 32) as u32
    }

    /// The kernel as the actions leave it, checking that each action is safe when applied.
    #[derive(Default)]
    struct Kernel {
        table: PinTable,
        /// Slot may still be written by a run that read an earlier table.
        in_flight: [bool; MAX_PINS],
        /// Slot's data is all zeros (nothing written since its last clear).
        clean: [bool; MAX_PINS],
        attached: bool,
    }

    impl Kernel {
        fn new() -> Self {
            Self {
                clean: [true; MAX_PINS],
                ..Default::default()
            }
        }

        fn apply(&mut self, actions: &[Action]) -> Result<(), TestCaseError> {
            for a in actions {
                match a {
                    Action::Table(t) => {
                        for i in 0..MAX_PINS {
                            let (old, new) = (self.table.pins[i], t.pins[i]);
                            if new != 0 && new != old {
                                prop_assert!(self.clean[i], "slot {i} given out uncleared");
                            }
                            if new != 0 {
                                self.in_flight[i] = true;
                                self.clean[i] = false;
                            }
                        }
                        self.table = *t;
                    }
                    Action::WaitCpus => self.wait(),
                    Action::Clear(i) => {
                        prop_assert_eq!(self.table.pins[*i], 0, "cleared a slot in the table");
                        prop_assert!(!self.in_flight[*i], "cleared a slot without waiting");
                        self.clean[*i] = true;
                    }
                    Action::Ports(_) => {}
                    Action::Attached(on) => self.attached = *on,
                }
            }
            Ok(())
        }

        fn wait(&mut self) {
            for i in 0..MAX_PINS {
                self.in_flight[i] = self.table.pins[i] != 0;
            }
        }
    }

    #[test]
    fn a_first_pin_takes_slot_0_and_attaches() {
        let mut s = PinSlots::default();
        let a = s.set_pins(&[42], 10).unwrap();
        let mut t = PinTable::default();
        t.pins[0] = pin_entry(42, 1);
        assert_eq!(
            a,
            vec![
                Action::Clear(0),
                Action::Ports(vec![42]),
                Action::Table(t),
                Action::Attached(true),
            ]
        );
        assert_eq!(s.pinned(), vec![42]);
    }

    #[test]
    fn an_unpinned_process_is_read_once_more_as_last_then_freed() {
        let mut s = PinSlots::default();
        s.set_pins(&[7], 0).unwrap();
        let a = s.set_pins(&[], 100).unwrap();
        assert_eq!(a.last(), Some(&Action::Attached(false)));
        assert_eq!(a[1], Action::Table(PinTable::default()));
        assert!(s.pinned().is_empty());
        let r = s.drain(150);
        assert_eq!(
            r,
            vec![SlotRead {
                slot: 0,
                pid: 7,
                last: true,
                exited: false
            }]
        );
        assert!(s.drain(200).is_empty(), "freed after its last read");
    }

    #[test]
    fn an_exit_is_last_in_the_drain_of_the_interval_that_holds_it() {
        let mut s = PinSlots::default();
        s.set_pins(&[7, 8], 0).unwrap();
        assert!(s.exited(9, 50).is_empty(), "not pinned: nothing to do");
        let a = s.exited(7, 50);
        assert_eq!(a.len(), 2);
        assert_eq!(a[1], Action::Attached(true), "8 is still pinned");
        // An interval that ended before the exit: read, not last.
        let r = s.drain(40);
        assert_eq!((r[0].pid, r[0].last, r[0].exited), (7, false, false));
        let r = s.drain(60);
        assert_eq!((r[0].pid, r[0].last, r[0].exited), (7, true, true));
        assert_eq!((r[1].pid, r[1].last), (8, false));
        assert_eq!(s.drain(70).len(), 1);
    }

    #[test]
    fn a_reused_slot_gets_a_new_generation_and_generations_skip_zero() {
        let mut s = PinSlots {
            next_gen: u32::MAX,
            ..Default::default()
        };
        s.set_pins(&[5], 0).unwrap();
        assert_eq!(
            s.slots[0],
            SlotState::Pinned {
                pid: 5,
                gen_: u32::MAX
            }
        );
        s.set_pins(&[], 1).unwrap();
        s.drain(2);
        s.set_pins(&[5], 3).unwrap();
        assert_eq!(s.slots[0], SlotState::Pinned { pid: 5, gen_: 1 });
    }

    #[test]
    fn too_many_is_refused_and_changes_nothing() {
        let mut s = PinSlots::default();
        s.set_pins(&[1, 2], 0).unwrap();
        let before = s.clone();
        let many: Vec<u32> = (1..=MAX_PINS as u32 + 1).collect();
        assert!(matches!(
            s.set_pins(&many, 1),
            Err(PinError::TooMany(n)) if n == MAX_PINS + 1
        ));
        assert_eq!(s, before);
        // Duplicates count once.
        let dup: Vec<u32> = (1..=MAX_PINS as u32).chain([1, 2]).collect();
        assert!(s.set_pins(&dup, 2).is_ok());
    }

    #[test]
    fn draining_slots_are_released_only_when_the_new_set_does_not_fit() {
        let mut s = PinSlots::default();
        let half: Vec<u32> = (1..=MAX_PINS as u32 / 2).collect();
        s.set_pins(&half, 0).unwrap();
        // Replacing half the slots fits beside the draining ones: nothing released.
        let other: Vec<u32> = (100..100 + MAX_PINS as u32 / 2).collect();
        let a = s.set_pins(&other, 1).unwrap();
        assert!(!a.contains(&Action::WaitCpus));
        // A full new set does not: the draining slots are freed unread.
        let full: Vec<u32> = (200..200 + MAX_PINS as u32).collect();
        let a = s.set_pins(&full, 2).unwrap();
        assert!(a.contains(&Action::WaitCpus));
        let mut got = s.pinned();
        got.sort_unstable();
        assert_eq!(got, full);
        assert!(s.drain(3).iter().all(|r| !r.last));
    }

    #[test]
    fn replacing_a_full_set_in_one_call_succeeds() {
        // The just-unpinned slots are released too when nothing else makes room.
        let mut s = PinSlots::default();
        let a: Vec<u32> = (1..=MAX_PINS as u32).collect();
        let b: Vec<u32> = (101..=100 + MAX_PINS as u32).collect();
        let mut k = Kernel::new();
        k.apply(&s.set_pins(&a, 0).unwrap()).unwrap();
        k.apply(&s.set_pins(&b, 1).unwrap()).unwrap();
        let mut got = s.pinned();
        got.sort_unstable();
        assert_eq!(got, b);
        // One kept, one swapped, while full.
        let mut c = b.clone();
        c[0] = 500;
        k.apply(&s.set_pins(&c, 2).unwrap()).unwrap();
        assert_eq!(s.pinned().len(), MAX_PINS);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Pins(Vec<u32>),
        Exit(u32, u64),
        Drain(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few pids, so pins are kept, dropped and taken again often, and sets are sometimes
        // too large.
        prop_oneof![
            3 => proptest::collection::vec(1u32..14, 0..MAX_PINS + 3).prop_map(Op::Pins),
            2 => (1u32..14, 0u64..30).prop_map(|(p, dt)| Op::Exit(p, dt)),
            3 => (0u64..30).prop_map(Op::Drain),
        ]
    }

    /// A pin that ended, waiting for its last report.
    #[derive(Debug, PartialEq, Eq)]
    struct Ended {
        slot: usize,
        pid: u32,
        exited: bool,
        until_ns: u64,
    }

    proptest! {
        #[test]
        fn slots_keep_their_invariants(ops in proptest::collection::vec(op(), 0..80)) {
            let mut s = PinSlots::default();
            let mut k = Kernel::new();
            let mut now = 0u64;
            let mut ended: Vec<Ended> = Vec::new();
            // Every generation each slot has had, in order.
            let mut gens: HashMap<usize, Vec<u32>> = HashMap::new();
            let ops = ops.into_iter().chain([Op::Drain(u64::MAX / 2)]);
            for o in ops {
                now += 1;
                let before = s.clone();
                match o {
                    Op::Pins(pids) => {
                        let want: BTreeSet<u32> = pids.iter().copied().collect();
                        match s.set_pins(&pids, now) {
                            Ok(a) => {
                                prop_assert!(want.len() <= MAX_PINS);
                                k.apply(&a)?;
                                let got: BTreeSet<u32> = s.pinned().into_iter().collect();
                                prop_assert_eq!(&got, &want);
                                // Slots freed unread: those draining, or just unpinned, that are
                                // not draining now. Only when the set did not fit otherwise.
                                let released: Vec<usize> = (0..MAX_PINS)
                                    .filter(|&i| {
                                        let ending = match before.slots[i] {
                                            SlotState::Draining { .. } => true,
                                            SlotState::Pinned { pid, .. } => !want.contains(&pid),
                                            SlotState::Free => false,
                                        };
                                        ending && !matches!(s.slots[i], SlotState::Draining { .. })
                                    })
                                    .collect();
                                let busy = before.count(|x| *x != SlotState::Free);
                                let kept = before.pinned().iter().filter(|p| want.contains(p)).count();
                                if !released.is_empty() {
                                    prop_assert!(busy - kept + want.len() > MAX_PINS);
                                }
                                // A released slot is never reported.
                                ended.retain(|e| !released.contains(&e.slot));
                            }
                            Err(PinError::TooMany(n)) => {
                                prop_assert_eq!(n, want.len());
                                prop_assert!(want.len() > MAX_PINS);
                                prop_assert_eq!(&s, &before, "a refused set changed the slots");
                            }
                            Err(e) => prop_assert!(false, "unexpected {e}"),
                        }
                    }
                    Op::Exit(pid, dt) => k.apply(&s.exited(pid, now + dt))?,
                    Op::Drain(dt) => {
                        now += dt;
                        let reads = s.drain(now);
                        if reads.is_empty() {
                            prop_assert!(before.slots.iter().all(|x| *x == SlotState::Free));
                        } else {
                            k.wait();
                        }
                        // Exactly the busy slots are read, in slot order.
                        let busy: Vec<usize> = (0..MAX_PINS)
                            .filter(|&i| before.slots[i] != SlotState::Free)
                            .collect();
                        prop_assert_eq!(reads.iter().map(|r| r.slot).collect::<Vec<_>>(), busy);
                        for r in &reads {
                            let pending = ended.iter().position(|e| e.slot == r.slot);
                            match (r.last, pending) {
                                (true, Some(p)) => {
                                    let e = ended.remove(p);
                                    prop_assert_eq!(r.pid, e.pid);
                                    prop_assert_eq!(r.exited, e.exited);
                                    prop_assert!(e.until_ns <= now);
                                    prop_assert_eq!(s.slots[r.slot], SlotState::Free);
                                    k.apply(&[Action::Clear(r.slot)])?;
                                }
                                (true, None) => prop_assert!(false, "last report of a live pin"),
                                (false, _) => {
                                    prop_assert!(!r.exited);
                                    prop_assert_eq!(s.slots[r.slot], before.slots[r.slot]);
                                }
                            }
                        }
                        // No slot outlives the first drain past its end.
                        prop_assert!(ended.iter().all(|e| e.until_ns > now));
                    }
                }
                // Pins that ended in this step start waiting for their last report.
                for i in 0..MAX_PINS {
                    if let (SlotState::Pinned { pid, .. }, SlotState::Draining { pid: p, exited, until_ns })
                        = (before.slots[i], s.slots[i])
                    {
                        prop_assert_eq!(pid, p);
                        ended.push(Ended { slot: i, pid, exited, until_ns });
                    }
                    if let SlotState::Pinned { gen_, .. } = s.slots[i] {
                        if s.slots[i] != before.slots[i] {
                            // A new owner: a generation this slot never had, never zero.
                            let g = gens.entry(i).or_default();
                            prop_assert!(gen_ != 0 && !g.contains(&gen_));
                            g.push(gen_);
                        }
                    }
                }
                // A pid is in at most one pinned slot, and no two pins share a generation.
                let pinned = s.pinned();
                let distinct: BTreeSet<u32> = pinned.iter().copied().collect();
                prop_assert_eq!(distinct.len(), pinned.len());
                let live_gens: BTreeSet<u32> = s.slots.iter().filter_map(|x| match x {
                    SlotState::Pinned { gen_, .. } => Some(*gen_),
                    _ => None,
                }).collect();
                prop_assert_eq!(live_gens.len(), pinned.len());
                // The kernel agrees with the slots: same table, attached iff something is pinned.
                prop_assert_eq!(k.table, s.table());
                prop_assert_eq!(k.attached, s.any_pinned());
                for e in &ended {
                    let draining = matches!(s.slots[e.slot], SlotState::Draining { pid, .. } if pid == e.pid);
                    prop_assert!(draining, "ended pin {:?} not draining", e);
                }
                for (t, x) in k.table.pins.iter().zip(&s.slots) {
                    if let SlotState::Pinned { pid, gen_ } = *x {
                        prop_assert_eq!((pid_of(*t), gen_of(*t)), (pid, gen_));
                    }
                }
            }
            // After the final drain every ended pin was reported (or released), and all
            // that is left is pinned.
            prop_assert!(ended.is_empty(), "never reported: {:?}", ended);
            let draining = s.slots.iter().any(|x| matches!(x, SlotState::Draining { .. }));
            prop_assert!(!draining, "a slot still draining");
        }
    }
}
