//! Parameter rounding: to nearest even, or stochastic with counter-based random bits.
//!
//! The random bits of stochastic rounding are a pure function of
//! `(seed, step, tensor index, element index)`, so every backend (CPU, CUDA, MCU) rounds the
//! same element of the same step the same way, whatever its thread layout:
//!
//! ```text
//! mix64(z)  = splitmix64's finalizer: z ^= z >> 30; z *= 0xBF58476D1CE4E5B9;
//!             z ^= z >> 27; z *= 0x94D049BB133111EB; z ^= z >> 31   (wrapping)
//! key       = mix64(mix64(mix64(seed) ^ step) ^ tensor)
//! bits      = mix64(key ^ element) >> 40            (24 uniform bits)
//! ```

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
    /// Stochastic rounding with bits from [`stochastic_bits`], seeded by the config's seed.
    Stochastic,
}

/// splitmix64's output function: a bijective 64-bit mixer.
#[inline(always)]
pub const fn mix64(mut z: u64) -> u64 {
    z ^= z >> 30;
    z = z.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z ^= z >> 27;
    z = z.wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The per-tensor key of one step: `mix64(mix64(mix64(seed) ^ step) ^ tensor)`.
#[inline]
pub const fn tensor_key(seed: u64, step: u64, tensor: u64) -> u64 {
    mix64(mix64(mix64(seed) ^ step) ^ tensor)
}

/// The 24 random bits for one element: `mix64(key ^ element) >> 40`.
#[inline(always)]
pub const fn stochastic_bits(key: u64, element: u64) -> u32 {
    (mix64(key ^ element) >> 40) as u32
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

/// Stochastic rounding keyed by [`tensor_key`].
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
