//! A process's on-CPU time in 10 ms cells, and how the kernel's burst bins of one interval are
//! laid onto the cells (a bin wider than a cell is spread evenly over the cells it covers).

use std::collections::VecDeque;

use super::{CELL_NS, HISTORY_CELLS, ProcTable};
use crate::batch::Batch;

/// On-CPU ns per 10 ms cell, sparse: only cells with time in them, oldest first.
///
/// Compact, because a busy process has time in every cell of the minute kept (6,000 cells,
/// and as many again of run-queue wait): a stored pair is 8 bytes, in a deque grown by a
/// quarter at a time (not doubled) and shrunk as the history drains. Its first word is the
/// offset of its cell from `base` (24 bits) and a run length (8 bits: up to 256 cells in a row
/// that hold the same ns, as a process busy all the time has, and as an interval's wait
/// spread evenly over its cells has); its second word is the ns of each cell of the run. A
/// cell with more than `u32::MAX` ns (4.3 s in 10 ms: over 429 CPUs, or as many threads
/// waiting) goes on in further pairs of the same offset, which every reader sums.
#[derive(Clone, Debug, Default)]
pub struct Burst {
    /// The cell of offset 0.
    base: u64,
    cells: VecDeque<(u32, u32)>,
    /// The last [`Burst::window_sum`]: its cells and their sum, kept up to date by `add`.
    win: Option<Window>,
}

/// A sum over cells `first..=last`, and where its pairs start: every stored pair before
/// index `from` ends before `first` (pairs are only ever pushed at the back, and those popped
/// from the front by `trim` are taken off `from`).
#[derive(Clone, Copy, Debug)]
struct Window {
    first: u64,
    last: u64,
    sum: u64,
    from: usize,
}

/// Offsets fit in 24 bits (46 hours of cells; the history kept is a minute, and the base
/// moves up to the oldest stored cell when a new one would not fit).
const OFFSET_MAX: u32 = (1 << 24) - 1;
/// Cells in one run, at most.
const RUN_MAX: u32 = 256;

/// (offset, run, ns) of a stored pair.
fn unpack(p: (u32, u32)) -> (u32, u32, u32) {
    (p.0 & OFFSET_MAX, (p.0 >> 24) + 1, p.1)
}

fn pack(offset: u32, run: u32, ns: u32) -> (u32, u32) {
    debug_assert!(offset <= OFFSET_MAX && (1..=RUN_MAX).contains(&run));
    (offset | ((run - 1) << 24), ns)
}

impl PartialEq for Burst {
    /// The same ns in the same cells, however they are stored.
    fn eq(&self, other: &Self) -> bool {
        self.merged().eq(other.merged())
    }
}

impl Eq for Burst {}

impl Burst {
    /// (cell, ns) of every cell of every stored pair, oldest first (a cell over `u32::MAX` ns
    /// more than once).
    fn pairs(&self) -> impl DoubleEndedIterator<Item = (u64, u64)> + '_ {
        self.cells.iter().flat_map(|&p| {
            let (o, run, v) = unpack(p);
            let first = self.base + u64::from(o);
            (first..first + u64::from(run)).map(move |c| (c, u64::from(v)))
        })
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
        if let Some(w) = self.win.as_mut() {
            // The cell the time lands in (see below): the newest one, if this is not later.
            let lands = self
                .cells
                .back()
                .map(|&b| {
                    let (o, run, _) = unpack(b);
                    base + u64::from(o) + u64::from(run) - 1
                })
                .map_or(cell, |last| last.max(cell));
            if (w.first..=w.last).contains(&lands) {
                w.sum = w.sum.saturating_add(ns);
            }
        }
        if let Some(back) = self.cells.back_mut() {
            let (o, run, v) = unpack(*back);
            let last = base + u64::from(o) + u64::from(run) - 1;
            // Same cell (or, after the grid moved by a fraction of a cell, an earlier one):
            // merge into the newest cell rather than break the order.
            if last >= cell {
                let newest = o + run - 1;
                if run > 1 {
                    *back = pack(o, run - 1, v);
                    self.push(newest, u64::from(v) + ns);
                } else {
                    let put = ns.min(u64::from(u32::MAX - v));
                    *back = pack(o, 1, v + put as u32);
                    self.push(newest, ns - put);
                }
                return;
            }
            // The next cell with the same ns: one more in the run.
            if cell == last + 1 && ns == u64::from(v) && run < RUN_MAX && o + run <= OFFSET_MAX {
                *back = pack(o, run + 1, v);
                return;
            }
        }
        let o = self.offset_of(cell);
        self.push(o, ns);
    }

    /// The offset of `cell`, after every stored one: a new base when the deque is empty, or
    /// when the offset would not fit.
    fn offset_of(&mut self, cell: u64) -> u32 {
        let Some(&front) = self.cells.front() else {
            self.base = cell;
            return 0;
        };
        let fits = |base: u64| u32::try_from(cell - base).ok().filter(|&o| o <= OFFSET_MAX);
        if let Some(o) = fits(self.base) {
            return o;
        }
        let (front, _, _) = unpack(front);
        self.base += u64::from(front);
        for p in &mut self.cells {
            let (o, run, v) = unpack(*p);
            *p = pack(o - front, run, v);
        }
        fits(self.base).unwrap_or_else(|| {
            // Nothing stored is within 46 hours of it.
            self.cells.clear();
            self.win = None;
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
            self.cells.push_back(pack(o, 1, part as u32));
            ns -= part;
        }
    }

    pub(super) fn trim(&mut self, first_kept: u64) {
        if self.win.is_some_and(|w| w.first < first_kept) {
            self.win = None;
        }
        let keep = first_kept.saturating_sub(self.base);
        while let Some(front) = self.cells.front_mut() {
            let (o, run, v) = unpack(*front);
            let end = u64::from(o) + u64::from(run);
            if end <= keep {
                self.cells.pop_front();
                if let Some(w) = self.win.as_mut() {
                    w.from = w.from.saturating_sub(1);
                }
                continue;
            }
            if u64::from(o) < keep {
                // A run that starts before `first_kept`: keep its cells from there on
                // (`keep` is below its end, so it fits).
                let k = keep as u32;
                *front = pack(k, run - (k - o), v);
            }
            break;
        }
        let (len, cap) = (self.cells.len(), self.cells.capacity());
        if cap > 16 && len < cap / 2 {
            self.cells.shrink_to(len + len / 4);
        }
    }

    /// ns per cell for the `n` cells ending with `last` (inclusive), oldest first.
    pub fn dense(&self, last: u64, n: usize) -> Vec<u64> {
        let mut out = Vec::new();
        self.dense_into(last, n, &mut out);
        out
    }

    /// [`Self::dense`], lent to `f` from a buffer the thread keeps. A minute of cells is
    /// 48 KiB: allocated anew for every frame, past the allocator's 32 KiB mapping threshold
    /// (`os::residency::big_blocks_mapped`), it was a mapping made, faulted in page by page
    /// and unmapped again, several times a frame.
    pub fn with_dense<R>(&self, last: u64, n: usize, f: impl FnOnce(&[u64]) -> R) -> R {
        thread_local! {
            static BUF: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        BUF.with(|b| match b.try_borrow_mut() {
            Ok(mut b) => {
                self.dense_into(last, n, &mut b);
                f(&b)
            }
            // Called again from inside `f`: a buffer of its own.
            Err(_) => f(&self.dense(last, n)),
        })
    }

    /// [`Self::dense`] into `out`, replacing what it held.
    pub fn dense_into(&self, last: u64, n: usize, out: &mut Vec<u64>) {
        out.clear();
        out.resize(n, 0);
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
    }

    /// The sum over cells `first..=last`, found from the window asked for last time when
    /// this one starts and ends no earlier (the window of the last second slides by an
    /// interval at a time): only the cells that left it and those that came in are read, the
    /// first walked from where the last window started, the second from the newest pair
    /// back, not the second's hundred cells of every warm process (nor a binary search).
    pub(super) fn window_sum(&mut self, first: u64, last: u64) -> u64 {
        let (sum, from) = match self.win {
            Some(w) if first >= w.first && last >= w.last && first <= w.last.saturating_add(1) => {
                let (gone, from) = self.walk_from(w.from, w.first, first);
                (
                    w.sum.saturating_sub(gone) + self.newest_sum(w.last + 1, last),
                    from,
                )
            }
            _ => {
                let base = self.base;
                let from = self.cells.partition_point(|&p| {
                    let (o, run, _) = unpack(p);
                    base + u64::from(o) + u64::from(run) - 1 < first
                });
                (self.range_sum(from, first, last), from)
            }
        };
        self.win = Some(Window {
            first,
            last,
            sum,
            from,
        });
        sum
    }

    /// (start, end) cells of a stored pair.
    fn span_of(&self, p: (u32, u32)) -> (u64, u64) {
        let (o, run, _) = unpack(p);
        let start = self.base + u64::from(o);
        (start, start + u64::from(run) - 1)
    }

    /// What pair `p`, over cells `start..=end`, holds of cells `first..=last`.
    fn held(p: (u32, u32), (start, end): (u64, u64), first: u64, last: u64) -> u64 {
        let (lo, hi) = (start.max(first), end.min(last));
        if lo > hi {
            return 0;
        }
        (hi - lo + 1).saturating_mul(u64::from(p.1))
    }

    /// The sum over cells `old_first..new_first` (the cells that left the window), walking
    /// from pair `from` (every pair before it ends before `old_first`), and the first pair
    /// that does not end before `new_first`.
    fn walk_from(&self, mut from: usize, old_first: u64, new_first: u64) -> (u64, usize) {
        let mut total = 0u64;
        while let Some(&p) = self.cells.get(from) {
            let (start, end) = self.span_of(p);
            if start >= new_first {
                break;
            }
            total = total.saturating_add(Self::held(p, (start, end), old_first, new_first - 1));
            if end >= new_first {
                break;
            }
            from += 1;
        }
        (total, from)
    }

    /// The sum over cells `first..=last`, walking back from the newest pair: for the cells
    /// that came into the window, at its end.
    fn newest_sum(&self, first: u64, last: u64) -> u64 {
        if first > last {
            return 0;
        }
        let mut total = 0u64;
        for &p in self.cells.iter().rev() {
            let (start, end) = self.span_of(p);
            if end < first {
                break;
            }
            total = total.saturating_add(Self::held(p, (start, end), first, last));
        }
        total
    }

    /// The sum over cells `first..=last`, from pair `from` (every pair before it ends before
    /// `first`; runs are in cell order, and so are their ends).
    fn range_sum(&self, from: usize, first: u64, last: u64) -> u64 {
        if first > last {
            return 0;
        }
        let mut total = 0u64;
        for &p in self.cells.range(from..) {
            let (start, end) = self.span_of(p);
            if start > last {
                break;
            }
            total = total.saturating_add(Self::held(p, (start, end), first, last));
        }
        total
    }

    pub fn sum(&self, first: u64, last: u64) -> u64 {
        let mut total = 0u64;
        for &p in self.cells.iter().rev() {
            let (o, run, v) = unpack(p);
            let start = self.base + u64::from(o);
            let end = start + u64::from(run) - 1;
            if end < first {
                break;
            }
            let (lo, hi) = (start.max(first), end.min(last));
            if lo <= hi {
                total = total.saturating_add((hi - lo + 1).saturating_mul(u64::from(v)));
            }
        }
        total
    }

    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// The oldest cell with time in it.
    pub(super) fn first_cell(&self) -> Option<u64> {
        self.cells
            .front()
            .map(|&p| self.base + u64::from(unpack(p).0))
    }

    /// Pairs stored (tests: the runs are what keep it small).
    #[cfg(test)]
    pub(super) fn stored(&self) -> usize {
        self.cells.len()
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
        let mut out = Vec::new();
        self.spread_into(b, bins, ns, interval, &mut out);
        out
    }

    /// [`ProcTable::spread`] into `out` (cleared first): the fold keeps a vector per history
    /// for all its rows rather than allocate one per row and history.
    pub(super) fn spread_into(
        &self,
        b: &Batch,
        bins: &[u64],
        ns: u64,
        interval: u64,
        out: &mut Vec<(u64, u64)>,
    ) {
        out.clear();
        let w = b.bin_width_ns;
        if bins.is_empty() || w == 0 {
            // No bins (an old recording): the whole interval, evenly.
            self.spread_span(b.start_ns, b.end_ns, ns, out);
            return;
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
            self.spread_span(s, e.max(s.saturating_add(1)), v, out);
        }
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
