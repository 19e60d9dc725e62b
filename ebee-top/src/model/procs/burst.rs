//! A process's on-CPU time in 10 ms cells, and how the kernel's burst bins of one interval are
//! laid onto the cells (a bin wider than a cell is spread evenly over the cells it covers).

use std::collections::VecDeque;

use super::{CELL_NS, HISTORY_CELLS, ProcTable};
use crate::batch::Batch;

/// On-CPU ns per 10 ms cell, sparse: only cells with time in them, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Burst {
    cells: VecDeque<(u64, u64)>,
}

impl Burst {
    pub(super) fn add(&mut self, cell: u64, ns: u64) {
        if ns == 0 {
            return;
        }
        match self.cells.back_mut() {
            // Same cell (or, after the grid moved by a fraction of a cell, an earlier one):
            // merge rather than break the order.
            Some((c, v)) if *c >= cell => *v += ns,
            _ => self.cells.push_back((cell, ns)),
        }
    }

    pub(super) fn trim(&mut self, first_kept: u64) {
        while self.cells.front().is_some_and(|(c, _)| *c < first_kept) {
            self.cells.pop_front();
        }
    }

    /// ns per cell for the `n` cells ending with `last` (inclusive), oldest first.
    pub fn dense(&self, last: u64, n: usize) -> Vec<u64> {
        let mut out = vec![0u64; n];
        for &(c, v) in self.cells.iter().rev() {
            if c > last {
                continue;
            }
            // Right-aligned on `last`, also when there is less history than `n` cells.
            let back = (last - c) as usize;
            if back >= n {
                break;
            }
            out[n - 1 - back] += v;
        }
        out
    }

    /// Sum of the cells from `first` to `last` inclusive.
    pub fn sum(&self, first: u64, last: u64) -> u64 {
        self.cells
            .iter()
            .rev()
            .take_while(|(c, _)| *c >= first)
            .filter(|(c, _)| *c <= last)
            .map(|(_, v)| v)
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// The oldest cell with time in it.
    pub(super) fn first_cell(&self) -> Option<u64> {
        self.cells.front().map(|(c, _)| *c)
    }
}

impl ProcTable {
    /// The kernel's bins of one row as (cell, ns) pairs. Bin `i` covers
    /// `[start + i*w, start + (i+1)*w)` (the last one up to the interval's end); a bin wider
    /// than a cell (long intervals) is spread evenly over the cells it covers.
    pub(super) fn spread(
        &self,
        b: &Batch,
        bins: &[u64],
        ns: u64,
        interval: u64,
    ) -> Vec<(u64, u64)> {
        let w = b.bin_width_ns;
        let mut out = Vec::new();
        if bins.is_empty() || w == 0 {
            // No bins (an old recording): the whole interval, evenly.
            self.spread_span(b.start_ns, b.end_ns, ns, &mut out);
            return out;
        }
        let n = bins.len();
        // Saturating: a damaged recording's times can be anything.
        for (i, &v) in bins.iter().enumerate() {
            let off = (i as u64).saturating_mul(w);
            let s = b.start_ns.saturating_add(off);
            let e = if i + 1 == n {
                b.start_ns
                    .saturating_add(interval.max(off.saturating_add(1)))
            } else {
                s.saturating_add(w)
            };
            self.spread_span(s, e.max(s.saturating_add(1)), v, &mut out);
        }
        out
    }

    fn spread_span(&self, s: u64, e: u64, v: u64, out: &mut Vec<(u64, u64)>) {
        // An empty or reversed span (a damaged recording) holds nothing.
        if v == 0 || e <= s {
            return;
        }
        let last = self.cell_of(e - 1);
        // Never more cells than the history keeps: a damaged recording's span can be years.
        let first = self.cell_of(s).max(last.saturating_sub(HISTORY_CELLS));
        if first == last {
            out.push((first, v));
            return;
        }
        let len = (e - s) as u128;
        let mut given = 0u64;
        for c in first..=last {
            let at = |c: u64| {
                self.anchor
                    .unwrap_or(0)
                    .saturating_add(c.saturating_mul(CELL_NS))
            };
            let (cs, ce) = (at(c).max(s), at(c + 1).min(e));
            let part = if c == last {
                v.saturating_sub(given)
            } else {
                ((u128::from(v) * u128::from(ce.saturating_sub(cs)) / len) as u64).min(v - given)
            };
            given += part;
            out.push((c, part));
        }
    }
}
