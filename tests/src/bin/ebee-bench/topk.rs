//! Scoring a sketch's ranking for the precision benchmarks: tie-aware precision@k against the
//! exact shadow, accumulated over intervals; and sketches of any shape that replay the
//! kernel's own update trace through the same `hashpipe::update`, for the sweeps.

use std::collections::HashMap;

use ebee_shared::cpu::CpuTrace;
use ebee_shared::hashpipe::{self, Slot};
use ebee_shared::mem::MemTrace;
use serde_json::json;

/// The k of every precision@k reported.
pub const KS: [usize; 5] = [1, 5, 10, 20, 30];

/// Tie-aware precision@k: a reported pid counts when its exact value is at least the exact
/// k-th largest value. None when fewer than k processes ran.
fn precision_at(k: usize, reported: &[(u32, u64)], exact: &HashMap<u32, u64>) -> Option<f64> {
    let mut vals: Vec<u64> = exact.values().copied().collect();
    if vals.len() < k {
        return None;
    }
    vals.sort_unstable_by(|a, b| b.cmp(a));
    let kth = vals[k - 1];
    let hits = reported
        .iter()
        .take(k)
        .filter(|(pid, _)| exact.get(pid).is_some_and(|v| *v >= kth))
        .count();
    Some(hits as f64 / k as f64)
}

/// Precision@k for every k asked for (those of `KS` by default), averaged over the intervals
/// where it is defined.
pub struct Acc {
    ks: Vec<usize>,
    sum: Vec<f64>,
    n: Vec<u32>,
}

impl Default for Acc {
    fn default() -> Self {
        Self::with_ks(&KS)
    }
}

impl Acc {
    /// Precision at each of `ks`.
    pub fn with_ks(ks: &[usize]) -> Self {
        Self {
            ks: ks.to_vec(),
            sum: vec![0.0; ks.len()],
            n: vec![0; ks.len()],
        }
    }

    pub fn add(&mut self, reported: &[(u32, u64)], exact: &HashMap<u32, u64>) {
        for (i, k) in self.ks.iter().enumerate() {
            if let Some(p) = precision_at(*k, reported, exact) {
                self.sum[i] += p;
                self.n[i] += 1;
            }
        }
    }
    pub fn json(&self) -> serde_json::Value {
        let v: Vec<serde_json::Value> = self
            .ks
            .iter()
            .enumerate()
            .map(|(i, k)| {
                json!({"k": k, "intervals": self.n[i],
                       "precision": if self.n[i] > 0 { self.sum[i] / f64::from(self.n[i]) } else { f64::NAN }})
            })
            .collect();
        json!(v)
    }
}

/// One record of a kernel update trace: the CPU whose sketch took it, and the entry.
pub trait Traced {
    type Slot: Slot + Default;
    fn cpu(&self) -> u32;
    fn slot(&self) -> Self::Slot;
}

impl Traced for CpuTrace {
    type Slot = ebee_shared::cpu::CpuSlot;
    fn cpu(&self) -> u32 {
        self.cpu
    }
    fn slot(&self) -> Self::Slot {
        self.slot
    }
}

impl Traced for MemTrace {
    type Slot = ebee_shared::mem::MemSlot;
    fn cpu(&self) -> u32 {
        self.cpu
    }
    fn slot(&self) -> Self::Slot {
        self.slot
    }
}

/// Which update a replayed sketch runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Update {
    /// `hashpipe::update`: plain HashPipe.
    Pipe,
    /// `hashpipe::update_keep`: one slot per key, residents kept against lighter entries.
    Keep,
}

impl Update {
    pub fn name(self) -> &'static str {
        match self {
            Self::Pipe => "hashpipe",
            Self::Keep => "keep",
        }
    }
}

/// Per-CPU sketches of `D` stages x `W` slots, for the replay sweep.
pub struct Shape<S, const D: usize, const W: usize> {
    cpus: Vec<[[S; W]; D]>,
    update: Update,
}

impl<S: Slot + Default, const D: usize, const W: usize> Shape<S, D, W> {
    pub fn with_update(ncpus: usize, update: Update) -> Self {
        Self {
            cpus: vec![[[S::default(); W]; D]; ncpus],
            update,
        }
    }

    /// Replay one interval's trace into empty sketches; every slot of every CPU after it.
    pub fn replay<T: Traced<Slot = S>>(
        &mut self,
        trace: &[T],
    ) -> impl Iterator<Item = &S> + use<'_, S, T, D, W> {
        for s in &mut self.cpus {
            *s = [[S::default(); W]; D];
        }
        for r in trace {
            if let Some(s) = self.cpus.get_mut(r.cpu() as usize) {
                let _ = match self.update {
                    Update::Pipe => hashpipe::update(s, r.slot()),
                    Update::Keep => hashpipe::update_keep(s, r.slot()),
                };
            }
        }
        self.cpus.iter().flat_map(|c| c.iter().flatten())
    }
}

/// One shape of the sweep: an interval's trace in, its reading out.
pub type Replay<T, R> = Box<dyn FnMut(&[T]) -> R>;

/// `(stages, slots, replay)` for each listed shape:
/// `shapes!(TraceType => Reading, read; ncpus; (d, w), ...)` where `read` turns the replayed
/// slots into the `Reading`.
macro_rules! shapes {
    ($trace:ty => $out:ty, $read:expr; $ncpus:expr; $(($d:literal, $w:literal)),* $(,)?) => {
        $crate::topk::shapes!($trace => $out, $read; $ncpus; $crate::topk::Update::Pipe;
            $(($d, $w)),*)
    };
    ($trace:ty => $out:ty, $read:expr; $ncpus:expr; $update:expr;
     $(($d:literal, $w:literal)),* $(,)?) => {{
        let v: Vec<(usize, usize, $crate::topk::Replay<$trace, $out>)> = vec![
            $({
                let mut s = $crate::topk::Shape::<
                    <$trace as $crate::topk::Traced>::Slot, $d, $w
                >::with_update($ncpus, $update);
                (
                    $d,
                    $w,
                    Box::new(move |t: &[$trace]| $read(s.replay(t)))
                        as $crate::topk::Replay<$trace, $out>,
                )
            }),*
        ];
        v
    }};
}
pub(crate) use shapes;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precision_is_tie_aware() {
        let exact: HashMap<u32, u64> = [(1, 10), (2, 5), (3, 5), (4, 1)].into_iter().collect();
        // Top-2 is {1, 2 or 3}: reporting 3 second is correct.
        assert_eq!(precision_at(2, &[(1, 10), (3, 5)], &exact), Some(1.0));
        assert_eq!(precision_at(2, &[(1, 10), (4, 1)], &exact), Some(0.5));
        assert_eq!(precision_at(5, &[(1, 10)], &exact), None);
    }
}
