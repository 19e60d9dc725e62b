//! A binary range coder with adaptive probabilities (the one of LZMA), and an integer model
//! on top: the bit length of a value coded bit by bit through a tree of adaptive
//! probabilities, the bit below the leading one adaptive too, the rest raw. Format 2 codes
//! every integer and flag of its tables with it; an integer costs about its real entropy
//! where a byte-aligned varint under zstd costs a byte or two more.
//!
//! The decoder reads zeros past the end of its bytes and never fails: corrupt input gives
//! wrong numbers, which the caller bounds like any other.

/// Probabilities are 11-bit fixed point; they move by 1/16 of the distance at each bit.
const PROB_BITS: u32 = 11;
const PROB_ONE: u16 = 1 << PROB_BITS;
const MOVE_BITS: u32 = 4;
const TOP: u32 = 1 << 24;

/// One adaptive bit probability (of a 0), and how many bits it has seen (`FIXED`: it always
/// moves by 1/16, as in format 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bit(u16, u8);

const FIXED: u8 = u8::MAX;

/// Format 3's probabilities move by 1/2^RATE[n] after their n-th bit (about 1/(n+2), a
/// running frequency) and then by 1/32 (`RATE`'s last): they learn fast and then hold still.
const RATE: [u8; 24] = [
    1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
];

impl Default for Bit {
    fn default() -> Self {
        Self(PROB_ONE / 2, FIXED)
    }
}

impl Bit {
    /// A probability of format 3 (see `RATE`).
    pub fn counting() -> Self {
        Self(PROB_ONE / 2, 0)
    }

    fn update(&mut self, bit: bool) {
        let shift = if self.1 == FIXED {
            MOVE_BITS
        } else {
            let n = usize::from(self.1);
            let s = u32::from(RATE[n.min(RATE.len() - 1)]);
            if n + 1 < RATE.len() {
                self.1 += 1;
            }
            s
        };
        // Stays within 1..PROB_ONE: a shift of at least 1 never reaches either end.
        if bit {
            self.0 -= self.0 >> shift;
        } else {
            self.0 += (PROB_ONE - self.0) >> shift;
        }
    }
}

/// Bit lengths of the values coded (0 for zero): up to 128, through an 8-level tree.
const CLASS_BITS: u32 = 8;
/// Largest bit length of a coded value (a zigzagged i128).
pub const MAX_CLASS: u32 = 128;

/// An adaptive model of one stream of unsigned integers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntModel {
    class: [Bit; 1 << CLASS_BITS],
    /// The bit below the leading one, by bit length.
    next: [Bit; MAX_CLASS as usize + 1],
    /// Format 4 (`Encoder::signed`): the second bit below the leading one, by bit length and
    /// the first; and the sign of a non-zero value.
    second: [[Bit; 2]; MAX_CLASS as usize + 1],
    sign: Bit,
}

impl Default for IntModel {
    fn default() -> Self {
        Self {
            class: [Bit::default(); 1 << CLASS_BITS],
            next: [Bit::default(); MAX_CLASS as usize + 1],
            second: [[Bit::default(); 2]; MAX_CLASS as usize + 1],
            sign: Bit::default(),
        }
    }
}

impl IntModel {
    /// A model of format 3 (its probabilities learn as `Bit::counting`).
    pub fn counting() -> Self {
        Self {
            class: [Bit::counting(); 1 << CLASS_BITS],
            next: [Bit::counting(); MAX_CLASS as usize + 1],
            second: [[Bit::counting(); 2]; MAX_CLASS as usize + 1],
            sign: Bit::counting(),
        }
    }
}

pub struct Encoder {
    low: u64,
    range: u32,
    cache: u8,
    cache_size: u64,
    out: Vec<u8>,
    /// Bits spent so far, when measured (a developer's measure of where the bytes go).
    pub cost: Option<f64>,
}

impl Default for Encoder {
    fn default() -> Self {
        Self {
            low: 0,
            range: u32::MAX,
            cache: 0,
            cache_size: 1,
            out: Vec::new(),
            cost: None,
        }
    }
}

impl Encoder {
    /// An encoder that also counts the bits it spends when `measure` is set.
    pub fn measured(measure: bool) -> Self {
        Self {
            cost: measure.then_some(0.0),
            ..Self::default()
        }
    }

    fn shift_low(&mut self) {
        if (self.low as u32) < 0xFF00_0000 || (self.low >> 32) != 0 {
            let carry = (self.low >> 32) as u8;
            let mut temp = self.cache;
            loop {
                self.out.push(temp.wrapping_add(carry));
                temp = 0xFF;
                self.cache_size -= 1;
                if self.cache_size == 0 {
                    break;
                }
            }
            self.cache = ((self.low >> 24) & 0xFF) as u8;
        }
        self.cache_size += 1;
        self.low = (self.low & 0x00FF_FFFF) << 8;
    }

    fn normalize(&mut self) {
        while self.range < TOP {
            self.range <<= 8;
            self.shift_low();
        }
    }

    pub fn bit(&mut self, p: &mut Bit, bit: bool) {
        if let Some(c) = &mut self.cost {
            let p0 = f64::from(p.0) / f64::from(PROB_ONE);
            *c -= if bit { (1.0 - p0).log2() } else { p0.log2() };
        }
        let bound = (self.range >> PROB_BITS) * u32::from(p.0);
        if bit {
            self.low += u64::from(bound);
            self.range -= bound;
        } else {
            self.range = bound;
        }
        p.update(bit);
        self.normalize();
    }

    /// The low `n` bits of `v`, each with probability one half.
    fn direct(&mut self, v: u128, n: u32) {
        if let Some(c) = &mut self.cost {
            *c += f64::from(n);
        }
        for i in (0..n).rev() {
            self.range >>= 1;
            if (v >> i) & 1 == 1 {
                self.low += u64::from(self.range);
            }
            self.normalize();
        }
    }

    pub fn int(&mut self, m: &mut IntModel, v: u128) {
        self.int_as(m, v, false);
    }

    /// `fine`: the second bit below the leading one is adaptive too (format 4).
    fn int_as(&mut self, m: &mut IntModel, v: u128, fine: bool) {
        let c = 128 - v.leading_zeros();
        let mut node = 1usize;
        for i in (0..CLASS_BITS).rev() {
            let b = (c >> i) & 1 == 1;
            self.bit(&mut m.class[node], b);
            node = node * 2 + usize::from(b);
        }
        if c >= 2 {
            let first = (v >> (c - 2)) & 1 == 1;
            self.bit(&mut m.next[c as usize], first);
            if fine && c >= 3 {
                self.bit(
                    &mut m.second[c as usize][usize::from(first)],
                    (v >> (c - 3)) & 1 == 1,
                );
                self.direct(v, c - 3);
            } else {
                self.direct(v, c - 2);
            }
        }
    }

    /// A signed integer. Format 4 (`sm`): its magnitude (`int` with the second bit below the
    /// leading one adaptive), then for a non-zero value its sign as an adaptive bit, so a
    /// column that is never negative pays next to nothing for signs. Formats 2 and 3: zigzagged
    /// (the sign in the lowest bit, at probability one half).
    pub fn signed(&mut self, m: &mut IntModel, x: i128, sm: bool) {
        if sm {
            self.int_as(m, x.unsigned_abs(), true);
            if x != 0 {
                self.bit(&mut m.sign, x < 0);
            }
        } else {
            self.int(m, zigzag(x));
        }
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.out.len()
    }

    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    pub fn finish(mut self) -> Vec<u8> {
        for _ in 0..5 {
            self.shift_low();
        }
        self.out
    }
}

pub struct Decoder<'a> {
    b: &'a [u8],
    at: usize,
    range: u32,
    code: u32,
}

impl<'a> Decoder<'a> {
    pub fn new(b: &'a [u8]) -> Self {
        let mut d = Self {
            b,
            at: 0,
            range: u32::MAX,
            code: 0,
        };
        for _ in 0..5 {
            d.code = (d.code << 8) | u32::from(d.byte());
        }
        d
    }

    fn byte(&mut self) -> u8 {
        let x = self.b.get(self.at).copied().unwrap_or(0);
        self.at = self.at.saturating_add(1);
        x
    }

    fn normalize(&mut self) {
        while self.range < TOP {
            self.range <<= 8;
            self.code = (self.code << 8) | u32::from(self.byte());
        }
    }

    pub fn bit(&mut self, p: &mut Bit) -> bool {
        let bound = (self.range >> PROB_BITS) * u32::from(p.0);
        let b = if self.code < bound {
            self.range = bound;
            false
        } else {
            self.code -= bound;
            self.range -= bound;
            true
        };
        p.update(b);
        self.normalize();
        b
    }

    fn direct(&mut self, n: u32) -> u128 {
        let mut v = 0u128;
        for _ in 0..n {
            self.range >>= 1;
            let b = self.code >= self.range;
            if b {
                self.code -= self.range;
            }
            v = (v << 1) | u128::from(b);
            self.normalize();
        }
        v
    }

    /// The next integer; None when its bit length is beyond `MAX_CLASS` (corrupt input).
    pub fn int(&mut self, m: &mut IntModel) -> Option<u128> {
        self.int_as(m, false)
    }

    fn int_as(&mut self, m: &mut IntModel, fine: bool) -> Option<u128> {
        let mut node = 1usize;
        for _ in 0..CLASS_BITS {
            let b = self.bit(&mut m.class[node]);
            node = node * 2 + usize::from(b);
        }
        let c = (node - (1 << CLASS_BITS)) as u32;
        match c {
            0 => Some(0),
            1 => Some(1),
            c if c > MAX_CLASS => None,
            c => {
                let first = self.bit(&mut m.next[c as usize]);
                let next = u128::from(first);
                if fine && c >= 3 {
                    let second =
                        u128::from(self.bit(&mut m.second[c as usize][usize::from(first)]));
                    let rest = self.direct(c - 3);
                    Some((1u128 << (c - 1)) | (next << (c - 2)) | (second << (c - 3)) | rest)
                } else {
                    let rest = self.direct(c - 2);
                    Some((1u128 << (c - 1)) | (next << (c - 2)) | rest)
                }
            }
        }
    }

    /// The next signed integer (see `Encoder::signed`); None when out of range.
    pub fn signed(&mut self, m: &mut IntModel, sm: bool) -> Option<i128> {
        if sm {
            let u = i128::try_from(self.int_as(m, true)?).ok()?;
            Some(if u != 0 && self.bit(&mut m.sign) {
                -u
            } else {
                u
            })
        } else {
            Some(unzigzag(self.int(m)?))
        }
    }

    /// Bytes read, counting those past the end as read.
    pub fn consumed(&self) -> usize {
        self.at
    }
}

/// A signed integer as an unsigned one: 0, -1, 1, -2, ... to 0, 1, 2, 3, ...
pub fn zigzag(x: i128) -> u128 {
    ((x << 1) ^ (x >> 127)) as u128
}

pub fn unzigzag(u: u128) -> i128 {
    ((u >> 1) as i128) ^ -((u & 1) as i128)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_and_bits_round_trip() {
        let vals: Vec<u128> = (0..2000u128)
            .map(|i| (i * 2_654_435_761) % (1 << (i % 100)))
            .chain([0, 1, 2, 3, u128::MAX, u128::MAX - 1, 1 << 127])
            .collect();
        let mut e = Encoder::default();
        let (mut m, mut p) = (IntModel::default(), Bit::default());
        for &v in &vals {
            e.int(&mut m, v);
            e.bit(&mut p, v % 3 == 0);
        }
        let bytes = e.finish();
        let mut d = Decoder::new(&bytes);
        let (mut m, mut p) = (IntModel::default(), Bit::default());
        for &v in &vals {
            assert_eq!(d.int(&mut m), Some(v));
            assert_eq!(d.bit(&mut p), v % 3 == 0);
        }
        assert!(d.consumed() <= bytes.len() + 4);
    }

    #[test]
    fn signed_integers_round_trip_both_ways() {
        let vals: Vec<i128> = (0..3000i128)
            .map(|i| ((i * 2_654_435_761) % (1 << (i % 70))) * if i % 3 == 0 { -1 } else { 1 })
            .chain([
                0,
                1,
                -1,
                2,
                -2,
                3,
                -3,
                4,
                i128::MAX,
                -i128::MAX,
                i128::MIN / 2,
            ])
            .collect();
        for sm in [false, true] {
            let mut e = Encoder::default();
            let mut m = IntModel::counting();
            for &v in &vals {
                e.signed(&mut m, v, sm);
            }
            let bytes = e.finish();
            let mut d = Decoder::new(&bytes);
            let mut m = IntModel::counting();
            for &v in &vals {
                assert_eq!(d.signed(&mut m, sm), Some(v), "sign and magnitude: {sm}");
            }
        }
        // Values that are never negative cost next to nothing for their signs.
        let (mut zz, mut sm) = (Encoder::default(), Encoder::default());
        let (mut m1, mut m2) = (IntModel::counting(), IntModel::counting());
        for i in 0..4000i128 {
            let v = (i * 7919) % 5000;
            zz.signed(&mut m1, v, false);
            sm.signed(&mut m2, v, true);
        }
        let (zz, sm) = (zz.finish().len(), sm.finish().len());
        assert!(sm * 100 < zz * 93, "{sm} bytes against zigzag's {zz}");
    }

    #[test]
    fn garbage_decodes_without_panicking() {
        for seed in 0..200u32 {
            let b: Vec<u8> = (0..64u32)
                .map(|i| (i.wrapping_mul(seed).wrapping_mul(2_654_435_761) >> 7) as u8)
                .collect();
            let mut d = Decoder::new(&b);
            let (mut m, mut p) = (IntModel::default(), Bit::default());
            for i in 0..500 {
                let _ = d.int(&mut m);
                let _ = d.bit(&mut p);
                let _ = d.signed(&mut m, i % 2 == 0);
            }
        }
    }
}
