//! Bits of `f32` values and the counter-based random bits every backend shares: the bottom
//! of the crate, importing nothing from it.
//!
//! The random bits of stochastic rounding (of parameters, [`crate::Rounding`], and of q8
//! state) are a pure function of `(seed, step, tensor index, element index)`, so every backend
//! (CPU, CUDA, MCU) rounds the same element of the same step the same way, whatever its thread
//! layout:
//!
//! ```text
//! mix64(z)  = splitmix64's finalizer: z ^= z >> 30; z *= 0xBF58476D1CE4E5B9;
//!             z ^= z >> 27; z *= 0x94D049BB133111EB; z ^= z >> 31   (wrapping)
//! key       = mix64(mix64(mix64(seed) ^ step) ^ tensor)
//! bits      = mix64(key ^ element) >> 40            (24 uniform bits)
//! ```

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

/// |x|, by clearing the sign bit (NaN stays NaN).
#[inline(always)]
pub(crate) fn abs(x: f32) -> f32 {
    f32::from_bits(x.to_bits() & 0x7fff_ffff)
}

/// Whether `x` is ±∞ or NaN (its exponent bits all set).
#[inline(always)]
pub(crate) fn is_nonfinite(x: f32) -> bool {
    x.to_bits() & 0x7f80_0000 == 0x7f80_0000
}
