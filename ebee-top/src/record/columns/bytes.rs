//! Integers and the byte stream: varints, strings, the two output streams and a reader that
//! checks every step against the bytes left and the cell budget.

use super::*;

pub(super) fn as_int(v: &Value) -> Option<i128> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .map(i128::from)
            .or_else(|| n.as_i64().map(i128::from)),
        _ => None,
    }
}

pub(super) fn int_value(x: i128) -> Result<Value, CodecError> {
    if let Ok(u) = u64::try_from(x) {
        Ok(Value::Number(Number::from(u)))
    } else if let Ok(i) = i64::try_from(x) {
        Ok(Value::Number(Number::from(i)))
    } else {
        Err(bad("an integer out of range"))
    }
}

pub(super) fn int_list(v: &Value) -> Option<Vec<i128>> {
    match v {
        Value::Array(a) => a.iter().map(as_int).collect(),
        _ => None,
    }
}

/// `p` rounded to the nearest multiple of `d` (halves up); None on overflow.
pub(super) fn snap(p: i128, d: i128) -> Option<i128> {
    if d == 1 {
        return Some(p);
    }
    p.checked_add(d / 2)?.div_euclid(d).checked_mul(d)
}

pub(super) fn put_varint(out: &mut Vec<u8>, mut u: u128) {
    while u >= 0x80 {
        out.push((u as u8) | 0x80);
        u >>= 7;
    }
    out.push(u as u8);
}

pub(super) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u128);
    out.extend_from_slice(s.as_bytes());
}

/// Reads the byte part of the payload, every step checked.
pub(super) struct Input<'a> {
    pub(super) b: &'a [u8],
    pub(super) at: usize,
}

impl<'a> Input<'a> {
    pub(super) fn left(&self) -> usize {
        self.b.len() - self.at
    }

    pub(super) fn byte(&mut self) -> Result<u8, CodecError> {
        let x = *self.b.get(self.at).ok_or(bad("the payload ends early"))?;
        self.at += 1;
        Ok(x)
    }

    pub(super) fn bytes(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if n > self.left() {
            return Err(bad("the payload ends early"));
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    pub(super) fn varint(&mut self) -> Result<u128, CodecError> {
        let mut u = 0u128;
        for shift in (0..128).step_by(7) {
            let x = self.byte()?;
            let part = u128::from(x & 0x7f);
            if shift == 126 && part > 3 {
                return Err(bad("a varint overflows"));
            }
            u |= part << shift;
            if x & 0x80 == 0 {
                return Ok(u);
            }
        }
        Err(bad("a varint overflows"))
    }

    /// A count of at most `cap`, and of items that each take at least `min_bytes` of what
    /// is left (0: no bound from the bytes).
    pub(super) fn count(&mut self, min_bytes: usize, cap: usize) -> Result<usize, CodecError> {
        let n = usize::try_from(self.varint()?).map_err(|_| bad("a count is too large"))?;
        if n > cap || (min_bytes > 0 && n > self.left() / min_bytes) {
            return Err(bad("a count is larger than the payload allows"));
        }
        Ok(n)
    }

    pub(super) fn str(&mut self) -> Result<&'a str, CodecError> {
        let n = self.count(1, MAX_NAME)?;
        std::str::from_utf8(self.bytes(n)?).map_err(|_| bad("a name is not UTF-8"))
    }
}

/// Counts cells against `MAX_CELLS`.
pub(super) struct Budget(pub(super) usize);

impl Budget {
    pub(super) fn take(&mut self, n: usize) -> Result<(), CodecError> {
        self.0 = self
            .0
            .checked_add(n)
            .filter(|&c| c <= MAX_CELLS)
            .ok_or(bad("more cells than a payload may hold"))?;
        Ok(())
    }
}

/// The two streams a payload is written to.
pub(super) struct Out {
    pub(super) bytes: Vec<u8>,
    pub(super) rc: rc::Encoder,
    pub(super) ms: Models,
    /// Format 3 and later (models carried from record to record, richer contexts).
    pub(super) chain: bool,
    /// Format 4: signed integers as magnitude and adaptive sign (`rc::Encoder::signed`).
    pub(super) sm: bool,
    /// Format 6: rows of a table may lack fields (each column says which rows do).
    pub(super) sparse: bool,
}

impl Out {
    /// Bytes the range coder spent so far (when measured).
    pub(super) fn cost(&self) -> f64 {
        self.rc.cost.unwrap_or(0.0) / 8.0
    }

    /// Format 6: which rows lack column `key`: one bit, then (when some do) a bit per row.
    pub(super) fn absent(&mut self, key: &str, absent: &[bool]) {
        if !self.sparse {
            return;
        }
        let any = absent.contains(&true);
        self.rc
            .bit(&mut self.ms.bits(format!("{key}/sparse"), 1)[0], any);
        if any {
            let bits = self.ms.bits(format!("{key}/absent"), 1);
            for &a in absent {
                self.rc.bit(&mut bits[0], a);
            }
        }
    }
}

/// And read from.
pub(super) struct In<'a> {
    pub(super) inp: Input<'a>,
    pub(super) rc: rc::Decoder<'a>,
    pub(super) ms: Models,
    pub(super) chain: bool,
    pub(super) sm: bool,
    pub(super) sparse: bool,
}

impl In<'_> {
    /// Format 6: which of `nrows` rows lack column `key` (empty: none), as `Out::absent`
    /// wrote it.
    pub(super) fn absent(&mut self, key: &str, nrows: usize) -> Result<Vec<bool>, CodecError> {
        if !self.sparse {
            return Ok(Vec::new());
        }
        let any = self.ms.bits(format!("{key}/sparse"), 1);
        if !self.rc.bit(&mut any[0]) {
            return Ok(Vec::new());
        }
        let bits = self.ms.bits(format!("{key}/absent"), 1);
        let absent: Vec<bool> = (0..nrows).map(|_| self.rc.bit(&mut bits[0])).collect();
        if !absent.contains(&true) {
            return Err(bad("a sparse column with every row present"));
        }
        Ok(absent)
    }

    pub(super) fn int(&mut self, m: &mut IntModel) -> Result<u128, CodecError> {
        self.rc.int(m).ok_or(bad("an integer out of range"))
    }

    /// The next integer with the first of the models named `key`.
    pub(super) fn int_of(&mut self, key: String) -> Result<u128, CodecError> {
        let m = &mut self.ms.ints(key, 1)[0];
        self.rc.int(m).ok_or(bad("an integer out of range"))
    }

    pub(super) fn count(&mut self, m: &mut IntModel, cap: usize) -> Result<usize, CodecError> {
        usize::try_from(self.int(m)?)
            .ok()
            .filter(|&n| n <= cap)
            .ok_or(bad("a count is larger than the payload allows"))
    }
}
