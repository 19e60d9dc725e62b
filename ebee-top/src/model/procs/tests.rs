//! The table's behaviour, and the incremental fold against the plain one that visits every
//! entry on every Batch (kept here as the reference).

use std::collections::BTreeSet;

use super::*;
use crate::batch::wait::{IoRow, WaitRow};
use crate::batch::{CpuRow, Exit};

impl ProcTable {
    /// The fold as it was before it was made incremental: every entry visited on every
    /// Batch. The reference `ingest` must equal (tests only).
    fn ingest_full(&mut self, b: &Batch) {
        self.begin_batch(b);
        for e in self.entries.values_mut() {
            if e.exited_ns.is_none() {
                e.last_ns = 0;
            }
            e.kernel_pinned = false;
        }
        let interval = b.interval_ns();
        for r in &b.cpu {
            let key = match self.current.get(&r.pid) {
                Some(k) => *k,
                None => self.info_for(
                    &ProcInfo {
                        pid: r.pid,
                        ..Default::default()
                    },
                    b.end_ns,
                ),
            };
            let cells = self.spread(b, &r.bins, r.ns, interval);
            if let Some(e) = self.entries.get_mut(&key) {
                e.last_ns = r.ns;
                e.total_ns += r.ns;
                e.last_charged_ns = b.end_ns;
                for (c, ns) in cells {
                    e.burst.add(c, ns);
                }
            }
        }
        for (pid, wait, read, write) in b
            .wait
            .iter()
            .map(|w| (w.pid, w.ns, 0, 0))
            .chain(b.io.iter().map(|r| (r.pid, 0, r.read_bytes, r.write_bytes)))
        {
            let key = self.key_of(pid, b.end_ns);
            let cells = |v: u64| self.spread(b, &[], v, interval);
            let (w, rd, wr) = (cells(wait), cells(read), cells(write));
            if let Some(e) = self.entries.get_mut(&key) {
                e.last_charged_ns = b.end_ns;
                for (hist, cells) in [(&mut e.wait, w), (&mut e.read, rd), (&mut e.write, wr)] {
                    for (c, v) in cells {
                        hist.add(c, v);
                    }
                }
            }
        }
        for pid in &b.pinned {
            if let Some(e) = self.current.get(pid).and_then(|k| self.entries.get_mut(k)) {
                e.kernel_pinned = true;
            }
        }
        let now_cell = self.now_cell();
        let first_kept = (now_cell + 1).saturating_sub(HISTORY_CELLS);
        let pct_first = (now_cell + 1).saturating_sub(CPU_PCT_SPAN_NS / CELL_NS);
        let exits: BTreeSet<u32> = b.exits.iter().map(|e| e.pid).collect();
        let span = CPU_PCT_SPAN_NS.min(
            self.now_ns
                .saturating_sub(self.anchor.unwrap_or(0))
                .max(CELL_NS),
        );
        for e in self.entries.values_mut() {
            e.trim(first_kept);
            if e.exited_ns.is_none() {
                e.last_second(pct_first, now_cell, span);
            }
        }
        for pid in exits {
            if let Some(e) = self.current.get(&pid).and_then(|k| self.entries.get_mut(k))
                && e.exited_ns.is_none()
            {
                e.exited_ns = Some(b.end_ns);
            }
        }
        let now = self.now_ns;
        let pins = &self.pins;
        self.entries.retain(|k, e| {
            if pins.contains(k) {
                return true;
            }
            match e.exited_ns {
                Some(t) => now.saturating_sub(t) < EXITED_KEEP_NS,
                None => {
                    now.saturating_sub(e.last_charged_ns.max(1)) < IDLE_FORGET_NS
                        || e.last_charged_ns == 0 && e.kernel_pinned
                }
            }
        });
        let entries = &self.entries;
        self.current.retain(|_, k| entries.contains_key(k));
    }
}

const MS: u64 = 1_000_000;

/// Interval `seq` (from 1) of 50 ms, starting at 1 s + (seq-1)*50 ms.
fn batch(seq: u64, rows: &[(u32, u64, &[u64])]) -> Batch {
    let start = 1_000 * MS + (seq - 1) * 50 * MS;
    rows.iter()
        .fold(
            Batch::build(seq, start, 50 * MS).bins(10 * MS),
            |b, &(pid, ns, bins)| {
                b.cpu(pid, ns, bins).proc(ProcInfo {
                    start_ticks: 100 + u64::from(pid),
                    ..ProcInfo::named(pid, format!("p{pid}"))
                })
            },
        )
        .done()
}

#[test]
fn a_20ms_burst_is_two_full_cells() {
    let mut t = ProcTable::new();
    t.ingest(&batch(1, &[(7, 20 * MS, &[0, 10 * MS, 10 * MS, 0, 0])]));
    for s in 2..=4 {
        t.ingest(&batch(s, &[]));
    }
    let e = t.by_pid(7).unwrap();
    let d = e.burst.dense(t.now_cell(), 20);
    // 4 intervals of 5 cells: the burst is cells 1 and 2 of the first.
    assert_eq!(d[..5], [0, 10 * MS, 10 * MS, 0, 0]);
    assert_eq!(d[5..].iter().sum::<u64>(), 0);
    assert_eq!(e.total_ns, 20 * MS);
}

#[test]
fn damaged_times_neither_panic_nor_spread_past_the_history() {
    // A recording can hold any numbers: an interval ending at 0, one spanning all of time.
    let mut t = ProcTable::new();
    let mut b = batch(1, &[(7, 20 * MS, &[])]);
    b.start_ns = 5;
    b.end_ns = 0;
    t.ingest(&b);
    let mut b = batch(2, &[(7, 20 * MS, &[10 * MS, 10 * MS])]);
    b.start_ns = 0;
    b.end_ns = u64::MAX;
    t.ingest(&b);
    let mut b = batch(3, &[(8, 20 * MS, &[])]);
    b.start_ns = u64::MAX - 1;
    b.end_ns = u64::MAX;
    t.ingest(&b);
    let mut b = batch(4, &[]);
    b.start_ns = 0;
    b.end_ns = u64::MAX;
    let cells = t.spread(&b, &[10 * MS, 10 * MS], 20 * MS, b.interval_ns());
    assert!(
        cells.len() as u64 <= 2 * (HISTORY_CELLS + 1),
        "{}",
        cells.len()
    );
    assert_eq!(cells.iter().map(|c| c.1).sum::<u64>(), 20 * MS);
}

#[test]
fn a_burst_keeps_exact_ns_in_its_compact_cells() {
    // A cell over u32::MAX ns (430 CPUs' worth in 10 ms) goes on in a second pair, summed.
    let big = u64::from(u32::MAX) + 5;
    let mut b = Burst::default();
    b.add(7, 3);
    b.add(7, big);
    b.add(6, 1); // an earlier cell merges into the newest
    b.add(9, 2);
    assert_eq!(b.sum(0, 100), big + 6);
    assert_eq!(b.dense(9, 4), vec![0, big + 4, 0, 2]);
    let mut c = Burst::default();
    c.add(7, big + 4);
    c.add(9, 2);
    assert_eq!(b, c, "the same ns per cell, stored in other pairs");
    c.add(9, 1);
    assert_ne!(b, c);
    // A cell past the offset range (24 bits) moves the base to the oldest stored cell...
    let far = 8 + (1 << 24);
    b.trim(9);
    b.add(far, 4);
    assert_eq!(b.first_cell(), Some(9));
    assert_eq!(b.sum(0, u64::MAX), 6);
    assert_eq!(b.dense(far, 1), vec![4]);
    // ...and one 46 hours past everything stored starts over.
    b.add(far + far, 8);
    assert_eq!(b.first_cell(), Some(far + far));
    assert_eq!(b.sum(0, u64::MAX), 8);
    // Trimmed empty, it holds no memory.
    b.trim(u64::MAX);
    assert!(b.is_empty());
}

#[test]
fn short_history_is_right_aligned() {
    let mut t = ProcTable::new();
    t.ingest(&batch(1, &[(7, 10 * MS, &[0, 0, 0, 0, 10 * MS])]));
    let d = t.by_pid(7).unwrap().burst.dense(t.now_cell(), 8);
    assert_eq!(d, vec![0, 0, 0, 0, 0, 0, 0, 10 * MS]);
}

#[test]
fn history_covers_a_minute_and_no_more() {
    let mut t = ProcTable::new();
    let full: &[u64] = &[10 * MS; 5];
    for s in 1..=1300 {
        t.ingest(&batch(s, &[(1, 50 * MS, full)]));
    }
    let e = t.by_pid(1).unwrap();
    let d = e.burst.dense(t.now_cell(), HISTORY_CELLS as usize + 10);
    assert_eq!(d.iter().filter(|v| **v == 10 * MS).count(), 6000);
    assert_eq!(d[..10], [0; 10]);
    assert!((e.cpu_pct - 100.0).abs() < 1e-6, "{}", e.cpu_pct);
}

#[test]
fn wide_bins_are_spread_evenly() {
    let mut t = ProcTable::new();
    let mut b = batch(1, &[(3, 40 * MS, &[40 * MS])]);
    b.bin_width_ns = 40 * MS;
    b.end_ns = b.start_ns + 40 * MS;
    t.ingest(&b);
    let e = t.by_pid(3).unwrap();
    assert_eq!(e.burst.dense(t.now_cell(), 4), vec![10 * MS; 4]);
}

#[test]
fn exited_processes_stay_a_few_seconds_with_their_cpu() {
    let mut t = ProcTable::new();
    let mut b = batch(1, &[(9, 30 * MS, &[10 * MS, 10 * MS, 10 * MS, 0, 0])]);
    b.exits.push(Exit { pid: 9, ts_ns: 0 });
    t.ingest(&b);
    let top = t.ranked(5, "");
    assert_eq!(top.len(), 1);
    assert!(top[0].exited());
    let pct = top[0].cpu_pct;
    assert!(pct > 0.0);
    // Still there, same CPU, for a few seconds of intervals; gone after.
    for s in 2..=90 {
        t.ingest(&batch(s, &[(1, MS, &[MS, 0, 0, 0, 0])]));
    }
    let e = t.by_pid(9).unwrap();
    assert!(e.exited() && e.cpu_pct == pct);
    assert!(t.ranked(5, "").iter().any(|e| e.key.pid == 9));
    for s in 91..=110 {
        t.ingest(&batch(s, &[]));
    }
    assert!(t.by_pid(9).is_none());
}

#[test]
fn a_reused_pid_is_a_new_process() {
    let mut t = ProcTable::new();
    t.ingest(&batch(1, &[(5, MS, &[MS])]));
    let old = t.by_pid(5).unwrap().key;
    let mut b = batch(2, &[(5, 2 * MS, &[2 * MS])]);
    b.procs[0].start_ticks = 999;
    b.procs[0].comm = "new".into();
    t.ingest(&b);
    let new = t.by_pid(5).unwrap();
    assert_ne!(new.key, old);
    assert_eq!(&*new.comm, "new");
    assert_eq!(new.total_ns, 2 * MS);
    assert!(t.get(&old).unwrap().exited());
}

#[test]
fn pins_survive_ranking_and_exit() {
    let mut t = ProcTable::new();
    t.ingest(&batch(
        1,
        &[(1, 40 * MS, &[]), (2, 30 * MS, &[]), (3, MS, &[])],
    ));
    let k3 = t.by_pid(3).unwrap().key;
    assert!(t.toggle_pin(k3));
    let top: Vec<u32> = t.ranked(2, "").iter().map(|e| e.key.pid).collect();
    assert_eq!(top, vec![3, 1], "pinned first, then the heaviest");
    assert_eq!(t.live_pins(), vec![3]);
    let mut b = batch(2, &[(1, 40 * MS, &[])]);
    b.exits.push(Exit { pid: 3, ts_ns: 0 });
    t.ingest(&b);
    for s in 3..=400 {
        t.ingest(&batch(s, &[(1, 40 * MS, &[])]));
    }
    let e = t.get(&k3).unwrap();
    assert!(e.exited());
    assert!(t.ranked(2, "").iter().any(|e| e.key == k3));
    assert!(t.live_pins().is_empty(), "the kernel no longer follows it");
    assert!(!t.toggle_pin(k3));
    t.ingest(&batch(401, &[]));
    assert!(t.get(&k3).is_none());
}

#[test]
fn filter_by_name_or_pid() {
    let mut t = ProcTable::new();
    t.ingest(&batch(1, &[(10, 2 * MS, &[]), (11, MS, &[])]));
    let pids = |f: &str| -> Vec<u32> { t.ranked(9, f).iter().map(|e| e.key.pid).collect() };
    assert_eq!(pids("P11"), vec![11]);
    assert_eq!(pids("10"), vec![10]);
    assert_eq!(pids("p1"), vec![10, 11]);
    assert!(pids("zzz").is_empty());
}

#[test]
fn the_grid_follows_a_new_phase() {
    let mut t = ProcTable::new();
    t.ingest(&batch(1, &[(1, 10 * MS, &[10 * MS, 0, 0, 0, 0])]));
    // The next interval starts 5 ms off the grid (after an interval change).
    let mut b = batch(2, &[(1, 10 * MS, &[0, 10 * MS, 0, 0, 0])]);
    b.start_ns += 5 * MS;
    b.end_ns += 5 * MS;
    t.ingest(&b);
    let d = t.by_pid(1).unwrap().burst.dense(t.now_cell(), 11);
    // The 10 ms bin lands in one whole cell, not split over two.
    assert_eq!(d.iter().filter(|v| **v == 10 * MS).count(), 2, "{d:?}");
}

/// One Batch of the equivalence test, in the shape proptest makes.
#[derive(Clone, Debug)]
struct Step {
    /// Gap before the interval: 0 mostly, sometimes seconds or over a minute.
    gap_ms: u64,
    /// Interval length, ms, and an offset off the 10 ms grid.
    len_ms: u64,
    phase_ms: u64,
    /// (pid, generation, ns, bins) charged; the generation makes the start time, so a
    /// new one is a reused pid.
    cpu: Vec<(u32, u64, u64, Vec<u64>)>,
    /// Processes named without a charge (memory rows, exits): (pid, generation).
    named: Vec<(u32, u64)>,
    exits: Vec<u32>,
    kernel_pinned: Vec<u32>,
    /// Pins the user toggles before the Batch: (pid, generation).
    toggles: Vec<(u32, u64)>,
    /// Waits and disk bytes charged: (pid, wait ns, read bytes, written bytes).
    waits: Vec<(u32, u64, u64, u64)>,
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    (
        prop_oneof![8 => Just(0u64), 1 => Just(2_000u64), 1 => Just(61_000u64)],
        prop_oneof![6 => Just(50u64), 1 => Just(20u64), 1 => Just(1_000u64)],
        prop_oneof![6 => Just(0u64), 1 => 1u64..10],
        proptest::collection::vec(
            (
                0u32..12,
                0u64..2,
                0u64..60_000_000,
                proptest::collection::vec(0u64..10_000_000, 0..6),
            ),
            0..6,
        ),
        proptest::collection::vec((0u32..12, 0u64..2), 0..3),
        proptest::collection::vec(0u32..12, 0..2),
        proptest::collection::vec(0u32..12, 0..2),
        proptest::collection::vec((0u32..12, 0u64..3), 0..2),
        proptest::collection::vec(
            (
                0u32..12,
                0u64..80_000_000,
                prop_oneof![3 => Just(0u64), 1 => 0u64..1 << 24],
                prop_oneof![3 => Just(0u64), 1 => 0u64..1 << 24],
            ),
            0..4,
        ),
    )
        .prop_map(
            |(gap_ms, len_ms, phase_ms, cpu, named, exits, kernel_pinned, toggles, waits)| Step {
                gap_ms,
                len_ms,
                phase_ms,
                cpu,
                named,
                exits,
                kernel_pinned,
                toggles,
                waits,
            },
        )
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
    /// The incremental fold leaves the same table as visiting every entry on every Batch:
    /// charges, waits and disk bytes, reused pids, exits, pins of both kinds, idle minutes,
    /// interval changes.
    #[test]
    fn incremental_ingest_equals_the_full_walk(
        steps in proptest::collection::vec(step(), 1..80),
    ) {
        let mut fast = ProcTable::new();
        let mut full = ProcTable::new();
        let mut t = 1_000 * MS;
        for (i, st) in steps.into_iter().enumerate() {
            t += st.gap_ms * MS + st.phase_ms * MS;
            let start = t;
            t += st.len_ms * MS;
            let info = |pid: u32, generation: u64| ProcInfo {
                pid,
                start_ticks: 1 + generation,
                comm: format!("p{pid}.{generation}").into(),
                ..Default::default()
            };
            let b = Batch {
                seq: i as u64 + 1,
                start_ns: start,
                end_ns: t,
                bin_width_ns: 10 * MS,
                cpu: st
                    .cpu
                    .iter()
                    .map(|(pid, _, ns, bins)| CpuRow {
                        pid: *pid,
                        ns: *ns,
                        bins: bins.clone(),
                    })
                    .collect(),
                procs: st
                    .cpu
                    .iter()
                    .map(|(pid, g, _, _)| info(*pid, *g))
                    .chain(st.named.iter().map(|(pid, g)| info(*pid, *g)))
                    .collect(),
                exits: st
                    .exits
                    .iter()
                    .map(|&pid| Exit { pid, ts_ns: t })
                    .collect(),
                pinned: st.kernel_pinned.clone(),
                wait: st
                    .waits
                    .iter()
                    .filter(|w| w.1 > 0)
                    .map(|&(pid, ns, _, _)| WaitRow { pid, ns })
                    .collect(),
                io: st
                    .waits
                    .iter()
                    .filter(|w| w.2 + w.3 > 0)
                    .map(|&(pid, _, read_bytes, write_bytes)| IoRow {
                        pid,
                        read_bytes,
                        write_bytes,
                    })
                    .collect(),
                ..Default::default()
            };
            for &(pid, g) in &st.toggles {
                // Generation 2: a pin by pid alone (`-p`).
                let key = ProcKey { pid, start_ticks: if g == 2 { 0 } else { 1 + g } };
                fast.toggle_pin(key);
                full.toggle_pin(key);
            }
            fast.ingest(&b);
            full.ingest_full(&b);
            proptest::prop_assert_eq!(&fast.entries, &full.entries, "after batch {}", i + 1);
            proptest::prop_assert_eq!(&fast.current, &full.current);
            proptest::prop_assert_eq!(&fast.pins, &full.pins);
            proptest::prop_assert_eq!(fast.now_cell(), full.now_cell());
        }
    }
}

#[test]
fn equal_cells_in_a_row_are_stored_as_runs() {
    // A process busy all the time: 10 ms in each of 600 cells, in 3 pairs (runs of 256).
    let mut b = Burst::default();
    for c in 100..700 {
        b.add(c, 10 * MS);
    }
    assert_eq!(b.stored(), 3);
    assert_eq!(b.sum(0, u64::MAX), 600 * 10 * MS);
    assert_eq!(b.sum(650, 651), 20 * MS);
    assert_eq!(b.dense(701, 4), vec![10 * MS, 10 * MS, 0, 0]);
    assert_eq!(b.first_cell(), Some(100));
    // Trimmed in the middle of a run, the rest of the run stays.
    b.trim(300);
    assert_eq!(b.first_cell(), Some(300));
    assert_eq!(b.sum(0, u64::MAX), 400 * 10 * MS);
    // More in the newest cell splits it off its run; the same cells one by one are equal.
    b.add(699, 5);
    b.add(698, 1); // an earlier cell merges into the newest, as before
    let mut one = Burst::default();
    for c in 300..700 {
        one.add(c, 10 * MS);
    }
    assert_ne!(b, one);
    one.add(699, 6);
    assert_eq!(b, one);
    assert_eq!(b.dense(700, 3), vec![10 * MS, 10 * MS + 6, 0]);
    // A wait spread over an interval's cells: 4 equal and 1 with the remainder, 2 pairs.
    let mut w = Burst::default();
    for (c, v) in [(0, 7), (1, 7), (2, 7), (3, 7), (4, 9)] {
        w.add(c, v);
    }
    assert_eq!(w.stored(), 2);
    assert_eq!(w.dense(4, 5), vec![7, 7, 7, 7, 9]);
    // A gap ends a run.
    w.add(6, 9);
    assert_eq!(w.stored(), 3);
    assert_eq!(w.sum(5, 6), 9);
}

#[test]
fn a_run_at_a_time_sum_equals_the_sum_of_its_cells() {
    // Runs, gaps, an oversized cell and a moved base: every window's sum is the cells' own.
    let mut b = Burst::default();
    for c in 10..400 {
        b.add(c, 10 * MS);
    }
    for c in (420..500).step_by(3) {
        b.add(c, c);
    }
    b.add(510, u64::from(u32::MAX) + 9);
    b.trim(150);
    let cells = b.dense(600, 600);
    let naive = |first: u64, last: u64| -> u64 {
        (first..=last.min(600)).map(|c| cells[c as usize - 1]).sum()
    };
    for (first, last) in [
        (1, 600),
        (150, 150),
        (149, 151),
        (399, 421),
        (400, 419),
        (421, 423),
        (500, 510),
        (511, 600),
        (200, 100),
        (300, 455),
    ] {
        assert_eq!(b.sum(first, last), naive(first, last), "{first}..={last}");
    }
}

proptest::proptest! {
    /// The sliding window sum kept from call to call equals the plain sum over the same cells,
    /// whatever was added (runs, the newest cell again, earlier cells, huge cells), trimmed,
    /// and asked for (sliding forward, jumping, going back).
    #[test]
    fn window_sums_equal_plain_sums(
        steps in proptest::collection::vec((0u8..6, 0u64..40, 0u64..3_000_000_000), 1..300)
    ) {
        let mut b = Burst::default();
        let mut now = 1_000u64;
        let mut first_kept = 0u64;
        for (op, x, ns) in steps {
            match op {
                // Time in a cell at or after the newest (the usual case) ...
                0 | 1 => {
                    now += x % 4;
                    b.add(now, ns % 30_000_000);
                }
                // ... a huge one, or one before the newest (merged into it).
                2 => b.add(now.saturating_sub(x % 3), ns),
                3 => {
                    first_kept = first_kept.max(now.saturating_sub(200 + x));
                    b.trim(first_kept);
                }
                // A window sliding with the clock, or any other.
                4 => {
                    let first = now.saturating_sub(100);
                    proptest::prop_assert_eq!(b.window_sum(first, now), b.sum(first, now));
                }
                _ => {
                    let first = now.saturating_sub(x * 5);
                    let last = first + x;
                    proptest::prop_assert_eq!(b.window_sum(first, last), b.sum(first, last));
                }
            }
        }
        let first = now.saturating_sub(100);
        proptest::prop_assert_eq!(b.window_sum(first, now), b.sum(first, now));
    }
}
