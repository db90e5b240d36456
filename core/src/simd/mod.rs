//! Conversions between the storage types and `f32` chunks, per instruction set.
//!
//! The fast path ([`crate::kernel::run_fast`]) stages each chunk of half-precision data in `f32`
//! arrays that stay in L1, runs the rule's element loop over them, and converts back. Those
//! conversions are what bounds the half-precision paths, so each instruction set implements
//! [`Convert`] with its own instructions; the element loop itself is the rule's portable code,
//! compiled inside the same `#[target_feature]` function (one pass over the chunk, in L1).
//!
//! Every implementation gives the bits of [`Storage::to_f32`], [`Storage::from_f32`] and
//! [`Storage::from_f32_stochastic`] (tested over every `f16` and sampled `f32` patterns,
//! NaN payloads included), so every path equals the scalar reference bit for bit.

#[cfg(all(feature = "std", target_arch = "x86_64"))]
mod avx512;
#[cfg(all(feature = "std", target_arch = "x86_64"))]
mod x86;

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon;

#[cfg(all(feature = "std", target_arch = "x86_64"))]
pub(crate) use avx512::Avx512;
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub(crate) use neon::Neon;
#[cfg(all(feature = "std", target_arch = "x86_64"))]
pub(crate) use x86::Avx2;

use crate::bits::stochastic_bits;
use crate::q8::{Map, Q8Block};
use crate::storage::Storage;

/// An instruction set of the fast path, as a caller names it: [`Simd::detect`] is what
/// [`crate::Updates::update`] uses; [`crate::Updates::update_on`] runs any available one (tests and
/// benches compare them on one machine).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Simd {
    /// Plain Rust that the compiler vectorizes for the build's baseline target: what a
    /// `no_std` build runs, and a CPU without the instruction sets below.
    Portable,
    /// x86-64 AVX2 + F16C, detected at run time (`std`).
    Avx2,
    /// aarch64 NEON, enabled at compile time (every aarch64 target with an FPU).
    Neon,
    /// x86-64 AVX-512 F, BW, DQ and VL, detected at run time (`std`).
    Avx512,
}

impl Simd {
    /// Every instruction set this crate knows, best last.
    pub const ALL: [Simd; 4] = [Simd::Portable, Simd::Neon, Simd::Avx2, Simd::Avx512];

    /// The best instruction set of this CPU.
    pub fn detect() -> Simd {
        Isa::detect().simd()
    }

    /// Whether this CPU and build can run it.
    pub fn is_available(self) -> bool {
        Isa::of(self).is_some()
    }

    /// Its name, in lower case.
    pub const fn name(self) -> &'static str {
        match self {
            Simd::Portable => "portable",
            Simd::Avx2 => "avx2",
            Simd::Neon => "neon",
            Simd::Avx512 => "avx512",
        }
    }
}

/// The instruction set the fast path uses for a step, chosen once when the step starts; a
/// variant holds the proof that the CPU has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    /// Plain Rust that the compiler vectorizes for the build's baseline target.
    Portable,
    /// x86-64 with AVX2 and F16C, detected at run time.
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    Avx2(Avx2),
    /// x86-64 with AVX-512 F, BW, DQ and VL, detected at run time.
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    Avx512(Avx512),
    /// aarch64 NEON, enabled at compile time (every aarch64 target with an FPU).
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    Neon,
}

impl Isa {
    /// The best instruction set of this CPU (the portable code where nothing better is known).
    pub fn detect() -> Isa {
        Simd::ALL
            .iter()
            .rev()
            .find_map(|&simd| Isa::of(simd))
            .unwrap_or(Isa::Portable)
    }

    /// `simd`, if this CPU and build have it.
    pub fn of(simd: Simd) -> Option<Isa> {
        match simd {
            Simd::Portable => Some(Isa::Portable),
            #[cfg(all(feature = "std", target_arch = "x86_64"))]
            Simd::Avx2 => Avx2::detect().map(Isa::Avx2),
            #[cfg(all(feature = "std", target_arch = "x86_64"))]
            Simd::Avx512 => Avx512::detect().map(Isa::Avx512),
            #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
            Simd::Neon => Some(Isa::Neon),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// The name a caller knows it by.
    pub fn simd(self) -> Simd {
        match self {
            Isa::Portable => Simd::Portable,
            #[cfg(all(feature = "std", target_arch = "x86_64"))]
            Isa::Avx2(_) => Simd::Avx2,
            #[cfg(all(feature = "std", target_arch = "x86_64"))]
            Isa::Avx512(_) => Simd::Avx512,
            #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
            Isa::Neon => Simd::Neon,
        }
    }

    /// Runs `job` with this instruction set's conversions, compiled for its features (the job's
    /// loop is inlined into a `#[target_feature]` function).
    #[inline(always)]
    pub fn run<J: WithConvert>(self, job: J) -> J::Output {
        match self {
            #[cfg(all(feature = "std", target_arch = "x86_64"))]
            // SAFETY: the token exists only where AVX2 and F16C were detected.
            Isa::Avx2(avx2) => unsafe { x86::run_avx2(job, avx2) },
            #[cfg(all(feature = "std", target_arch = "x86_64"))]
            // SAFETY: the token exists only where AVX-512 F, BW, DQ and VL were detected.
            Isa::Avx512(avx512) => unsafe { avx512::run_avx512(job, avx512) },
            #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
            Isa::Neon => job.run(Neon),
            Isa::Portable => job.run(Portable),
        }
    }

    /// Runs `job` over the slices, with this instruction set, in a function of its own that is
    /// never inlined and takes the slices as separate arguments: a job that many callers share
    /// (a rule's element loop) is then compiled once per instruction set rather than once per
    /// caller, and the compiler knows the slices do not overlap (as borrows, they cannot), so
    /// it vectorizes the job's loop without run-time overlap checks.
    #[inline(always)]
    pub fn run_on_slices<J: SlicesJob>(self, job: J, p: &mut [f32], g: &[f32], s: [&mut [f32]; 3]) {
        let [s0, s1, s2] = s;
        match self {
            // SAFETY: the tokens exist only where their features were detected.
            #[cfg(all(feature = "std", target_arch = "x86_64"))]
            Isa::Avx2(avx2) => unsafe { x86::run_avx2_on_slices(job, avx2, p, g, s0, s1, s2) },
            #[cfg(all(feature = "std", target_arch = "x86_64"))]
            Isa::Avx512(avx512) => unsafe { avx512::run_avx512_on_slices(job, avx512, p, g, s0, s1, s2) },
            #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
            Isa::Neon => run_on_slices(job, Neon, p, g, s0, s1, s2),
            Isa::Portable => run_on_slices(job, Portable, p, g, s0, s1, s2),
        }
    }
}

/// `job` with `conv`, never inlined (see [`Isa::run_on_slices`]); for the instruction sets
/// that need no target feature.
#[inline(never)]
fn run_on_slices<J: SlicesJob, C: Convert>(
    job: J,
    conv: C,
    p: &mut [f32],
    g: &[f32],
    s0: &mut [f32],
    s1: &mut [f32],
    s2: &mut [f32],
) {
    job.run(conv, p, g, [s0, s1, s2]);
}

/// Work over θ, g and three state slots as `f32` slices with the conversions and instructions of
/// one instruction set ([`Isa::run_on_slices`]).
pub(crate) trait SlicesJob {
    /// Runs the job with `conv`'s instruction set.
    fn run<C: Convert>(self, conv: C, p: &mut [f32], g: &[f32], s: [&mut [f32]; 3]);
}

/// Work that runs with any instruction set's conversions ([`Isa::run`]): a pass over
/// chunks, compiled for the instruction set so that it vectorizes at its width (what it calls
/// is `#[inline(always)]`).
pub(crate) trait WithConvert {
    /// What the work returns.
    type Output;

    /// Does the work with `conv`'s conversions.
    fn run<C: Convert>(self, conv: C) -> Self::Output;
}

/// Converts chunks of one storage type from and to `f32`.
pub trait Convert: Copy {
    /// Whether the conversions are vector instructions, so that a pass over half-precision
    /// data converts it a chunk at a time through them rather than element by element.
    const VECTOR: bool = true;

    /// `dst[i] = src[i].to_f32()`, over `src.len() == dst.len()` elements.
    fn load<T: Storage>(self, src: &[T], dst: &mut [f32]);

    /// `dst[i] = T::from_f32(src[i])` (round to nearest even).
    fn store<T: Storage>(self, src: &[f32], dst: &mut [T]);

    /// `dst[i] = T::from_f32_stochastic(src[i], stochastic_bits(key, first + i))`.
    fn store_stochastic<T: Storage>(self, src: &[f32], dst: &mut [T], key: u64, first: usize);

    /// `dst[i]` = element `i` of `block` decoded with `map` (`±T[c] · scale`, the bits of
    /// [`crate::q8::dequantize`], `dst.len() ≤ 256`).
    #[inline(always)]
    fn load_q8(self, block: &Q8Block, map: Map, dst: &mut [f32]) {
        crate::q8::dequantize(block, map, dst);
    }

    /// Stores `src` into `block` with `map`, rounding with the bits of `slot_key`, `first` the
    /// tensor's index of `src[0]` (the bits of [`crate::q8::quantize`], `src.len() ≤ 256`).
    #[inline(always)]
    fn store_q8(self, src: &[f32], map: Map, slot_key: u64, first: usize, block: &mut Q8Block) {
        crate::q8::quantize(src, map, slot_key, first, block);
    }
}

/// The conversions as plain loops over [`Storage`]'s scalar functions.
#[derive(Clone, Copy)]
pub(crate) struct Portable;

impl Convert for Portable {
    const VECTOR: bool = false;

    #[inline(always)]
    fn load<T: Storage>(self, src: &[T], dst: &mut [f32]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = s.to_f32();
        }
    }

    #[inline(always)]
    fn store<T: Storage>(self, src: &[f32], dst: &mut [T]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = T::from_f32(*s);
        }
    }

    #[inline(always)]
    fn store_stochastic<T: Storage>(self, src: &[f32], dst: &mut [T], key: u64, first: usize) {
        for (i, (d, s)) in dst.iter_mut().zip(src).enumerate() {
            *d = T::from_f32_stochastic(*s, stochastic_bits(key, (first + i) as u64));
        }
    }
}

/// The raw bits of a slice of a 2-byte storage type; `None` for `f32`.
#[cfg(any(
    all(feature = "std", target_arch = "x86_64"),
    all(target_arch = "aarch64", target_feature = "neon")
))]
#[inline(always)]
fn half_bits<T: Storage>(slice: &[T]) -> Option<&[u16]> {
    if T::DTYPE.size() != 2 {
        return None;
    }
    // SAFETY: `Storage` is sealed; its 2-byte types are `half::f16` and `half::bf16`, both
    // `#[repr(transparent)]` over `u16`, so the slice is `len` valid, aligned `u16`s.
    Some(unsafe { core::slice::from_raw_parts(slice.as_ptr().cast::<u16>(), slice.len()) })
}

/// [`half_bits`] for a mutable slice.
#[cfg(any(
    all(feature = "std", target_arch = "x86_64"),
    all(target_arch = "aarch64", target_feature = "neon")
))]
#[inline(always)]
fn half_bits_mut<T: Storage>(slice: &mut [T]) -> Option<&mut [u16]> {
    if T::DTYPE.size() != 2 {
        return None;
    }
    // SAFETY: as in `half_bits`; the borrow of `slice` is moved into the result.
    Some(unsafe { core::slice::from_raw_parts_mut(slice.as_mut_ptr().cast::<u16>(), slice.len()) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    /// Every NaN payload class, the edges of every range, and pseudo-random patterns.
    pub(super) fn probe_f32() -> impl Iterator<Item = f32> {
        let edges = [
            0u32,
            0x8000_0000,
            1,
            0x8000_0001,
            0x007f_ffff,
            0x0080_0000,
            0x3380_0000,
            0x3380_0001,
            0x387f_e000,
            0x387f_f000,
            0x3880_0000,
            0x477f_e000,
            0x477f_f000,
            0x477f_efff,
            0x7f7f_ffff,
            0x7f7f_8000,
            0x7f80_0000,
            0xff80_0000,
            0x7f80_0001,
            0x7fbf_ffff,
            0x7fc0_0000,
            0x7fff_ffff,
            0xffff_ffff,
            0xff80_0001,
            0x7f80_2000,
            0x7f80_8000,
            0x3f80_8000,
            0x3f81_8000,
            0xbf80_8000,
        ];
        // Fewer in unoptimized builds, where the scalar conversions are far slower.
        let random = if cfg!(homeadam_unoptimized) {
            20_000
        } else {
            300_000
        };
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        edges
            .into_iter()
            .map(f32::from_bits)
            .chain((0..random).map(move |_| {
                state = crate::bits::mix64(state.wrapping_add(1));
                f32::from_bits(state as u32)
            }))
    }

    /// `conv` gives the scalar conversions' bits for `T`, at every length up to 40 (the tails).
    pub(super) fn check_convert<T: Storage, C: Convert>(conv: C) {
        let xs: std::vec::Vec<f32> = probe_f32().collect();
        for len in (0..40).chain([1000, xs.len()]) {
            for window in xs.chunks(len.max(1)).take(if len < 40 { 50 } else { 2 }) {
                let window = &window[..len.min(window.len())];
                let mut near = std::vec![T::default(); window.len()];
                conv.store(window, &mut near);
                let mut stoch = std::vec![T::default(); window.len()];
                conv.store_stochastic(window, &mut stoch, 0x1234_5678, len * 7);
                for (i, &x) in window.iter().enumerate() {
                    let r = stochastic_bits(0x1234_5678, (len * 7 + i) as u64);
                    assert_eq!(
                        near[i].to_bits32(),
                        T::from_f32(x).to_bits32(),
                        "{:#x}",
                        x.to_bits()
                    );
                    let s = T::from_f32_stochastic(x, r).to_bits32();
                    assert_eq!(stoch[i].to_bits32(), s, "{:#x} r {r:#x}", x.to_bits());
                }
                let mut back = std::vec![0.0f32; window.len()];
                conv.load(&near, &mut back);
                for (b, n) in back.iter().zip(&near) {
                    assert_eq!(b.to_bits(), n.to_f32().to_bits());
                }
            }
        }
        let every: std::vec::Vec<T> = (0..=u16::MAX as u32).map(T::from_bits32).collect();
        let mut wide = std::vec![0.0f32; every.len()];
        conv.load(&every, &mut wide);
        for (w, e) in wide.iter().zip(&every) {
            assert_eq!(w.to_bits(), e.to_f32().to_bits(), "{:#x}", e.to_bits32());
        }
    }

    /// [`check_convert`] for every storage type.
    pub(super) fn check_conversions<C: Convert>(conv: C) {
        check_convert::<bf16, _>(conv);
        check_convert::<f16, _>(conv);
        check_convert::<f32, _>(conv);
    }

    #[test]
    fn portable_is_the_scalar_conversion() {
        check_conversions(Portable);
    }

    /// Tensor sizes around the 256-element block and the vector widths.
    const Q8_SIZES: [usize; 6] = [1, 255, 256, 257, 1000, 4097];

    /// A block's elements: of one scale, each drawn from the classes a q8 encode treats apart
    /// (zeros of both signs, subnormals, map entries and their f32 neighbours, points between
    /// entries, values below `table[1]`, the scale itself, ordinary values), signed at random;
    /// now and then a block holds a NaN or an infinity, which poisons it.
    fn q8_values(n: usize, seed: u64) -> std::vec::Vec<f32> {
        let mut state = seed;
        let mut next = move || {
            state = crate::bits::mix64(state.wrapping_add(0x9e37_79b9_7f4a_7c15));
            state
        };
        let scales = [1.0f32, 0.25, 2.5, 3.7e-5, 1e30, f32::MAX, 1e-40, 1.2e-38];
        let mut out = std::vec::Vec::with_capacity(n);
        let mut scale = 1.0;
        for i in 0..n {
            let z = next();
            if i % 256 == 0 || z % 97 == 0 {
                scale = scales[(z >> 8) as usize % scales.len()];
            }
            let table: &[f32] = if z & (1 << 20) == 0 {
                &crate::q8::UNSIGNED
            } else {
                &crate::q8::SIGNED
            };
            let t = table[(z >> 24) as usize % (table.len() - 1)];
            let up = table[(z >> 24) as usize % (table.len() - 1) + 1];
            let uniform = (z >> 40) as f32 / 16_777_216.0;
            let magnitude = match (z >> 4) % 12 {
                0 => 0.0,
                1 => f32::from_bits((z >> 32) as u32 & 0x007f_ffff),
                2 | 3 => t * scale,
                4 => f32::from_bits((t * scale).to_bits().saturating_add(1)),
                5 => f32::from_bits((t * scale).to_bits().saturating_sub(1)),
                6 => (t + (up - t) * uniform) * scale,
                7 => table[1] * uniform * scale,
                8 => scale,
                _ => uniform * scale,
            };
            let x = if z & 1 == 1 { -magnitude } else { magnitude };
            out.push(match z % 1999 {
                0 => f32::NAN,
                1 => f32::INFINITY,
                2 => f32::NEG_INFINITY,
                _ => x,
            });
        }
        out
    }

    /// `conv`'s q8 encode and decode give the bits of [`crate::q8::quantize`] and
    /// [`crate::q8::dequantize`], block by block, on tensors of [`Q8_SIZES`] elements whose first
    /// index is 0 or just below 2³² (the random bits' key changes there), with both maps.
    pub(super) fn check_q8<C: Convert>(conv: C) {
        use crate::q8::{dequantize, quantize, BLOCK};
        for (t, &n) in Q8_SIZES.iter().enumerate() {
            for (s, base) in [0usize, (1 << 32) - 1024].into_iter().enumerate() {
                if base > usize::MAX - n {
                    continue;
                }
                let xs = q8_values(n, (t * 2 + s) as u64);
                for map in [Map::Unsigned, Map::Signed] {
                    let key = Map::slot_key(0x5eed ^ t as u64, s);
                    for (b, src) in xs.chunks(BLOCK).enumerate() {
                        let first = base + b * BLOCK;
                        let mut junk = Q8Block::ZERO;
                        junk.codes.iter_mut().enumerate().for_each(|(i, c)| *c = i as u8);
                        let (mut fast, mut slow) = (junk, junk);
                        conv.store_q8(src, map, key, first, &mut fast);
                        quantize(src, map, key, first, &mut slow);
                        assert_eq!(
                            fast.scale.to_bits(),
                            slow.scale.to_bits(),
                            "{map:?} n {n} block {b}"
                        );
                        for (i, (f, s)) in fast.codes.iter().zip(&slow.codes).enumerate() {
                            let x = src.get(i).copied().unwrap_or(0.0);
                            assert_eq!(
                                f, s,
                                "{map:?} n {n} block {b} element {i}: {x:e} of {:e}",
                                slow.scale
                            );
                        }
                        let (mut back_fast, mut back_slow) = ([0.0f32; BLOCK], [0.0f32; BLOCK]);
                        conv.load_q8(&slow, map, &mut back_fast[..src.len()]);
                        dequantize(&slow, map, &mut back_slow[..src.len()]);
                        for (f, s) in back_fast.iter().zip(&back_slow) {
                            assert_eq!(f.to_bits(), s.to_bits(), "{map:?} n {n} block {b}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn portable_q8_is_the_scalar_encode() {
        check_q8(Portable);
    }
}
