//! 8-bit optimizer state: blocks of 256 codes with one `f32` scale (state dtype `"q8"`).
//!
//! Each state slot of a tensor of d elements is ⌈d / 256⌉ [`Q8Block`]s; block k holds elements
//! 256k … 256k + 255. An element's value is `T[j] · scale` (one `f32` multiply) where `T` is the
//! slot's code map:
//!
//! ```text
//! V (second moments: v, AdaBelief's s, s_max)   V[0] = 0, V[j] = 2^(−(255−j)/12), j = 1..255
//!     code = j                                   21 octaves, 12 codes an octave (5.9 % apart)
//! M (every other slot: m, momentum b)            M[0] = 0, M[j] = 2^(−(127−j)/8), j = 1..127
//!     code = j | 0x80 for x < 0                  15.75 octaves, 8 codes an octave (9.1 % apart)
//! ```
//!
//! Table entries are `f32`s, each the exact product `2^−q · f32(2^(−r/k))` for `n = k·q + r`:
//! only the k fractional powers are rounded. v spans many decades and the srf rules divide by
//! v̂ + ε, so V trades resolution for range (about 4 × 10⁻⁷ of the block's largest v); m enters the
//! step linearly, and its smallest values matter least.
//!
//! Storing a block: a = max |x| is its scale (0 when all are 0; NaN when any x is not finite, which
//! poisons the block as an `f32` state would hold the non-finite element). Each `u = |x| / a` is
//! rounded **stochastically** between its neighbours `T[j] ≤ u < T[j+1]`: up when
//! `(r · 2⁻²⁴) · (T[j+1] − T[j]) < u − T[j]`, with 24 bits
//! `r = mix64(mix64(key ^ 0x7138_0000_0000_0000 ^ slot) ^ element) >> 40` of the tensor's step key
//! ([`crate::backend::tensor_key`]). To nearest, v would freeze: with β2 = 0.999 a step moves v by
//! 0.1 %, far below the code spacing; stochastic rounding keeps `E[stored] = x`. On V a positive u
//! never rounds to 0 (a v flushed to zero would make an srf step m̂ / ε); it rounds up to `V[1]`.

use crate::rounding::{mix64, stochastic_bits};

/// Elements per block: one scale per this many codes.
pub const BLOCK: usize = 256;

/// Bytes of one block in memory and in the state format: the scale (`f32`, little-endian in
/// the format) then the 256 codes.
pub const BLOCK_BYTES: usize = 4 + BLOCK;

/// The salt of the slot keys: `slot_key = mix64(key ^ SLOT_SALT ^ slot)`.
pub const SLOT_SALT: u64 = 0x7138_0000_0000_0000;

/// 256 elements of one state slot, as 8-bit codes and their block's scale.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct Q8Block {
    /// The block's largest magnitude (0 for an all-zero block, NaN for a poisoned one).
    pub scale: f32,
    /// One code per element; past the tensor's end, 0.
    pub codes: [u8; BLOCK],
}

impl Default for Q8Block {
    fn default() -> Self {
        Q8Block::ZERO
    }
}

impl Q8Block {
    /// Every element 0 (what a fresh state holds).
    pub const ZERO: Q8Block = Q8Block {
        scale: 0.0,
        codes: [0; BLOCK],
    };

    /// The block in the state format: the scale (little-endian) then the codes.
    pub fn to_bytes(&self) -> [u8; BLOCK_BYTES] {
        let mut out = [0u8; BLOCK_BYTES];
        out[..4].copy_from_slice(&self.scale.to_bits().to_le_bytes());
        out[4..].copy_from_slice(&self.codes);
        out
    }

    /// From the state format ([`Q8Block::to_bytes`]); `bytes` holds at least [`BLOCK_BYTES`].
    pub fn from_bytes(bytes: &[u8]) -> Self {
        let mut block = Q8Block::ZERO;
        let mut scale = [0u8; 4];
        scale.copy_from_slice(&bytes[..4]);
        block.scale = f32::from_bits(u32::from_le_bytes(scale));
        block.codes.copy_from_slice(&bytes[4..BLOCK_BYTES]);
        block
    }
}

/// Which code map a slot uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Map {
    /// [`SIGNED`]: magnitude `M[c & 127]`, negative when bit 7 is set.
    Signed,
    /// [`UNSIGNED`]: `V[c]`, for second moments.
    Unsigned,
}

/// `f32(2^(−r/k))` for r = 0 … k−1, the only rounded factors of a map.
const fn fractional_powers<const K: usize>() -> [f32; K] {
    match K {
        8 => copy([
            1.0,
            0.917_004_05,
            0.840_896_4,
            0.771_105_4,
            0.707_106_77,
            0.648_419_8,
            0.594_603_54,
            0.545_253_9,
        ]),
        12 => copy([
            1.0,
            0.943_874_3,
            0.890_898_7,
            0.840_896_4,
            0.793_700_5,
            0.749_153_55,
            0.707_106_77,
            0.667_419_9,
            0.629_960_54,
            0.594_603_54,
            0.561_231,
            0.529_731_6,
        ]),
        _ => panic!("no map with this many codes an octave"),
    }
}

const fn copy<const N: usize, const K: usize>(src: [f32; N]) -> [f32; K] {
    let mut out = [0.0; K];
    let mut i = 0;
    while i < K {
        out[i] = src[i];
        i += 1;
    }
    out
}

/// `T[0] = 0`, `T[j] = 2^(−(N−1−j)/K)`: each the exact product of a power of two and
/// [`fractional_powers`].
const fn log_map<const N: usize, const K: usize>() -> [f32; N] {
    let frac = fractional_powers::<K>();
    let mut map = [0.0f32; N];
    let mut j = 1;
    while j < N {
        let n = N - 1 - j;
        // 2^−q as bits: every q here is far from the subnormals.
        let pow2 = f32::from_bits((127 - (n / K) as u32) << 23);
        map[j] = pow2 * frac[n % K];
        j += 1;
    }
    map
}

/// The unsigned map V (256 entries, ascending, `V[255] = 1`).
pub static UNSIGNED: [f32; 256] = log_map::<256, 12>();

/// The signed map's magnitudes M (128 entries, ascending, `M[127] = 1`).
pub static SIGNED: [f32; 128] = log_map::<128, 8>();

static UNSIGNED_FRACTIONS: [f32; 12] = fractional_powers::<12>();
static SIGNED_FRACTIONS: [f32; 8] = fractional_powers::<8>();

impl Map {
    /// The value of `code` before scaling.
    #[inline(always)]
    pub fn value(self, code: u8) -> f32 {
        match self {
            Map::Unsigned => UNSIGNED[code as usize],
            Map::Signed => {
                let m = SIGNED[(code & 0x7f) as usize];
                if code & 0x80 != 0 {
                    -m
                } else {
                    m
                }
            }
        }
    }

    /// The slot key of slot `slot` of a tensor whose step key is `key`.
    #[inline(always)]
    pub fn slot_key(key: u64, slot: usize) -> u64 {
        mix64(key ^ SLOT_SALT ^ slot as u64)
    }

    /// The code of `x` in a block of scale `a` (finite, > 0, ≥ |x|), rounded with the 24 bits `r`.
    #[inline(always)]
    pub fn encode(self, x: f32, a: f32, r: u32) -> u8 {
        match self {
            Map::Unsigned => encode_unsigned(x, a, r),
            Map::Signed => encode_signed(x, a, r),
        }
    }
}

#[inline(always)]
fn encode_unsigned(x: f32, a: f32, r: u32) -> u8 {
    let u = crate::storage::abs(x) / a;
    let j = round_index(&UNSIGNED, &UNSIGNED_FRACTIONS, u, r);
    (if j == 0 && u > 0.0 { 1 } else { j }) as u8
}

#[inline(always)]
fn encode_signed(x: f32, a: f32, r: u32) -> u8 {
    let u = crate::storage::abs(x) / a;
    let j = round_index(&SIGNED, &SIGNED_FRACTIONS, u, r) as u8;
    let sign = if x < 0.0 && j != 0 { 0x80 } else { 0 };
    j | sign
}

/// `j` with `table[j] ≤ u < table[j + 1]` (`table` = [`log_map`]`::<N, K>` of `frac` =
/// [`fractional_powers`]`::<K>`, `u ≤ 1`), plus one with probability
/// `(u − table[j]) / (table[j + 1] − table[j])` drawn from `r`.
#[inline(always)]
fn round_index<const N: usize, const K: usize>(table: &[f32; N], frac: &[f32; K], u: f32, r: u32) -> usize {
    let j = floor_index::<N, K>(frac, u);
    let (lo, hi) = (table[j], table[(j + 1) & (N - 1)]);
    let up = j + 1 < N && (r as f32 * (1.0 / 16_777_216.0)) * (hi - lo) < u - lo;
    j + up as usize
}

/// The largest `j` with `table[j] ≤ u` for `u` in [0, 1], without a search (no data-dependent
/// branches or loads): for `u = 2^−o · w`, `w` in [½, 1) (u's mantissa under the exponent of
/// ½), the entries `2^−(o+1) ≤ u` below it are exact powers of two, and within the octave
/// `table[N − 1 − K·(o+1) + i] = 2^−o · frac[K − i]`, so `i` counts the `frac[r] ≤ w`
/// (exact comparisons: scaling by 2^−o is exact). Indices below 1 (u < table[1], zero,
/// subnormal) are 0; `u = 1` is `N − 1`.
#[inline(always)]
fn floor_index<const N: usize, const K: usize>(frac: &[f32; K], u: f32) -> usize {
    let bits = u.to_bits();
    let exponent = (bits >> 23) as i32;
    let w = f32::from_bits((bits & 0x007f_ffff) | (126 << 23));
    let mut i = 0;
    for &f in &frac[1..] {
        i += (f <= w) as i32;
    }
    let j = N as i32 - 1 - K as i32 * (127 - exponent) + i;
    j.clamp(0, N as i32 - 1) as usize
}

/// The codes of `src` in a block of scale `a`, one loop per map (so that it vectorizes).
#[inline(always)]
fn encode_block(
    src: &[f32],
    a: f32,
    slot_key: u64,
    first: usize,
    codes: &mut [u8],
    encode: impl Fn(f32, f32, u32) -> u8,
) {
    for (i, (c, &x)) in codes.iter_mut().zip(src).enumerate() {
        *c = encode(x, a, stochastic_bits(slot_key, (first + i) as u64));
    }
}

/// `dst[i]` = element `i` of `block` (`dst.len() ≤ 256`).
#[inline(always)]
pub fn dequantize(block: &Q8Block, map: Map, dst: &mut [f32]) {
    for (d, &c) in dst.iter_mut().zip(&block.codes) {
        *d = map.value(c) * block.scale;
    }
}

/// Stores `src` (`src.len() ≤ 256` elements, the first being element `first` of its tensor) into
/// `block`, rounding with the bits of `slot_key` ([`Map::slot_key`]).
#[inline(always)]
pub fn quantize(src: &[f32], map: Map, slot_key: u64, first: usize, block: &mut Q8Block) {
    let mut a = 0.0f32;
    let mut nonfinite = false;
    for &x in src {
        let m = crate::storage::abs(x);
        nonfinite |= crate::kernel::is_nonfinite(x);
        a = if m > a { m } else { a };
    }
    block.codes = [0; BLOCK];
    if nonfinite {
        block.scale = f32::NAN;
        return;
    }
    block.scale = a;
    if a == 0.0 {
        return;
    }
    match map {
        Map::Unsigned => encode_block(src, a, slot_key, first, &mut block.codes, encode_unsigned),
        Map::Signed => encode_block(src, a, slot_key, first, &mut block.codes, encode_signed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_are_the_nearest_f32_of_their_powers() {
        for (table, k) in [(&UNSIGNED[..], 12), (&SIGNED[..], 8)] {
            let top = table.len() - 1;
            assert_eq!(table[0], 0.0);
            assert_eq!(table[top], 1.0);
            for (j, &t) in table.iter().enumerate().skip(1) {
                let exact = 2f64.powf(-((top - j) as f64) / k as f64);
                assert_eq!(t, exact as f32, "entry {j} of the map with {k} codes an octave");
                assert!(table[j - 1] < t);
            }
        }
    }

    /// The largest j with `table[j] ≤ u`, by search: what `floor_index` computes.
    fn searched(table: &[f32], u: f32) -> usize {
        table.partition_point(|&t| t <= u) - 1
    }

    #[test]
    fn floor_index_equals_a_search_over_the_map() {
        let mut probes: Vec<f32> = vec![0.0, 1e-45, f32::MIN_POSITIVE, 1.0];
        for &t in UNSIGNED.iter().chain(&SIGNED) {
            let b = t.to_bits();
            probes.extend([t, f32::from_bits(b.saturating_sub(1)), f32::from_bits(b + 1)]);
        }
        // Every 7th f32 in [0, 1] in optimized builds (a sparser sample unoptimized), and around
        // every entry above.
        let stride = if cfg!(homeadam_unoptimized) { 9_973 } else { 7 };
        let mut bits = 0u32;
        let mut check = |u: f32| {
            if u <= 1.0 {
                assert_eq!(
                    floor_index::<256, 12>(&UNSIGNED_FRACTIONS, u),
                    searched(&UNSIGNED, u),
                    "{u:e}"
                );
                assert_eq!(
                    floor_index::<128, 8>(&SIGNED_FRACTIONS, u),
                    searched(&SIGNED, u),
                    "{u:e}"
                );
            }
        };
        probes.into_iter().for_each(&mut check);
        while bits <= 1.0f32.to_bits() {
            check(f32::from_bits(bits));
            bits += stride;
        }
    }

    #[test]
    fn encode_picks_a_neighbour_and_keeps_the_maximum_exact() {
        for map in [Map::Signed, Map::Unsigned] {
            for &x in &[1.0f32, -1.0, 0.5, -0.3, 1e-3, 3e-8, 0.0, -0.0] {
                for r in [0u32, 1 << 23, 0xff_ffff] {
                    let c = map.encode(x, 1.0, r);
                    let y = map.value(c);
                    let expect_sign = map == Map::Unsigned || x >= 0.0 || y == 0.0;
                    assert!(expect_sign || y < 0.0, "{map:?} {x} {r}");
                    if matches!(x, 1.0 | -1.0 | 0.5) {
                        assert_eq!(crate::storage::abs(y), crate::storage::abs(x));
                    }
                }
            }
            assert_eq!(map.encode(0.0, 1.0, 0), 0);
            assert_eq!(map.encode(-0.0, 1.0, 0), 0);
        }
        // A positive second moment never rounds to 0; a tiny m may.
        assert_eq!(Map::Unsigned.encode(1e-30, 1.0, 0xff_ffff), 1);
        assert_eq!(Map::Signed.encode(1e-30, 1.0, 0xff_ffff), 0);
    }

    #[test]
    fn stochastic_codes_are_unbiased() {
        let x = 0.3f32;
        for map in [Map::Signed, Map::Unsigned] {
            let n = 1 << 16;
            let key = Map::slot_key(42, 1);
            let sum: f64 = (0..n)
                .map(|e| map.value(map.encode(x, 1.0, stochastic_bits(key, e))) as f64)
                .sum();
            let mean = sum / n as f64;
            assert!((mean - x as f64).abs() < 5e-4, "{map:?}: mean {mean}");
        }
    }

    #[test]
    fn blocks_round_trip_their_extremes_and_poison_on_non_finite() {
        let mut block = Q8Block::ZERO;
        let src = [0.0f32, -2.0, 1.0, 0.5];
        quantize(&src, Map::Signed, 7, 0, &mut block);
        let mut back = [9.0f32; 4];
        dequantize(&block, Map::Signed, &mut back);
        assert_eq!(back, [0.0, -2.0, 1.0, 0.5]);
        quantize(&[0.0; 4], Map::Unsigned, 7, 0, &mut block);
        assert_eq!((block.scale, block.codes[0]), (0.0, 0));
        quantize(&[1.0, f32::INFINITY], Map::Unsigned, 7, 0, &mut block);
        dequantize(&block, Map::Unsigned, &mut back[..2]);
        assert!(back[..2].iter().all(|x| x.is_nan()));
        assert_eq!(Q8Block::from_bytes(&block.to_bytes()).codes, block.codes);
    }
}
