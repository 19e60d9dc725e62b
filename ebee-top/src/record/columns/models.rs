//! The adaptive models of a payload or a chain, by name, bounded in number.

use super::*;

/// The `n` models named `key` in `map`, grown with `fresh` ones; past `MAX_MODELS` models in
/// all (`size`), a new name gets `scratch`, fresh each time and not kept.
pub(super) fn named<'a, T: Clone>(
    map: &'a mut HashMap<String, Vec<T>>,
    scratch: &'a mut Vec<T>,
    size: &mut usize,
    key: String,
    n: usize,
    fresh: T,
) -> &'a mut [T] {
    let fits = *size + n <= MAX_MODELS;
    match map.entry(key) {
        Entry::Occupied(e) => {
            let v = e.into_mut();
            if v.len() < n {
                // Growth counts toward the bound like a new name.
                let more = n - v.len();
                if *size + more > MAX_MODELS {
                    *scratch = vec![fresh; n];
                    return scratch;
                }
                *size += more;
                v.resize(n, fresh);
            }
            v
        }
        Entry::Vacant(e) if fits => {
            *size += n;
            e.insert(vec![fresh; n])
        }
        Entry::Vacant(_) => {
            *scratch = vec![fresh; n];
            scratch
        }
    }
}

/// Most integer models (and bit probabilities) a format 3 chain keeps: far more than the
/// Batch has columns and contexts; past it a model is fresh each time it is used (bounds what
/// corrupt input can make a reader hold).
pub(super) const MAX_MODELS: usize = 4096;

/// The adaptive models of one payload (format 2) or of a chain of records (format 3), by name
/// (`table.column/what`), each a small array of contexts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Models {
    /// Format 3: models that learn fast, then hold still (`rc::Bit::counting`).
    pub(super) counting: bool,
    pub(super) ints: HashMap<String, Vec<IntModel>>,
    pub(super) bits: HashMap<String, Vec<Bit>>,
    pub(super) size: usize,
    pub(super) scratch: Vec<IntModel>,
    pub(super) scratch_bits: Vec<Bit>,
}

impl Models {
    /// What a payload starts from: given `models` in a chain with a reference, else a copy
    /// of the reference's, else fresh ones (format 2 always starts afresh).
    pub(super) fn starting(
        models: Option<Models>,
        reference: Option<&Tables>,
        chain: bool,
    ) -> Self {
        match (models, reference) {
            (Some(m), Some(_)) if chain => m,
            (None, Some(r)) if chain => r.models.clone(),
            _ => Models::new(chain),
        }
    }

    pub(super) fn new(chain: bool) -> Self {
        Self {
            counting: chain,
            ..Self::default()
        }
    }

    pub(super) fn int_model(&self) -> IntModel {
        if self.counting {
            IntModel::counting()
        } else {
            IntModel::default()
        }
    }

    pub(super) fn bit_model(&self) -> Bit {
        if self.counting {
            Bit::counting()
        } else {
            Bit::default()
        }
    }

    /// The `n` integer models named `key` (fresh ones past `MAX_MODELS`).
    pub(super) fn ints(&mut self, key: String, n: usize) -> &mut [IntModel] {
        let fresh = self.int_model();
        named(
            &mut self.ints,
            &mut self.scratch,
            &mut self.size,
            key,
            n,
            fresh,
        )
    }

    /// The `n` bit probabilities named `key`.
    pub(super) fn bits(&mut self, key: String, n: usize) -> &mut [Bit] {
        let fresh = self.bit_model();
        named(
            &mut self.bits,
            &mut self.scratch_bits,
            &mut self.size,
            key,
            n,
            fresh,
        )
    }
}
