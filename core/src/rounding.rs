//! Parameter rounding: to nearest even, or stochastic with the counter-based random bits of
//! [`crate::bits`].

use crate::bits::stochastic_bits;
use crate::simd::Convert;
use crate::storage::Storage;

/// How stores to parameters round (`f32`/`f16`/`bf16` state always rounds to nearest even, q8
/// state always stochastically: [`crate::q8`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Rounding {
    /// Round to nearest, ties to even.
    #[default]
    Nearest,
    /// Stochastic rounding with bits from [`crate::backend::stochastic_bits`], seeded by the config's seed.
    Stochastic,
}

/// A parameter store: rounds an `f32` result into `P` for element `index` of the tensor.
pub(crate) trait ParamStore: Copy + Send + Sync {
    fn store<P: Storage>(self, x: f32, index: usize) -> P;

    /// [`ParamStore::store`] over a chunk whose first element is element `first` of the tensor.
    fn store_chunk<P: Storage, C: Convert>(self, conv: C, src: &[f32], dst: &mut [P], first: usize);
}

/// Round to nearest even.
#[derive(Clone, Copy)]
pub(crate) struct NearestStore;

impl ParamStore for NearestStore {
    #[inline(always)]
    fn store<P: Storage>(self, x: f32, _index: usize) -> P {
        P::from_f32(x)
    }

    #[inline(always)]
    fn store_chunk<P: Storage, C: Convert>(self, conv: C, src: &[f32], dst: &mut [P], _first: usize) {
        conv.store(src, dst);
    }
}

/// Stochastic rounding keyed by [`crate::backend::tensor_key`].
#[derive(Clone, Copy)]
pub(crate) struct StochasticStore {
    pub key: u64,
}

impl ParamStore for StochasticStore {
    #[inline(always)]
    fn store<P: Storage>(self, x: f32, index: usize) -> P {
        P::from_f32_stochastic(x, stochastic_bits(self.key, index as u64))
    }

    #[inline(always)]
    fn store_chunk<P: Storage, C: Convert>(self, conv: C, src: &[f32], dst: &mut [P], first: usize) {
        conv.store_stochastic(src, dst, self.key, first);
    }
}
