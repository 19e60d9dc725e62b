//! The HashPipe heavy-hitter sketch (Sivaraman et al., SOSR 2017), generic over the slot type.
//!
//! `D` stages of `W` slots, each stage with its own multiplicative hash. Stage 0 always takes the
//! incoming entry: same key merges, an empty slot is filled, another key is evicted and carried
//! on. In later stages the carried entry merges with an equal key, fills an empty slot, or is
//! compared with the resident: the heavier stays and the lighter is carried on. What leaves the
//! last stage is returned to the caller, who counts it as dropped. A key may live in several
//! stages at once; a query sums them. Counts never overestimate.
//!
//! This exact function runs in the kernel (for every context switch) and in userspace (tests,
//! trace replays, precision sweeps), so it must stay verifier-friendly: constant loop bounds,
//! indices provably below `W`, no recursion, no allocation.

/// One slot of a sketch stage. A key of 0 marks an empty slot (pid 0 is the idle task, which is
/// never charged).
pub trait Slot: Copy {
    /// The process id this slot counts, 0 when empty.
    fn key(&self) -> u32;
    /// The weight HashPipe compares to decide which entry stays in a later stage.
    fn weight(&self) -> u64;
    /// Fold `other` (same key) into `self`.
    fn merge(&mut self, other: &Self);
    /// Whether `other` counts the same thing as `self`. By default, the same key; a slot whose
    /// key is only a hash of what it counts (a pair of processes) compares the whole.
    #[inline(always)]
    fn same(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

/// A sketch whose stages (its first field) only its `add` writes, counting every insert in a
/// field of its own. With the count at 0 every stage slot is still as it was cleared, so a
/// reader skips the stages: on a quiet machine most sketches of most CPUs get no insert in an
/// interval, and reading and clearing their kilobytes each interval was most of the memory the
/// drain touched.
pub trait Counted {
    type Slot: Slot;
    /// Bytes of the stages, at the start of the value.
    const STAGE_BYTES: usize;
    /// Inserts since the sketch was last cleared.
    fn inserts(&self) -> u64;
    /// Every slot of every stage in stage order, or none when nothing was inserted.
    fn slots(&self) -> core::slice::Iter<'_, Self::Slot>;
}

/// `Counted` for a sketch type with `stages: [[$slot; $w]; $d]` as its first field and the
/// insert count in `$count`.
#[macro_export]
macro_rules! counted_by {
    ($sketch:ty, $slot:ty, $w:expr, $d:expr, $count:ident) => {
        const _: () = assert!(core::mem::offset_of!($sketch, stages) == 0);
        // `$slot`, `$w` and `$d` are the stages' own type (STAGE_BYTES is what clearing
        // leaves alone): a different one does not compile.
        const _: fn(&$sketch) -> &[[$slot; $w]; $d] = |s| &s.stages;
        impl $crate::hashpipe::Counted for $sketch {
            type Slot = $slot;
            const STAGE_BYTES: usize = core::mem::size_of::<[[$slot; $w]; $d]>();
            #[inline]
            fn inserts(&self) -> u64 {
                self.$count
            }
            #[inline]
            fn slots(&self) -> core::slice::Iter<'_, $slot> {
                let all = self.stages.as_flattened();
                let n = if self.$count == 0 { 0 } else { all.len() };
                all[..n].iter()
            }
        }
    };
}

/// Odd multipliers for the per-stage multiplicative hashes (Knuth's golden ratio and
/// other well-mixed odd constants). Stage `i` uses `SEEDS[i % SEEDS.len()]`.
pub const SEEDS: [u32; 8] = [
    0x9E37_79B1,
    0x85EB_CA77,
    0xC2B2_AE3D,
    0x27D4_EB2F,
    0x1656_67B1,
    0xD3A2_646D,
    0xFD70_46C5,
    0xB55A_4F09,
];

/// Slot index of `key` in stage `stage` of a stage with `w` slots (`w` a power of two).
#[inline(always)]
pub const fn index(key: u32, stage: usize, w: usize) -> usize {
    let bits = w.trailing_zeros();
    let h = key.wrapping_mul(SEEDS[stage % SEEDS.len()]);
    // The top `bits` bits of the product are the best mixed (a u64 shift, so `bits == 0` is
    // fine); `& (w - 1)` keeps the verifier and the bounds checker sure the index is below `w`.
    (((h as u64) >> (32 - bits)) as usize) & (w - 1)
}

/// Insert `incoming` into the sketch. Returns the entry carried out of the last stage, if any.
#[inline(always)]
pub fn update<S: Slot, const D: usize, const W: usize>(
    stages: &mut [[S; W]; D],
    incoming: S,
) -> Option<S> {
    let mut carry = incoming;
    // Stage 0: always insert.
    {
        let slot = &mut stages[0][index(carry.key(), 0, W)];
        if slot.same(&carry) {
            slot.merge(&carry);
            return None;
        }
        if slot.key() == 0 {
            *slot = carry;
            return None;
        }
        core::mem::swap(slot, &mut carry);
    }
    // Later stages: merge, fill, or keep the heavier.
    let mut stage = 1;
    while stage < D {
        let slot = &mut stages[stage][index(carry.key(), stage, W)];
        if slot.same(&carry) {
            slot.merge(&carry);
            return None;
        }
        if slot.key() == 0 {
            *slot = carry;
            return None;
        }
        if slot.weight() < carry.weight() {
            core::mem::swap(slot, &mut carry);
        }
        stage += 1;
    }
    Some(carry)
}

/// Insert `incoming`, keeping one slot per key and never giving a resident's place to a lighter
/// entry: the key is looked for in its slot of every stage (merged where found); a new key
/// takes the first empty one of its `D` slots; when all are taken, the lightest of them is
/// replaced if `incoming` is heavier, and returned, else `incoming` is returned. Returns what
/// the sketch let go, if any. Like [`update`] it never overestimates, and what it holds plus
/// what it returns is everything it was given.
///
/// Plain HashPipe ([`update`]) always puts a newcomer in stage 0 and carries the resident on,
/// so a crowd of light keys (thousands of processes that each run a few microseconds an
/// interval) keeps moving heavy keys down the pipeline, splits them over stages and pushes
/// pieces of them out of the last one. Here a light key can only take an empty slot or a
/// lighter key's: heavy keys stay whole however many light ones pass. A key whose slots are
/// all taken by heavier ones has its time dropped until one frees, as a light key should.
/// The cost is a look at every stage for a key not in stage 0.
#[inline(always)]
pub fn update_keep<S: Slot, const D: usize, const W: usize>(
    stages: &mut [[S; W]; D],
    incoming: S,
) -> Option<S> {
    update_favour(stages, incoming, |_| false)
}

/// [`update_keep`], where a key that `favoured` names (asked only when the key is in none of its
/// slots and all are taken) takes the lightest of them even when its own entry is lighter.
/// Returns what the sketch let go, if any; same guarantees as [`update_keep`].
///
/// Per-CPU sketches see a process's time on each CPU apart: a process heavy overall that runs
/// a little on a CPU crowded with light ones arrives there in small slices that
/// [`update_keep`] refuses, and that time is lost although the process ranks high. If
/// userspace names the keys it ranked high in the interval before (a hint it passes down),
/// those slices displace a light resident instead. `update_keep` is `update_favour` with a
/// `favoured` that names none. Only the benchmark replays call it so far: the hint has no
/// kernel side yet.
#[inline(always)]
pub fn update_favour<S: Slot, const D: usize, const W: usize>(
    stages: &mut [[S; W]; D],
    incoming: S,
    favoured: impl FnOnce(u32) -> bool,
) -> Option<S> {
    let key = incoming.key();
    let mut light = (0usize, index(key, 0, W));
    let mut light_w = u64::MAX;
    let mut stage = 0;
    while stage < D {
        let i = index(key, stage, W);
        let slot = &mut stages[stage][i];
        if slot.same(&incoming) {
            slot.merge(&incoming);
            return None;
        }
        if slot.key() == 0 {
            *slot = incoming;
            return None;
        }
        if slot.weight() < light_w {
            light_w = slot.weight();
            light = (stage, i);
        }
        stage += 1;
    }
    if (light_w < incoming.weight() || favoured(key))
        && let Some(slot) = stages
            .get_mut(light.0)
            .and_then(|st| st.get_mut(light.1 & (W - 1)))
    {
        return Some(core::mem::replace(slot, incoming));
    }
    Some(incoming)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
    struct T {
        k: u32,
        w: u64,
    }
    impl Slot for T {
        fn key(&self) -> u32 {
            self.k
        }
        fn weight(&self) -> u64 {
            self.w
        }
        fn merge(&mut self, o: &Self) {
            self.w += o.w;
        }
    }

    #[test]
    fn index_is_in_range_and_spreads() {
        for w in [1usize, 2, 8, 128, 1024] {
            let mut seen = [false; 1024];
            for k in 1..5000u32 {
                for s in 0..4 {
                    let i = index(k, s, w);
                    assert!(i < w);
                    seen[i] = true;
                }
            }
            assert_eq!(seen.iter().filter(|b| **b).count(), w);
        }
    }

    #[test]
    fn first_stage_merges_same_key() {
        let mut s = [[T::default(); 8]; 2];
        assert_eq!(update(&mut s, T { k: 7, w: 3 }), None);
        assert_eq!(update(&mut s, T { k: 7, w: 4 }), None);
        let total: u64 = s.iter().flatten().filter(|t| t.k == 7).map(|t| t.w).sum();
        assert_eq!(total, 7);
    }

    #[test]
    fn one_slot_pipeline_keeps_heavier_and_drops_lighter() {
        // W = 1: every key collides. Stage 0 always takes the newcomer, stage 1 keeps the heavier.
        let mut s = [[T::default(); 1]; 2];
        assert_eq!(update(&mut s, T { k: 1, w: 100 }), None);
        assert_eq!(update(&mut s, T { k: 2, w: 5 }), None); // 1 carried into empty stage 1
        assert_eq!(update(&mut s, T { k: 3, w: 7 }), Some(T { k: 2, w: 5 }));
        assert_eq!(s[0][0], T { k: 3, w: 7 });
        assert_eq!(s[1][0], T { k: 1, w: 100 });
    }

    #[test]
    fn keep_refuses_a_lighter_newcomer_and_favour_admits_it() {
        // W = 1, D = 2: keys 1 and 2 fill both slots of every key.
        let mut s = [[T::default(); 1]; 2];
        assert_eq!(update_keep(&mut s, T { k: 1, w: 100 }), None);
        assert_eq!(update_keep(&mut s, T { k: 2, w: 50 }), None);
        // Lighter than both residents: refused, the residents stay whole.
        assert_eq!(
            update_keep(&mut s, T { k: 3, w: 10 }),
            Some(T { k: 3, w: 10 })
        );
        assert_eq!((s[0][0], s[1][0]), (T { k: 1, w: 100 }, T { k: 2, w: 50 }));
        // Not favoured: the same.
        assert_eq!(
            update_favour(&mut s, T { k: 3, w: 10 }, |k| k == 4),
            Some(T { k: 3, w: 10 })
        );
        // Favoured: it takes the lightest resident's slot, and that one leaves.
        assert_eq!(
            update_favour(&mut s, T { k: 3, w: 10 }, |k| k == 3),
            Some(T { k: 2, w: 50 })
        );
        assert_eq!(s[1][0], T { k: 3, w: 10 });
        // A resident merges whatever the hint says, and the hint is not asked.
        assert_eq!(
            update_favour(&mut s, T { k: 1, w: 1 }, |_| unreachable!()),
            None
        );
        assert_eq!(s[0][0], T { k: 1, w: 101 });
    }

    #[test]
    fn keep_holds_each_key_in_one_slot() {
        let mut s = [[T::default(); 4]; 3];
        for i in 0..200u32 {
            let _ = update_keep(
                &mut s,
                T {
                    k: 1 + i % 23,
                    w: u64::from(i % 7) + 1,
                },
            );
        }
        let mut keys: Vec<u32> = s
            .iter()
            .flatten()
            .map(|t| t.k)
            .filter(|k| *k != 0)
            .collect();
        let n = keys.len();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), n);
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
    struct T {
        k: u32,
        w: u64,
    }
    impl Slot for T {
        fn key(&self) -> u32 {
            self.k
        }
        fn weight(&self) -> u64 {
            self.w
        }
        fn merge(&mut self, o: &Self) {
            self.w += o.w;
        }
    }

    fn run<const D: usize, const W: usize>(stream: &[(u32, u64)]) -> ([[T; W]; D], u64) {
        let mut s = [[T::default(); W]; D];
        let mut dropped = 0;
        for &(k, w) in stream {
            if let Some(out) = update(&mut s, T { k, w }) {
                dropped += out.w;
            }
        }
        (s, dropped)
    }

    fn estimate<const D: usize, const W: usize>(s: &[[T; W]; D], k: u32) -> u64 {
        s.iter().flatten().filter(|t| t.k == k).map(|t| t.w).sum()
    }

    fn truth(stream: &[(u32, u64)], k: u32) -> u64 {
        stream.iter().filter(|(x, _)| *x == k).map(|(_, w)| w).sum()
    }

    /// Streams of (pid, ns) over a small key space so collisions are frequent.
    fn streams(keys: u32) -> impl Strategy<Value = Vec<(u32, u64)>> {
        prop::collection::vec((1..=keys, 1u64..1_000_000), 0..600)
    }

    proptest! {
        #[test]
        fn never_overestimates_and_conserves_weight(stream in streams(64)) {
            let (s, dropped) = run::<3, 8>(&stream);
            let total: u64 = stream.iter().map(|(_, w)| w).sum();
            let kept: u64 = s.iter().flatten().map(|t| t.w).sum();
            // Nothing is created or lost without being counted.
            prop_assert_eq!(kept + dropped, total);
            for k in 1..=64 {
                prop_assert!(estimate(&s, k) <= truth(&stream, k));
            }
        }

        #[test]
        fn keep_and_favour_never_overestimate_and_conserve_weight(
            stream in streams(64),
            favoured in prop::collection::hash_set(1u32..=64, 0..16),
        ) {
            for hint in [false, true] {
                let mut s = [[T::default(); 8]; 3];
                let mut dropped = 0;
                for &(k, w) in &stream {
                    let out = update_favour(&mut s, T { k, w }, |k| hint && favoured.contains(&k));
                    if let Some(out) = out {
                        dropped += out.w;
                    }
                }
                let total: u64 = stream.iter().map(|(_, w)| w).sum();
                let kept: u64 = s.iter().flatten().map(|t| t.w).sum();
                prop_assert_eq!(kept + dropped, total);
                for k in 1..=64 {
                    prop_assert!(estimate(&s, k) <= truth(&stream, k));
                    prop_assert!(s.iter().flatten().filter(|t| t.k == k).count() <= 1);
                }
            }
        }

        #[test]
        fn a_favoured_key_is_always_taken_in(
            others in streams(200),
            chunks in prop::collection::vec(1u64..1_000, 1..50),
            seed in any::<u64>(),
        ) {
            // Slices of one favoured key, lighter than most others, interleaved with them: each
            // one lands (merged or in a slot of its own), however full the sketch is.
            let key = 1_000_000u32;
            let mut stream = others.clone();
            let mut x = seed | 1;
            for c in &chunks {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                let at = (x % (stream.len() as u64 + 1)) as usize;
                stream.insert(at, (key, *c));
            }
            let mut s = [[T::default(); 4]; 2];
            for &(k, w) in &stream {
                let before = estimate(&s, key);
                let out = update_favour(&mut s, T { k, w }, |k| k == key);
                if k == key {
                    prop_assert!(out.is_none_or(|o| o.k != key), "favoured slice refused");
                    prop_assert!(estimate(&s, key) >= w);
                    prop_assert!(estimate(&s, key) == before + w || estimate(&s, key) == w);
                }
            }
        }

        #[test]
        fn a_key_heavier_than_all_others_together_is_reported(
            others in streams(200),
            heavy_chunks in prop::collection::vec(1u64..1_000_000, 1..50),
            seed in any::<u64>(),
        ) {
            // Interleave the heavy key's chunks with the others in a random order, and make it
            // heavier than the sum of all other keys.
            let heavy = 1_000_000u32;
            let others_total: u64 = others.iter().map(|(_, w)| w).sum();
            let mut stream: Vec<(u32, u64)> = others.clone();
            let chunk_total: u64 = heavy_chunks.iter().sum();
            let scale = others_total / chunk_total + 1;
            let mut x = seed | 1;
            for c in &heavy_chunks {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                let at = (x % (stream.len() as u64 + 1)) as usize;
                stream.insert(at, (heavy, c * scale));
            }
            prop_assert!(truth(&stream, heavy) > others_total);
            let (s, _) = run::<4, 16>(&stream);
            prop_assert!(estimate(&s, heavy) > 0, "heavy key lost");
            // And it is the top key of the sketch.
            let top = (1..=200).map(|k| estimate(&s, k)).max().unwrap_or(0);
            prop_assert!(estimate(&s, heavy) > top);
        }

        #[test]
        fn exact_when_keys_fit_in_the_first_stage(stream in streams(1000)) {
            // With fewer distinct keys than slots and no collisions, the sketch is exact.
            let (s, dropped) = run::<2, 4096>(&stream);
            let mut keys: Vec<u32> = stream.iter().map(|(k, _)| *k).collect();
            keys.sort_unstable();
            keys.dedup();
            let idx: std::collections::HashSet<usize> =
                keys.iter().map(|k| index(*k, 0, 4096)).collect();
            prop_assume!(idx.len() == keys.len());
            prop_assert_eq!(dropped, 0);
            for k in keys {
                prop_assert_eq!(estimate(&s, k), truth(&stream, k));
            }
        }
    }
}
