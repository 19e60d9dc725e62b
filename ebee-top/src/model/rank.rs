//! A last-known value per process kept in ranked order, so "the k largest" costs O(k) to read
//! and O(log n) per change to keep, instead of a sort of every known process on each call.
//! ebee-top's own cost must not grow with the number of processes alive: most of them never
//! change between two intervals, so only the ones that did are touched.
//!
//! Used for resident memory both where the Batches are made (the kernel drain's table of every
//! process's RSS) and in the Model (what the Batches told).

use std::cmp::Reverse;
use std::collections::BTreeSet;

// foldhash, not SipHash: the keys are ids the kernel chose (pids, tids, cgroup ids), not a
// flood an attacker can aim, and its RandomState is still seeded per process.
use foldhash::HashMap;

/// Value per pid plus an index ordered largest first, ties by the smaller pid.
#[derive(Clone, Debug, Default)]
pub struct Ranked {
    by_pid: HashMap<u32, u64>,
    order: BTreeSet<(Reverse<u64>, u32)>,
}

impl Ranked {
    pub fn new() -> Self {
        Self::default()
    }

    /// Set `pid`'s value; returns the previous one.
    pub fn insert(&mut self, pid: u32, value: u64) -> Option<u64> {
        let old = self.by_pid.insert(pid, value);
        match old {
            Some(o) if o == value => return old,
            Some(o) => {
                self.order.remove(&(Reverse(o), pid));
            }
            None => {}
        }
        self.order.insert((Reverse(value), pid));
        old
    }

    /// Forget `pid`; returns its value.
    pub fn remove(&mut self, pid: u32) -> Option<u64> {
        let old = self.by_pid.remove(&pid)?;
        self.order.remove(&(Reverse(old), pid));
        Some(old)
    }

    pub fn get(&self, pid: u32) -> Option<u64> {
        self.by_pid.get(&pid).copied()
    }

    pub fn contains(&self, pid: u32) -> bool {
        self.by_pid.contains_key(&pid)
    }

    /// Every (pid, value), largest first, ties by pid. Lazy: taking k costs O(k).
    pub fn iter(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.order.iter().map(|(Reverse(v), p)| (*p, *v))
    }

    /// The `n` largest, largest first (ties by pid).
    pub fn top(&self, n: usize) -> Vec<(u32, u64)> {
        self.iter().take(n).collect()
    }

    pub fn len(&self) -> usize {
        self.by_pid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_pid.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The ranking a full sort gives: largest first, ties by pid.
    fn sorted(m: &HashMap<u32, u64>) -> Vec<(u32, u64)> {
        let mut v: Vec<(u32, u64)> = m.iter().map(|(p, x)| (*p, *x)).collect();
        v.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }

    #[derive(Clone, Debug)]
    enum Op {
        Set(u32, u64),
        Remove(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few pids and few values: the same pid is set again and values tie often.
        prop_oneof![
            3 => (0u32..40, 0u64..8).prop_map(|(p, v)| Op::Set(p, v)),
            1 => (0u32..40).prop_map(Op::Remove),
        ]
    }

    proptest! {
        #[test]
        fn equals_a_full_sort_after_any_updates_and_removals(
            ops in proptest::collection::vec(op(), 0..300),
            k in 0usize..50,
        ) {
            let mut r = Ranked::new();
            let mut truth: HashMap<u32, u64> = HashMap::default();
            for o in ops {
                match o {
                    Op::Set(p, v) => prop_assert_eq!(r.insert(p, v), truth.insert(p, v)),
                    Op::Remove(p) => prop_assert_eq!(r.remove(p), truth.remove(&p)),
                }
            }
            let full = sorted(&truth);
            prop_assert_eq!(r.iter().collect::<Vec<_>>(), full.clone());
            prop_assert_eq!(r.top(k), full.into_iter().take(k).collect::<Vec<_>>());
            prop_assert_eq!(r.len(), truth.len());
            for p in 0..40 {
                prop_assert_eq!(r.get(p), truth.get(&p).copied());
            }
        }
    }

    #[test]
    fn setting_the_same_value_again_keeps_one_index_entry() {
        let mut r = Ranked::new();
        r.insert(1, 5);
        r.insert(1, 5);
        r.insert(2, 7);
        r.insert(1, 9);
        assert_eq!(r.top(5), vec![(1, 9), (2, 7)]);
        assert_eq!(r.remove(1), Some(9));
        assert_eq!(r.remove(1), None);
        assert_eq!(r.top(5), vec![(2, 7)]);
    }
}
