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
//! computed without a division per element, as `u = (|x| · σ) · ι` with `σ = 2^(127 − E)` (E the
//! biased exponent of a, so `a · σ` is in [1, 2), or a subnormal a lifted far from the edges)
//! and `ι = 1 / (a · σ)` once per block (`u = 1` exactly where `|x| = a`; elsewhere within an
//! ulp of the quotient, and never above 1). u is rounded **stochastically** between its
//! neighbours `T[j] ≤ u < T[j+1]`: up when `(r · 2⁻²⁴) · (T[j+1] − T[j]) < u − T[j]`, with the 24
//! bits `r = hash32(element) >> 8` keyed by the slot key `mix64(key ^ 0x7138_0000_0000_0000 ^
//! slot)` of the tensor's step key ([`crate::backend::tensor_key`]), see [`Map::random_bits`]. To
//! nearest, v would freeze: with β2 = 0.999 a step moves v by 0.1 %, far below the code spacing;
//! stochastic rounding keeps `E[stored] = x`. On V a nonzero x never rounds to 0 (a v flushed to
//! zero would make an srf step m̂ / ε); it rounds up to `V[1]`.
//!
//! Every step of the encode is a lane operation (integer multiplies, shifts, compares, selects;
//! the neighbours `T[j]`, `T[j+1]` come from u's exponent and 7 or 11 comparisons of its
//! mantissa, no table lookup), so the same loop runs in vector lanes on the fast paths; on
//! 32-bit Arm and RISC-V, where nothing vectorizes, the neighbours are read from the table (the
//! same decision) and no step needs a 64-bit multiply or a division.

use crate::bits::{abs, mix64};

/// Elements per block: one scale per this many codes.
pub const BLOCK: usize = 256;

/// Bytes of one block in memory and in the state format: the scale (`f32`, little-endian in
/// the format) then the 256 codes.
pub const BLOCK_BYTES: usize = 4 + BLOCK;

/// The salt of the slot keys: `slot_key = mix64(key ^ SLOT_SALT ^ slot)`.
pub const SLOT_SALT: u64 = 0x7138_0000_0000_0000;

/// The multipliers of the two multiply-xorshift rounds of [`Map::random_bits`].
pub const HASH_MULTIPLIERS: [u32; 2] = [0x7feb_352d, 0x846c_a68b];

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

    /// The 24 random bits that round `element` of the slot keyed `slot_key`: with
    /// `k₀ = slot_key mod 2³²`, `k₁ = ⌊slot_key / 2³²⌋ ^ ⌊element / 2³²⌋` and `e = element mod 2³²`,
    ///
    /// ```text
    /// x = e ^ k₀;  x ^= x >> 16;  x *= 0x7FEB_352D;  x ^= x >> 15;
    /// x ^= k₁;     x *= 0x846C_A68B;  x ^= x >> 16;  r = x >> 8      (32-bit, wrapping)
    /// ```
    ///
    /// (two rounds of a multiply-xorshift mixer, the key's high half between them): 32-bit
    /// multiplies only, which every vector unit and a Cortex-M core do in one instruction.
    #[inline(always)]
    pub fn random_bits(slot_key: u64, element: u64) -> u32 {
        BlockKey::new(slot_key, element).bits(element as u32)
    }

    /// The code of `x` in a block of scale `a` (finite, > 0, ≥ |x|), rounded with the 24 bits `r`.
    #[inline(always)]
    pub fn encode(self, x: f32, a: f32, r: u32) -> u8 {
        let d = Divisor::new(a);
        match self {
            Map::Unsigned => encode_unsigned(x, d, r),
            Map::Signed => encode_signed(x, d, r),
        }
    }
}

/// The per-block part of [`Map::random_bits`]: `k₀` and `k₁` for elements that share their
/// index's high half (a block never straddles a multiple of 2³², which is a multiple of 256).
#[derive(Clone, Copy)]
pub(crate) struct BlockKey {
    /// `k₀`.
    pub lo: u32,
    /// `k₁`.
    pub hi: u32,
}

impl BlockKey {
    #[inline(always)]
    fn new(slot_key: u64, element: u64) -> Self {
        BlockKey {
            lo: slot_key as u32,
            hi: (slot_key >> 32) as u32 ^ (element >> 32) as u32,
        }
    }

    /// [`Map::random_bits`] of the element whose index's low half is `e`.
    #[inline(always)]
    fn bits(self, e: u32) -> u32 {
        let mut x = e ^ self.lo;
        x ^= x >> 16;
        x = x.wrapping_mul(HASH_MULTIPLIERS[0]);
        x ^= x >> 15;
        x ^= self.hi;
        x = x.wrapping_mul(HASH_MULTIPLIERS[1]);
        x ^= x >> 16;
        x >> 8
    }
}

/// A block's scale a (finite, > 0) and what divides by it: `σ = 2^(127 − min(max(E, 1), 253))`
/// for a's biased exponent E, and `ι = 1 / (a · σ)`. `a · σ` is in [1, 2) (in [2, 4) for
/// E = 254, in (2⁻²³, 1) for a subnormal a), so ι is a normal number and so are the products below.
#[derive(Clone, Copy)]
pub(crate) struct Divisor {
    /// The scale.
    pub a: f32,
    /// σ.
    pub sigma: f32,
    /// ι.
    pub iota: f32,
}

impl Divisor {
    #[inline(always)]
    fn new(a: f32) -> Self {
        let e = (a.to_bits() >> 23).clamp(1, 253);
        let sigma = f32::from_bits((254 - e) << 23);
        Divisor {
            a,
            sigma,
            iota: 1.0 / (a * sigma),
        }
    }

    /// `u` for `m = |x|`: 1 where `m = a`, else `(m · σ) · ι`. Two roundings from `m / a`, so
    /// within about an ulp of it, and below 1 for every `m < a` (`m ≤ a · (1 − 2⁻²⁴)` and
    /// `ι ≤ (1 + 2⁻²⁴) / (a · σ)`, whose product rounds to at most 1).
    #[inline(always)]
    fn quotient(self, m: f32) -> f32 {
        // Both are ≥ 0 and finite: equal exactly where their bits are.
        if m.to_bits() == self.a.to_bits() {
            1.0
        } else {
            (m * self.sigma) * self.iota
        }
    }
}

#[inline(always)]
fn encode_unsigned(x: f32, d: Divisor, r: u32) -> u8 {
    let u = d.quotient(abs(x));
    let j = round_index::<256, 12>(&UNSIGNED_FRACTIONS, UNSIGNED[1], u, r);
    // At least 1 for x ≠ 0, from x's bits (no floating-point compare on the scalar cores).
    j.max((x.to_bits() << 1 != 0) as i32) as u8
}

#[inline(always)]
fn encode_signed(x: f32, d: Divisor, r: u32) -> u8 {
    let u = d.quotient(abs(x));
    let j = round_index::<128, 8>(&SIGNED_FRACTIONS, SIGNED[1], u, r) as u8;
    // x's sign bit (x is finite here; −0 has j = 0), kept where the code is not 0.
    let sign = ((x.to_bits() >> 31) << 7) as u8;
    j | if j != 0 { sign } else { 0 }
}

/// `j` with `table[j] ≤ u < table[j + 1]` (`table` = [`log_map`]`::<N, K>` of `frac` =
/// [`fractional_powers`]`::<K>`, `bottom = table[1]`, `u ≤ 1`), plus one with probability
/// `(u − table[j]) / (table[j + 1] − table[j])` drawn from the 24 bits `r`: up when
/// `(r · 2⁻²⁴) · (hi − lo) < v − lo`, with `(v, lo, hi)` from [`neighbours`]. At `u = 1`,
/// `v = lo`, so the top code never rounds up.
///
/// Where nothing vectorizes (32-bit Arm and RISC-V), the neighbours are read from the table
/// instead and compared unscaled: the same decision, since the scaling is exact, in fewer
/// instructions than the selects that keep the vector loop free of lookups.
#[inline(always)]
fn round_index<const N: usize, const K: usize>(frac: &[f32; K], bottom: f32, u: f32, r: u32) -> i32 {
    let threshold = r as f32 * (1.0 / 16_777_216.0);
    if LOOKUP {
        return round_index_lookup::<N>(u, threshold);
    }
    let (j, v, lo, hi) = neighbours::<N, K>(frac, bottom, u);
    j + (threshold * (hi - lo) < v - lo) as i32
}

/// Whether [`round_index`] reads the neighbours from the table.
const LOOKUP: bool = cfg!(any(target_arch = "arm", target_arch = "riscv32"));

/// [`round_index`] with `(u, table[j], table[j + 1])` in place of [`neighbours`]' bracket.
#[inline(always)]
fn round_index_lookup<const N: usize>(u: f32, threshold: f32) -> i32 {
    let (table, lanes): (&[f32], _) = if N == 256 {
        (&UNSIGNED, &UNSIGNED_LANES)
    } else {
        (&SIGNED, &SIGNED_LANES)
    };
    let j = octave_index::<N>(lanes, u);
    let (lo, hi) = (table[j], table[(j + 1) & (N - 1)]);
    j as i32 + (j + 1 < N && threshold * (hi - lo) < u - lo) as i32
}

/// The largest `j` with `table[j] ≤ u` ([`neighbours`]' index alone), counted as the vector
/// lanes count it ([`Lanes`]): one table read instead of K − 1 comparisons.
#[inline(always)]
fn octave_index<const N: usize>(lanes: &Lanes, u: f32) -> usize {
    lane_index(lanes, u).1.clamp(0, N as i32 - 1) as usize
}

/// What the vector lanes compute from `u`'s bits with [`Lanes`]: the bucket `i` of u's mantissa
/// within its octave (`(mant + buckets[mant >> 19]) >> 23`) and the table index
/// `per_octave · exponent + i + offset`, not yet clamped to the table.
#[inline(always)]
fn lane_index(lanes: &Lanes, u: f32) -> (usize, i32) {
    let bits = u.to_bits();
    let mant = bits & 0x007f_ffff;
    let i = (mant as i32 + lanes.buckets[(mant >> 19) as usize]) >> 23;
    (
        i as usize,
        lanes.per_octave * (bits >> 23) as i32 + i + lanes.offset,
    )
}

/// The largest `j` with `table[j] ≤ u` for `u` in [0, 1] and the bracket `(v, lo, hi)` of u,
/// without a search or a table lookup: for `u = 2^−o · w`, `w` in [½, 1) (u's mantissa under
/// the exponent of ½), the entries `2^−(o+1) ≤ u` below it are exact powers of two, and within
/// the octave `table[N − 1 − K·(o+1) + i] = 2^−o · frac[K − i]`, so `i` counts the `frac[r] ≤ w`
/// and `(v, lo, hi) = (w, frac[K − i], frac[K − i − 1])` (with `frac[K] = ½`, `frac[−1] = 1`)
/// are `(u, table[j], table[j + 1])` divided by 2^−o: exactly, so every difference and product
/// of the rounding decision is the table's divided by 2^−o too. Indices below 1 (u < table[1],
/// zero, subnormal) are 0 with `(v, lo, hi) = (u, 0, table[1])`; `u = 1` is `N − 1`.
#[inline(always)]
fn neighbours<const N: usize, const K: usize>(frac: &[f32; K], bottom: f32, u: f32) -> (i32, f32, f32, f32) {
    let bits = u.to_bits();
    let exponent = (bits >> 23) as i32;
    let w = f32::from_bits((bits & 0x007f_ffff) | (126 << 23));
    let (mut i, mut lo, mut hi) = (0, 0.5f32, 1.0f32);
    // frac[1..] descends: the last f above w is the smallest, the last f ≤ w from below the largest.
    for &f in &frac[1..] {
        i += (f <= w) as i32;
        if f > w {
            hi = f;
        }
    }
    for &f in frac[1..].iter().rev() {
        if f <= w {
            lo = f;
        }
    }
    let j = N as i32 - 1 - K as i32 * (127 - exponent) + i;
    if j < 1 {
        (0, u, 0.0, bottom)
    } else {
        (j, w, lo, hi)
    }
}

/// `dst[i]` = element `i` of `block` (`dst.len() ≤ 256`).
#[inline(always)]
pub fn dequantize(block: &Q8Block, map: Map, dst: &mut [f32]) {
    // One loop per map: the map is the same for every element.
    match map {
        Map::Unsigned => decode_block(block, Map::Unsigned, dst),
        Map::Signed => decode_block(block, Map::Signed, dst),
    }
}

#[inline(always)]
fn decode_block(block: &Q8Block, map: Map, dst: &mut [f32]) {
    for (d, &c) in dst.iter_mut().zip(&block.codes) {
        *d = map.value(c) * block.scale;
    }
}

/// Stores `src` (`src.len() ≤ 256` elements, the first being element `first` of its tensor) into
/// `block`, rounding with the bits of `slot_key` ([`Map::slot_key`], [`Map::random_bits`]).
#[inline(always)]
pub fn quantize(src: &[f32], map: Map, slot_key: u64, first: usize, block: &mut Q8Block) {
    let Some(encode) = BlockEncode::start(src, slot_key, first, block) else {
        return;
    };
    match map {
        Map::Unsigned => encode_block::<true>(src, encode, &mut block.codes),
        Map::Signed => encode_block::<false>(src, encode, &mut block.codes),
    }
}

/// What every code of one block depends on besides its element: the scale's [`Divisor`], the
/// block's [`BlockKey`] and the low half of its first element's index. [`quantize`] and the
/// vector encodes of [`crate::simd`] share it, so they share the scale and the poisoning too.
#[derive(Clone, Copy)]
pub(crate) struct BlockEncode {
    pub divisor: Divisor,
    pub key: BlockKey,
    /// The low half of the tensor's index of the block's first element.
    pub first: u32,
}

impl BlockEncode {
    /// Sets `block`'s scale from `src` and zeroes its codes, which are then final for an
    /// all-zero or poisoned block (`None`); else what encodes the elements.
    #[inline(always)]
    pub fn start(src: &[f32], slot_key: u64, first: usize, block: &mut Q8Block) -> Option<Self> {
        // The largest |x| by its bits, which order as the magnitudes do (an integer maximum,
        // which vectorizes); bits at or above +∞'s are a non-finite element.
        let mut max = 0u32;
        for &x in src {
            let m = x.to_bits() & 0x7fff_ffff;
            max = if m > max { m } else { max };
        }
        let a = f32::from_bits(max);
        block.codes = [0; BLOCK];
        if max >= 0x7f80_0000 {
            block.scale = f32::NAN;
            return None;
        }
        block.scale = a;
        (a != 0.0).then(|| BlockEncode {
            divisor: Divisor::new(a),
            key: BlockKey::new(slot_key, first as u64),
            first: first as u32,
        })
    }

    /// The code of element `i` of the block, `x`: a vector encode's tail.
    #[inline(always)]
    pub fn code(self, map: Map, x: f32, i: usize) -> u8 {
        let r = self.key.bits(self.first.wrapping_add(i as u32));
        match map {
            Map::Unsigned => encode_unsigned(x, self.divisor, r),
            Map::Signed => encode_signed(x, self.divisor, r),
        }
    }
}

/// The codes of `src` in the block `encode` starts, one loop per map (so that it vectorizes).
#[inline(always)]
fn encode_block<const UNSIGNED: bool>(src: &[f32], encode: BlockEncode, codes: &mut [u8]) {
    let map = if UNSIGNED { Map::Unsigned } else { Map::Signed };
    for (i, (c, &x)) in codes.iter_mut().zip(src).enumerate() {
        *c = encode.code(map, x, i);
    }
}

/// A map's [`round_index`] as vector lanes compute it, with table lookups in place of the
/// mantissa's comparisons. The count `i` of fractional powers ≤ w is
/// `(mant + buckets[mant >> 19]) >> 23` for w's 23 mantissa bits `mant`: each of the 16 buckets
/// of w's top 4 mantissa bits holds at most one fractional power `f`, and its entry is
/// `base · 2²³` for the `base` powers below the bucket, or `(base + 1) · 2²³ − mant(f)`, which
/// carries into bit 23 exactly where `mant ≥ mant(f)`. Then `j = K · E + i + offset` for u's
/// biased exponent E, and [`neighbours`]' bracket is `lo[i]` and `hi[i] = lo[i] + …`, of which
/// the decision needs only `(r · 2⁻²⁴) · (hi − lo)`: the real number `r · step[i]` with
/// `step[i] = (hi − lo) · 2⁻²⁴` (exact, and normal), so it rounds to the same `f32` and the
/// lanes skip a subtraction and a multiply. Below `bottom` (index 0) the bracket is
/// `(u, 0, bottom)`. 16 entries each: one AVX-512 permute, two AVX2 ones, one NEON byte
/// lookup over 64 bytes.
///
/// The scalar cores read the index's fields only (`buckets`, `per_octave`, `offset`).
#[cfg_attr(
    not(any(
        test,
        all(feature = "std", target_arch = "x86_64"),
        all(target_arch = "aarch64", target_feature = "neon")
    )),
    allow(dead_code)
)]
pub(crate) struct Lanes {
    /// Per bucket of w's top 4 mantissa bits, what adds the bucket's count into bit 23.
    pub buckets: [i32; 16],
    /// [`neighbours`]' `lo` by `i` (0 past K).
    pub lo: [f32; 16],
    /// `(hi − lo) · 2⁻²⁴` of [`neighbours`]' bracket by `i` (0 past K).
    pub step: [f32; 16],
    /// `table[1]`: u has index 0 below it.
    pub bottom: f32,
    /// `table[1] · 2⁻²⁴`, the step below `bottom`.
    pub bottom_step: f32,
    /// Codes an octave, K.
    pub per_octave: i32,
    /// `N − 1 − 127 · K`.
    pub offset: i32,
    /// `fractional_powers[r]` by `r` (0 past K): a decode's `table[j] = 2^−q · powers[r]` for
    /// `N − 1 − j = K · q + r`, exactly, with `q` subtracted from the exponent.
    pub powers: [f32; 16],
    /// `⌈2¹¹ / K⌉`: `q = (n · reciprocal) >> 11` for every `n < N` (checked where it is built).
    pub reciprocal: i32,
}

/// [`Lanes`] of the unsigned map V.
pub(crate) static UNSIGNED_LANES: Lanes = lanes::<256, 12>();

/// [`Lanes`] of the signed map M.
pub(crate) static SIGNED_LANES: Lanes = lanes::<128, 8>();

const fn lanes<const N: usize, const K: usize>() -> Lanes {
    let frac = fractional_powers::<K>();
    let mut lanes = Lanes {
        buckets: [0; 16],
        lo: [0.0; 16],
        step: [0.0; 16],
        bottom: log_map::<N, K>()[1],
        bottom_step: log_map::<N, K>()[1] * (1.0 / 16_777_216.0),
        per_octave: K as i32,
        offset: N as i32 - 1 - 127 * K as i32,
        powers: [0.0; 16],
        reciprocal: (2048 + K as i32 - 1) / K as i32,
    };
    let mut n = 0;
    while n < N {
        assert!((n as i32 * lanes.reciprocal) >> 11 == (n / K) as i32);
        n += 1;
    }
    let mut b = 0;
    while b < 16 {
        let start = (b as u32) << 19;
        let (mut base, mut inside) = (0, None);
        let mut r = 1;
        while r < K {
            // Every fractional power but 1 lies in (½, 1): exponent 126, compared by mantissa.
            assert!(frac[r].to_bits() >> 23 == 126);
            let m = frac[r].to_bits() & 0x007f_ffff;
            if m < start {
                base += 1;
            } else if m - start < 1 << 19 {
                assert!(inside.is_none(), "two fractional powers in one bucket");
                inside = Some(m);
            }
            r += 1;
        }
        lanes.buckets[b] = match inside {
            None => base << 23,
            Some(m) => ((base + 1) << 23) - m as i32,
        };
        b += 1;
    }
    let mut i = 0;
    while i < K {
        lanes.lo[i] = if i == 0 { 0.5 } else { frac[K - i] };
        lanes.step[i] = (frac[K - 1 - i] - lanes.lo[i]) * (1.0 / 16_777_216.0);
        lanes.powers[i] = frac[i];
        i += 1;
    }
    lanes
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

    /// The largest j with `table[j] ≤ u`, by search.
    fn searched(table: &[f32], u: f32) -> usize {
        table.partition_point(|&t| t <= u) - 1
    }

    /// `neighbours` gives the searched index, and its bracket scaled back by u's octave is
    /// `(u, table[j], table[j + 1])`.
    fn check_neighbours<const N: usize, const K: usize>(table: &[f32; N], frac: &[f32; K], u: f32) {
        let (j, v, lo, hi) = neighbours::<N, K>(frac, table[1], u);
        let j = j as usize;
        assert_eq!(j, searched(table, u), "{u:e}");
        let octave = if j == 0 {
            1.0
        } else {
            2f64.powi((u.to_bits() >> 23) as i32 - 126)
        };
        assert_eq!(v as f64 * octave, u as f64, "{u:e}");
        assert_eq!(lo as f64 * octave, table[j] as f64, "{u:e}");
        if j + 1 < N {
            assert_eq!(hi as f64 * octave, table[j + 1] as f64, "{u:e}");
        }
    }

    #[test]
    fn neighbours_equal_a_search_over_the_map() {
        let mut probes: Vec<f32> = vec![0.0, 1e-45, f32::MIN_POSITIVE, 1.0];
        for &t in UNSIGNED.iter().chain(&SIGNED) {
            let b = t.to_bits();
            probes.extend([t, f32::from_bits(b.saturating_sub(1)), f32::from_bits(b + 1)]);
        }
        // Every 7th f32 in [0, 1] in optimized builds (a sparser sample unoptimized or under
        // emulation, where the scalar search it checks is no different), and around every
        // entry above.
        let stride = if cfg!(any(homeadam_unoptimized, homeadam_emulated)) {
            9_973
        } else {
            7
        };
        let mut bits = 0u32;
        let mut check = |u: f32| {
            if u <= 1.0 {
                check_neighbours(&UNSIGNED, &UNSIGNED_FRACTIONS, u);
                check_neighbours(&SIGNED, &SIGNED_FRACTIONS, u);
            }
        };
        probes.into_iter().for_each(&mut check);
        while bits <= 1.0f32.to_bits() {
            check(f32::from_bits(bits));
            bits += stride;
        }
    }

    /// [`Lanes`]' index and bracket, in scalar code, against [`neighbours`] (its `hi` through
    /// the decision's product with every 4099th 24-bit draw).
    fn check_lanes<const N: usize, const K: usize>(lanes: &Lanes, frac: &[f32; K], u: f32) {
        let (j, v, lo, hi) = neighbours::<N, K>(frac, lanes.bottom, u);
        let (i, lane_j) = lane_index(lanes, u);
        let inside = u >= lanes.bottom;
        assert_eq!(inside, j >= 1, "{u:e}");
        let (lane_lo, step) = if inside {
            assert_eq!(lane_j, j, "{u:e}");
            let mant = u.to_bits() & 0x007f_ffff;
            assert_eq!(f32::from_bits(mant | 126 << 23), v, "{u:e}");
            (lanes.lo[i], lanes.step[i])
        } else {
            (0.0, lanes.bottom_step)
        };
        assert_eq!(lane_lo, lo, "{u:e}");
        for r in (0..1u32 << 24).step_by(4099).chain([(1 << 24) - 1]) {
            let threshold = r as f32 * (1.0 / 16_777_216.0);
            assert_eq!(threshold * (hi - lo), r as f32 * step, "{u:e} {r}");
        }
    }

    #[test]
    fn lanes_give_the_bracket_of_neighbours() {
        let mut probes: Vec<f32> = vec![0.0, 1e-45, f32::MIN_POSITIVE, 1.0];
        for &t in UNSIGNED.iter().chain(&SIGNED) {
            let b = t.to_bits();
            probes.extend([t, f32::from_bits(b.saturating_sub(1)), f32::from_bits(b + 1)]);
        }
        probes.extend((0..=1.0f32.to_bits()).step_by(999_983).map(f32::from_bits));
        for u in probes.into_iter().filter(|&u| u <= 1.0) {
            check_lanes::<256, 12>(&UNSIGNED_LANES, &UNSIGNED_FRACTIONS, u);
            check_lanes::<128, 8>(&SIGNED_LANES, &SIGNED_FRACTIONS, u);
        }
    }

    #[test]
    fn table_lookups_decide_as_the_scaled_bracket() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..400_000 {
            state = mix64(state.wrapping_add(1));
            let u = f32::from_bits((state as u32) % (1.0f32.to_bits() + 1));
            let r = (state >> 40) as u32;
            let threshold = r as f32 * (1.0 / 16_777_216.0);
            let (j, v, lo, hi) = neighbours::<256, 12>(&UNSIGNED_FRACTIONS, UNSIGNED[1], u);
            let scaled = j + (threshold * (hi - lo) < v - lo) as i32;
            assert_eq!(round_index_lookup::<256>(u, threshold), scaled, "{u:e} {r}");
            let (j, v, lo, hi) = neighbours::<128, 8>(&SIGNED_FRACTIONS, SIGNED[1], u);
            let scaled = j + (threshold * (hi - lo) < v - lo) as i32;
            assert_eq!(round_index_lookup::<128>(u, threshold), scaled, "{u:e} {r}");
        }
    }

    #[test]
    fn quotients_stay_within_an_ulp_and_never_pass_one() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state = mix64(state.wrapping_add(1));
            state
        };
        for _ in 0..200_000 {
            let a = f32::from_bits((next() as u32) % 0x7f80_0000).max(f32::from_bits(1));
            let d = Divisor::new(a);
            assert!(d.iota.is_normal(), "{a:e}");
            assert_eq!(d.quotient(a), 1.0);
            let below = f32::from_bits(a.to_bits() - 1);
            assert!(d.quotient(below) <= 1.0, "{a:e}");
            let m = a * ((next() >> 40) as f32 * (1.0 / 16_777_216.0));
            let q = d.quotient(m);
            let exact = m as f64 / a as f64;
            assert!(q <= 1.0);
            if exact >= f32::MIN_POSITIVE as f64 * 4.0 {
                assert!((q as f64 - exact).abs() <= exact * 2.4e-7, "{m:e} / {a:e}");
            }
        }
    }

    #[test]
    fn random_bits_are_the_documented_hash_and_uniform() {
        let key = Map::slot_key(7, 1);
        let (k0, k1) = (key as u32, (key >> 32) as u32);
        let mut x = 12_345u32 ^ k0;
        x ^= x >> 16;
        x = x.wrapping_mul(0x7feb_352d);
        x ^= x >> 15;
        x ^= k1 ^ 3;
        x = x.wrapping_mul(0x846c_a68b);
        x ^= x >> 16;
        assert_eq!(Map::random_bits(key, (3 << 32) | 12_345), x >> 8);
        // Each of the 24 bits is set about half the time over consecutive elements.
        let n = 1 << 16;
        let mut ones = [0u32; 24];
        for e in 0..n {
            let r = Map::random_bits(key, e);
            assert!(r < 1 << 24);
            for (b, o) in ones.iter_mut().enumerate() {
                *o += (r >> b) & 1;
            }
        }
        for (b, &o) in ones.iter().enumerate() {
            assert!((o as f64 / n as f64 - 0.5).abs() < 0.01, "bit {b}: {o}");
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
                        assert_eq!(crate::bits::abs(y), crate::bits::abs(x));
                    }
                }
            }
            assert_eq!(map.encode(0.0, 1.0, 0), 0);
            assert_eq!(map.encode(-0.0, 1.0, 0), 0);
        }
        // A positive second moment never rounds to 0; a tiny m may.
        assert_eq!(Map::Unsigned.encode(1e-30, 1.0, 0xff_ffff), 1);
        assert_eq!(Map::Signed.encode(1e-30, 1.0, 0xff_ffff), 0);
        // Not even where |x| / a underflows.
        assert_eq!(Map::Unsigned.encode(1e-45, 1e30, 0xff_ffff), 1);
    }

    #[test]
    fn stochastic_codes_are_unbiased() {
        // Scales whose reciprocals are inexact, and values between codes of every octave size.
        for (x, a) in [(0.3f32, 1.0f32), (-1.1, 3.7), (2.9e-7, 1.3e-3), (1.0e-4, 7.0e-2)] {
            for map in [Map::Signed, Map::Unsigned] {
                let x = if map == Map::Unsigned { x.abs() } else { x };
                let n = 1 << 16;
                let key = Map::slot_key(42, 1);
                let sum: f64 = (0..n)
                    .map(|e| map.value(map.encode(x, a, Map::random_bits(key, e))) as f64 * a as f64)
                    .sum();
                let mean = sum / n as f64;
                let rel = (mean - x as f64).abs() / x.abs() as f64;
                assert!(rel < 2e-3, "{map:?} {x:e} in {a:e}: mean {mean:e}");
            }
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
