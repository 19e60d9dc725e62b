//! A process's on-CPU time in 10 ms cells, and how the kernel's burst bins of one interval are
//! laid onto the cells (a bin wider than a cell is spread evenly over the cells it covers).

use std::collections::VecDeque;

use super::{CELL_NS, HISTORY_CELLS, ProcTable};
use crate::batch::Batch;

/// On-CPU ns per 10 ms cell, sparse: only cells with time in them, oldest first.
///
/// Compact, because a busy process has time in every cell of the minute kept (6,000 cells,
/// and as many again of run-queue wait): a cell is its offset from `base` and its ns, both
/// `u32`, 8 bytes where (u64, u64) took 16, in a deque grown by a quarter at a time (not
/// doubled) and shrunk as the history drains. A cell with more than `u32::MAX` ns (4.3 s in
/// 10 ms: over 429 CPUs, or as many threads waiting) goes on in further pairs of the same
/// offset, which every reader sums.
#[derive(Clone, Debug, Default)]
pub struct Burst {
    /// The cell of offset 0.
    base: u64,
    cells: VecDeque<(u32, u32)>,
}

impl PartialEq for Burst {
    /// The same ns in the same cells, however they are stored.
    fn eq(&self, other: &Self) -> bool {
        self.merged().eq(other.merged())
    }
}

impl Eq for Burst {}

impl Burst {
    /// (cell, ns) of every stored pair, oldest first (a cell over `u32::MAX` ns more than once).
    fn pairs(&self) -> impl DoubleEndedIterator<Item = (u64, u64)> + '_ {
        self.cells
            .iter()
            .map(|&(o, v)| (self.base + u64::from(o), u64::from(v)))
    }

    /// (cell, ns) with each cell once.
    fn merged(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut it = self.pairs().peekable();
        std::iter::from_fn(move || {
            let (c, mut v) = it.next()?;
            while let Some(&(c2, v2)) = it.peek()
                && c2 == c
            {
                v += v2;
                it.next();
            }
            Some((c, v))
        })
    }

    pub(super) fn add(&mut self, cell: u64, ns: u64) {
        if ns == 0 {
            return;
        }
        let base = self.base;
        // Same cell (or, after the grid moved by a fraction of a cell, an earlier one): merge
        // rather than break the order.
        if let Some((o, v)) = self.cells.back_mut()
            && base + u64::from(*o) >= cell
        {
            let put = ns.min(u64::from(u32::MAX - *v));
            *v += put as u32;
            let o = *o;
            self.push(o, ns - put);
            return;
        }
        let o = self.offset_of(cell);
        self.push(o, ns);
    }

    /// The offset of `cell`, at or after the newest stored one: a new base when the deque is
    /// empty, or when the offset would not fit (after 497 days of one process's history).
    fn offset_of(&mut self, cell: u64) -> u32 {
        let Some(&(front, _)) = self.cells.front() else {
            self.base = cell;
            return 0;
        };
        if let Ok(o) = u32::try_from(cell - self.base) {
            return o;
        }
        self.base += u64::from(front);
        for p in &mut self.cells {
            p.0 -= front;
        }
        u32::try_from(cell - self.base).unwrap_or_else(|_| {
            // Nothing stored is within 497 days of it.
            self.cells.clear();
            self.base = cell;
            0
        })
    }

    fn push(&mut self, o: u32, mut ns: u64) {
        while ns > 0 {
            if self.cells.len() == self.cells.capacity() {
                self.cells.reserve_exact((self.cells.len() / 4).max(8));
            }
            let part = ns.min(u64::from(u32::MAX));
            self.cells.push_back((o, part as u32));
            ns -= part;
        }
    }

    pub(super) fn trim(&mut self, first_kept: u64) {
        let keep = first_kept.saturating_sub(self.base);
        while self
            .cells
            .front()
            .is_some_and(|&(o, _)| u64::from(o) < keep)
        {
            self.cells.pop_front();
        }
        let (len, cap) = (self.cells.len(), self.cells.capacity());
        if cap > 16 && len < cap / 2 {
            self.cells.shrink_to(len + len / 4);
        }
    }

    /// ns per cell for the `n` cells ending with `last` (inclusive), oldest first.
    pub fn dense(&self, last: u64, n: usize) -> Vec<u64> {
        let mut out = vec![0u64; n];
        for (c, v) in self.pairs().rev() {
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
        self.pairs()
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
        self.cells.front().map(|&(o, _)| self.base + u64::from(o))
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
