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

/// Runs `pass` (a loop over slices without conversions: a reduction, a check) compiled for this
/// CPU's best instruction set, so that it vectorizes at that width; `pass` must be inlined
/// into it, so what it calls is `#[inline(always)]`.
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

#[inline(always)]
pub(crate) fn fastest<R>(pass: impl FnOnce() -> R) -> R {
    /// The pass as a job whose conversions go unused.
    struct Pass<F>(F);

    impl<R, F: FnOnce() -> R> WithConvert for Pass<F> {
        type Output = R;

        #[inline(always)]
        fn run<C: Convert>(self, _: C) -> R {
            (self.0)()
        }
    }

    Isa::detect().run(Pass(pass))
}

/// Work over chunks that runs with any instruction set's conversions ([`Isa::run`]).
/// Work over θ, g and three state slots as `f32` slices with the conversions and instructions of
/// one instruction set ([`Isa::run_on_slices`]).
pub(crate) trait SlicesJob {
    /// Runs the job with `conv`'s instruction set.
    fn run<C: Convert>(self, conv: C, p: &mut [f32], g: &[f32], s: [&mut [f32]; 3]);
}

pub(crate) trait WithConvert {
    /// What the work returns.
    type Output;

    /// Does the work with `conv`'s conversions.
    fn run<C: Convert>(self, conv: C) -> Self::Output;
}

/// Converts chunks of one storage type from and to `f32`.
pub trait Convert: Copy {
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
}

/// The conversions as plain loops over [`Storage`]'s scalar functions.
#[derive(Clone, Copy)]
pub(crate) struct Portable;

impl Convert for Portable {
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

    #[test]
    fn portable_is_the_scalar_conversion() {
        check_convert::<bf16, _>(Portable);
        check_convert::<f16, _>(Portable);
        check_convert::<f32, _>(Portable);
    }
}
