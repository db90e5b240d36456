//! The fast path of 32-bit Arm and RISC-V ([`run_scalar`]), and the finite check of the
//! gradients that every path runs before a step that may be skipped ([`grads_finite`]).

use super::{Kernel, Part, SlotStores, TensorResult};
use crate::bits::is_nonfinite;
use crate::lines::Lines;
use crate::reduce::{as_f32, CHUNK};
use crate::rounding::ParamStore;
use crate::simd::Convert;
use crate::state::{Requantize, StateStorage};
use crate::storage::{Dtype, Storage};

/// Whether the fast path runs [`run_scalar`] rather than the staged, vectorized [`run_chunks`]:
/// on 32-bit Arm and RISC-V, whose compilers do not vectorize the element loop.
pub(crate) const SCALAR_LOOP: bool = cfg!(any(target_arch = "arm", target_arch = "riscv32"));

/// Whether [`run_scalar`] runs on a hardware FPU (hard-float 32-bit Arm, RISC-V with F), where
/// a float operation costs one instruction rather than a library call.
pub(crate) const SCALAR_FPU: bool = SCALAR_LOOP && cfg!(any(target_abi = "eabihf", target_feature = "f"));

/// Whether the scalar loop's finite checks sum 0·g (±0 while every g is finite, NaN from the
/// first that is not: one multiply-add per element) rather than OR the exponent tests: on
/// scalar targets with a hardware FPU. Soft-float cores keep the integer test, which costs
/// no float library call.
pub(super) const SUM_ZEROS: bool = SCALAR_FPU;

/// Whether [`run_scalar`] first checks that a chunk's `f32` gradients are finite when
/// 1/grad_scale = 1, so that its loop takes g itself (g · 1 = g for finite g) and sums no
/// 0·g: 1.2 instructions per element for the check ([`sum_zeros_unscaled`]) against 2 saved
/// in the loop, on hard-float Arm (and in the host tests, which hold both loops to the reference).
const UNIT_CHUNKS: bool = cfg!(any(test, all(target_arch = "arm", target_abi = "eabihf")));

/// The fast path of targets whose compiler does not vectorize the element loop (32-bit Arm and
/// RISC-V: microcontrollers, and ARMv7's NEON, which is not IEEE): staging arrays would only
/// add copies there. One loop per chunk reads and writes the data in place, converting each
/// half-precision element as it goes (the same scalar conversions as the reference), and
/// folds the reductions in: min v, the home count, and the finite check (Σ 0·g with `SUM`,
/// see [`SUM_ZEROS`]; a chunk found finite beforehand, see [`UNIT_CHUNKS`], skips it). Only q8
/// state is decoded a chunk at a time
/// ([`StateOps::elements`](crate::state::sealed::StateOps::elements)).
///
/// On hard-float Arm, whose loop comes in two copies (see [`UNIT_CHUNKS`]), not inlined, so
/// that its callers share it (the single-rule firmware's step fits 4 KB); inlined elsewhere
/// (on the soft-float cores the call costs 2 %).
#[cfg_attr(all(target_arch = "arm", target_abi = "eabihf"), inline(never))]
#[cfg_attr(not(all(target_arch = "arm", target_abi = "eabihf")), inline(always))]
pub(crate) fn run_scalar<
    const SUM: bool,
    K: Kernel,
    P: Storage,
    G: Storage,
    S: StateStorage,
    R: ParamStore,
>(
    kernel: K,
    part: Part<'_, P, G, S>,
    inv_grad_scale: f32,
    store: R,
    how: SlotStores,
) -> TensorResult {
    let Part {
        param,
        grad,
        mut slots,
        first,
    } = part;
    let n = param.len();
    let mut acc = Totals {
        result: TensorResult::new(),
        home: 0,
        sum: 0.0,
        bad: 0,
    };
    let mut bufs = [S::BUF; 3];
    let mut start = 0;
    while start < n {
        let len = CHUNK.min(n - start);
        let end = start + len;
        let (p, g) = (&mut param[start..end], &grad[start..end]);
        let [s0, s1, s2] = &mut slots;
        let [b0, b1, b2] = &mut bufs;
        let unit = UNIT_CHUNKS
            && SUM
            && G::DTYPE == Dtype::F32
            && inv_grad_scale == 1.0
            && sum_zeros_unscaled(g) == 0.0;
        let chunk = Chunk {
            p,
            g,
            slots: [
                slot_elements::<K, S>(0, s0, start, len, how, b0),
                slot_elements::<K, S>(1, s1, start, len, how, b1),
                slot_elements::<K, S>(2, s2, start, len, how, b2),
            ],
            at: first + start,
        };
        if unit {
            update::<true, SUM, _, _, _, _, _>(kernel, chunk, inv_grad_scale, store, &mut acc);
        } else {
            update::<false, SUM, _, _, _, _, _>(kernel, chunk, inv_grad_scale, store, &mut acc);
        }
        for (k, (slot, buf)) in slots.iter_mut().zip(&bufs).enumerate().take(K::SLOTS) {
            let requantize = Requantize {
                map: how.maps[k],
                slot_key: how.keys[k],
                first: first + start,
            };
            S::store_elements(slot, start, len, buf, requantize);
        }
        start = end;
    }
    let mut result = acc.result;
    result.home = acc.home;
    result.nonfinite = acc.sum != 0.0 || acc.bad != 0;
    result
}

/// What [`run_scalar`] accumulates over a tensor: the result's reductions, the home count and
/// the finite check (Σ 0·g, or the OR of the exponent tests).
struct Totals {
    result: TensorResult,
    home: u32,
    sum: f32,
    bad: u32,
}

/// One chunk of a tensor for [`update`]: θ, the gradients, the slots' elements (empty past the
/// rule's slots), and the tensor's index of `p[0]`.
struct Chunk<'a, P, G, E> {
    p: &'a mut [P],
    g: &'a [G],
    slots: [&'a mut [E]; 3],
    at: usize,
}

/// [`run_scalar`]'s loop over one chunk. `UNIT`: 1/grad_scale = 1 and every g is finite
/// (checked), so g is used as loaded and the finite check is skipped.
#[inline(always)]
fn update<const UNIT: bool, const SUM: bool, K: Kernel, P: Storage, G: Storage, E: Storage, R: ParamStore>(
    kernel: K,
    chunk: Chunk<'_, P, G, E>,
    inv_grad_scale: f32,
    store: R,
    acc: &mut Totals,
) {
    let Chunk {
        p,
        g,
        slots: [c0, c1, c2],
        at,
    } = chunk;
    let slot = |k: usize| K::SLOTS > k;
    let (mut home, mut sum, mut bad) = (acc.home, acc.sum, acc.bad);
    // The chunk's own minimum: the tensor's, and for [`Kernel::DECIDES`] where it sits, are
    // folded once after the loop.
    let mut v_min = f32::INFINITY;
    let mut v_min_active = acc.result.v_min_active;
    for i in 0..p.len() {
        let mut s = [0.0f32; 3];
        if slot(0) {
            s[0] = c0[i].to_f32();
        }
        if slot(1) {
            s[1] = c1[i].to_f32();
        }
        if slot(2) {
            s[2] = c2[i].to_f32();
        }
        let gi = if UNIT {
            g[i].to_f32()
        } else {
            g[i].to_f32() * inv_grad_scale
        };
        let e = kernel.element(p[i].to_f32(), gi, &mut s);
        p[i] = store.store(e.p, at + i);
        if slot(0) {
            c0[i] = E::from_f32(s[0]);
        }
        if slot(1) {
            c1[i] = E::from_f32(s[1]);
        }
        if slot(2) {
            c2[i] = E::from_f32(s[2]);
        }
        if let Some(r) = K::RHO_SLOT {
            if s[r] < v_min {
                v_min = s[r];
            }
            if K::DECIDES && s[r] > 0.0 && s[r] < v_min_active {
                v_min_active = s[r];
            }
        }
        home += e.home as u32;
        // A `UNIT` chunk was found finite before the loop.
        if !UNIT && SUM {
            sum += gi * 0.0;
        } else if !UNIT {
            bad |= is_nonfinite(gi) as u32;
        }
        if K::DOTS {
            acc.result.step_sq.add_square(e.step);
            acc.result.step_grad.add_product(e.step, e.grad);
        }
    }
    (acc.home, acc.sum, acc.bad) = (home, sum, bad);
    if v_min < acc.result.v_min {
        acc.result.v_min = v_min;
        acc.result.v_min_at = at;
    }
    acc.result.v_min_active = v_min_active;
}

/// Slot `k`'s chunk for [`run_scalar`] (empty past the rule's slots).
#[inline(always)]
fn slot_elements<'a, K: Kernel, S: StateStorage>(
    k: usize,
    slot: &'a mut [S],
    start: usize,
    len: usize,
    how: SlotStores,
    buf: &'a mut S::Buf,
) -> &'a mut [S::Elem] {
    if K::SLOTS > k {
        &mut S::elements(slot, start, len, how.maps[k], buf)[..len]
    } else {
        &mut []
    }
}

/// Whether every unscaled gradient is finite (one read of the gradients): an integer OR of the
/// exponent tests, which vectorizes, or with [`SUM_ZEROS`] Σ 0·g. The sum does not form the
/// unscaled g for 1/grad_scale ≤ 1: |g · inv| ≤ |g| rounds to a finite value exactly when g is
/// finite. Half-precision gradients are converted a chunk at a time with `conv`'s instructions
/// where they are vector ones ([`Convert::VECTOR`]).
#[inline(always)]
pub(crate) fn grads_finite<C: Convert, G: Storage>(conv: C, grad: &[G], inv_grad_scale: f32) -> bool {
    if SUM_ZEROS {
        return if inv_grad_scale <= 1.0 {
            sum_zeros_unscaled(grad) == 0.0
        } else {
            sum_zeros(grad, |g| g * inv_grad_scale) == 0.0
        };
    }
    let mut staged = Lines::<CHUNK>::new();
    for chunk in grad.chunks(CHUNK) {
        let bad = if C::VECTOR {
            any_nonfinite(as_f32(conv, chunk, &mut staged.0), inv_grad_scale)
        } else {
            any_nonfinite(chunk, inv_grad_scale)
        };
        if bad {
            return false;
        }
    }
    true
}

/// Whether some g · `inv_grad_scale` over `chunk` is not finite.
#[inline(always)]
fn any_nonfinite<G: Storage>(chunk: &[G], inv_grad_scale: f32) -> bool {
    let mut bad = 0u32;
    for g in chunk {
        bad |= is_nonfinite(g.to_f32() * inv_grad_scale) as u32;
    }
    bad != 0
}

/// Σ 0 · g over `grad` (±0, or NaN when some g is not finite): on hard-float Arm, `f32`
/// gradients sixteen at a time by [`sum_zeros_16`].
#[inline(always)]
fn sum_zeros_unscaled<G: Storage>(grad: &[G]) -> f32 {
    #[cfg(all(target_arch = "arm", target_abi = "eabihf"))]
    if let Some(grad) = G::as_f32(grad) {
        let blocks = grad.len() / 16;
        let (head, tail) = grad.split_at(blocks * 16);
        return tail.iter().fold(sum_zeros_16(head), |bad, g| bad + g * 0.0);
    }
    sum_zeros(grad, |g| g)
}

/// Σ 0 · g over `grad`, whose length is a multiple of 16: one `vldmia` of sixteen gradients
/// and sixteen multiply-adds (not fused on these FPUs, so each term is exactly ±0 or NaN),
/// 1.2 instructions per gradient where LLVM's loop of four takes 3. The compiler cannot
/// name single-precision registers on these targets (see [`crate::math::sqrt`]), so the block
/// saves and restores the ones it uses.
#[cfg(all(target_arch = "arm", target_abi = "eabihf"))]
fn sum_zeros_16(grad: &[f32]) -> f32 {
    let blocks = grad.len() / 16;
    if blocks == 0 {
        return 0.0;
    }
    let bits: u32;
    // SAFETY: reads `blocks` × 16 floats from `grad` (in bounds: its length is a multiple of 16,
    // `blocks` ≥ 1); s0–s17 are saved and restored and the stack is balanced.
    unsafe {
        core::arch::asm!(
            "vpush {{s0-s17}}",
            "vmov s16, {zero}",
            "vmov s17, {zero}",
            "2:",
            "vldmia {ptr}!, {{s0-s15}}",
            "vmla.f32 s16, s0, s17",
            "vmla.f32 s16, s1, s17",
            "vmla.f32 s16, s2, s17",
            "vmla.f32 s16, s3, s17",
            "vmla.f32 s16, s4, s17",
            "vmla.f32 s16, s5, s17",
            "vmla.f32 s16, s6, s17",
            "vmla.f32 s16, s7, s17",
            "vmla.f32 s16, s8, s17",
            "vmla.f32 s16, s9, s17",
            "vmla.f32 s16, s10, s17",
            "vmla.f32 s16, s11, s17",
            "vmla.f32 s16, s12, s17",
            "vmla.f32 s16, s13, s17",
            "vmla.f32 s16, s14, s17",
            "vmla.f32 s16, s15, s17",
            "subs {blocks}, {blocks}, #1",
            "bne 2b",
            "vmov {zero}, s16",
            "vpop {{s0-s17}}",
            ptr = inout(reg) grad.as_ptr() => _,
            blocks = inout(reg) blocks => _,
            zero = inout(reg) 0u32 => bits,
            options(readonly),
        );
    }
    f32::from_bits(bits)
}

/// Σ 0 · unscale(g) over `grad`, four elements per iteration (see [`grads_finite`]).
#[inline(always)]
fn sum_zeros<G: Storage>(grad: &[G], unscale: impl Fn(f32) -> f32) -> f32 {
    let mut bad = 0.0f32;
    let mut fours = grad.chunks_exact(4);
    for four in &mut fours {
        bad += unscale(four[0].to_f32()) * 0.0;
        bad += unscale(four[1].to_f32()) * 0.0;
        bad += unscale(four[2].to_f32()) * 0.0;
        bad += unscale(four[3].to_f32()) * 0.0;
    }
    for g in fours.remainder() {
        bad += unscale(g.to_f32()) * 0.0;
    }
    bad
}

#[cfg(test)]
mod tests {
    //! [`run_scalar`] is what 32-bit Arm and RISC-V run; these tests hold it to the scalar
    //! reference on the host, bit for bit (the firmware's golden test checks it on the device).

    use super::*;
    use crate::bits::mix64;
    use crate::config::Config;
    use crate::kernel::run_reference;
    use crate::kernel::Apply;
    use crate::rounding::{NearestStore, StochasticStore};
    use crate::rules::homeadam::branch;
    use crate::rules::only::All;
    use crate::rules::{with_kernel, ElementKernel, Rule, Switch};
    use crate::scalars::StepScalars;
    use crate::simd::Portable;
    use crate::tensor::Tensor;
    use crate::tensor::TensorAux;
    use half::{bf16, f16};
    use std::vec::Vec;

    /// Mostly ordinary values, some zeros, huge ones (g² overflows) and denormals.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let r = mix64(seed ^ (i as u64).wrapping_mul(0x9e37_79b9));
                let x = (r >> 40) as f32 / 16_777_216.0 * 2.0 - 1.0;
                match r % 16 {
                    0 => 0.0,
                    1 => x * 1e18,
                    2 => x * 1e-40,
                    3..=6 => x * 1e-4,
                    _ => x,
                }
            })
            .collect()
    }

    fn same_bits<T: Storage>(a: &[T], b: &[T]) -> bool {
        a.iter().zip(b).all(|(x, y)| x.to_bits32() == y.to_bits32())
    }

    /// Four steps of `kernel` on one tensor of `n` elements through both drivers (1/grad_scale
    /// = 1 on steps 0 and 2, which the loop takes with g itself where a chunk is finite); when
    /// `poison`, step 2's gradient has a signaling NaN or +∞ (in one chunk of several) and step
    /// 3's a quiet NaN or −∞ at another element.
    fn check<const SUM: bool, K: Kernel, P: Storage, S: StateStorage>(
        kernel: K,
        config: &Config,
        n: usize,
        poison: bool,
    ) {
        let from = |v: Vec<f32>| -> Vec<P> { v.into_iter().map(P::from_f32).collect() };
        let mut p_ref = from(values(n, 1));
        let mut p_fast = p_ref.clone();
        let mut s_ref = std::vec![S::default(); K::SLOTS * S::slot_len(n)];
        let mut s_fast = s_ref.clone();
        for step in 0..4u64 {
            let mut g: Vec<f32> = values(n, 10 + step);
            if poison && step >= 2 && n > 0 {
                // Not the element poisoned at step 2, whose state is NaN by then: an operation
                // on two NaNs returns either one's payload, as the compiler orders the operands.
                let at = if step == 2 { n / 2 } else { n / 4 };
                g[at] = match (step, n.is_multiple_of(2)) {
                    (2, true) => f32::from_bits(0x7f80_0001),
                    (2, false) => f32::INFINITY,
                    (_, true) => f32::NAN,
                    (_, false) => f32::NEG_INFINITY,
                };
            }
            let key = 0x1234 + step;
            let slots = SlotStores::new(config, key);
            let inv = if step % 2 == 0 { 1.0 } else { 0.5 };
            for stochastic in [false, true] {
                let mut aux = TensorAux::default();
                let mut t = Tensor::new(&mut p_ref[..], &g[..], &mut s_ref[..], &mut aux);
                let part = Part::whole(&mut p_fast[..], &g[..], &mut s_fast[..], K::SLOTS);
                let (a, b) = if stochastic {
                    let store = StochasticStore { key };
                    let a = run_reference(kernel, &mut t, inv, store, slots);
                    (
                        a,
                        run_scalar::<SUM, _, _, _, _, _>(kernel, part, inv, store, slots),
                    )
                } else {
                    let a = run_reference(kernel, &mut t, inv, NearestStore, slots);
                    (
                        a,
                        run_scalar::<SUM, _, _, _, _, _>(kernel, part, inv, NearestStore, slots),
                    )
                };
                let what = (S::DTYPE.name(), P::DTYPE.name(), n, step, stochastic);
                assert!(same_bits(&p_ref, &p_fast), "θ {what:?}");
                assert!(s_ref == s_fast || same_state(&s_ref, &s_fast), "state {what:?}");
                assert_eq!(a.v_min.to_bits(), b.v_min.to_bits(), "{what:?}");
                assert_eq!((a.home, a.nonfinite), (b.home, b.nonfinite), "{what:?}");
                assert_eq!(a.step_sq.to_f64().to_bits(), b.step_sq.to_f64().to_bits());
                assert_eq!(a.step_grad.to_f64().to_bits(), b.step_grad.to_f64().to_bits());
            }
        }
    }

    /// State equality by bits (NaN ≠ NaN under `==`).
    fn same_state<S: StateStorage>(a: &[S], b: &[S]) -> bool {
        let (mut x, mut y) = ([0u8; 512], [0u8; 512]);
        a.iter().zip(b).all(|(p, q)| {
            let len = <S as crate::state::sealed::StateOps>::ITEM_BYTES;
            crate::state::sealed::StateOps::write_item(p, &mut x[..len]);
            crate::state::sealed::StateOps::write_item(q, &mut y[..len]);
            x[..len] == y[..len]
        })
    }

    /// [`check`] as a computation the kernel table runs.
    struct Check<'c, const SUM: bool, P, S> {
        config: &'c Config,
        n: usize,
        poison: bool,
        types: core::marker::PhantomData<(P, S)>,
    }

    impl<const SUM: bool, P: Storage, S: StateStorage> Apply for Check<'_, SUM, P, S> {
        type Out = ();

        fn apply<K: Kernel>(self, kernel: K) {
            check::<SUM, K, P, S>(kernel, self.config, self.n, self.poison)
        }
    }

    /// Every element kernel of the table (HomeAdam's in each branch), through the table's
    /// own dispatch.
    fn every_kernel<const SUM: bool, P: Storage, S: StateStorage>(n: usize, poison: bool) {
        let mut ew = Config::new(Rule::HomeAdamW(Switch::Element));
        ew.tau = 1e-6;
        ew.weight_decay = 0.1;
        let configs = [
            ew,
            Config::new(Rule::Adam),
            Config::new(Rule::AdamW),
            Config::new(Rule::Sgd),
            Config {
                momentum: 0.9,
                ..Config::new(Rule::Sgd)
            },
            Config::new(Rule::AdaBelief),
            Config {
                amsgrad: true,
                ..Config::new(Rule::AdaBelief)
            },
            Config::new(Rule::Swats),
            Config::new(Rule::MiAdam),
            Config {
                weight_decay: 0.1,
                ..Config::new(Rule::Lion)
            },
        ];
        let mut covered = 0;
        for config in &configs {
            for sgd_phase in [false, true] {
                let kernel = config.kernel(sgd_phase);
                let s = StepScalars::new(config, 3, 1.0, sgd_phase.then_some(0.01));
                let branches: &[u8] = match kernel {
                    ElementKernel::HomeAdam => &[
                        branch::PER_ELEMENT,
                        branch::ALL_HOME,
                        branch::ALL_SRF,
                        branch::SRF,
                    ],
                    _ => &[branch::ALL_SRF],
                };
                for &decision in branches {
                    let check = Check::<SUM, P, S> {
                        config,
                        n,
                        poison,
                        types: core::marker::PhantomData,
                    };
                    let ran = with_kernel::<All, _>(kernel, &s, config.kernel_options(), decision, check);
                    assert!(ran.is_some(), "{kernel:?}");
                }
                covered |= kernel.bit();
            }
        }
        assert_eq!(
            covered,
            (1 << ElementKernel::ALL.len()) - 1,
            "a kernel without a config"
        );
    }

    #[test]
    fn scalar_loop_equals_reference() {
        for n in [0, 1, 7, 255, 256, 257, 600] {
            for poison in [false, true] {
                every_kernel::<true, f32, f32>(n, poison);
                every_kernel::<false, f32, f32>(n, poison);
                every_kernel::<true, f32, bf16>(n, poison);
                every_kernel::<false, f32, bf16>(n, poison);
                every_kernel::<true, f32, f16>(n, poison);
                every_kernel::<false, f32, f16>(n, poison);
                every_kernel::<true, f32, crate::Q8Block>(n, poison);
                every_kernel::<false, f32, crate::Q8Block>(n, poison);
                every_kernel::<true, bf16, bf16>(n, poison);
                every_kernel::<false, bf16, bf16>(n, poison);
                every_kernel::<true, f16, f32>(n, poison);
                every_kernel::<false, f16, f32>(n, poison);
            }
        }
    }

    #[test]
    fn scalar_finite_check_is_exact() {
        let mut g = values(1000, 5);
        for inv in [1.0f32, 0.25, 0.0, 1024.0, f32::INFINITY] {
            for bad in [None, Some(f32::NAN), Some(f32::INFINITY), Some(3e38)] {
                if let Some(x) = bad {
                    g[997] = x;
                }
                let expected = !g.iter().any(|&x| is_nonfinite(x * inv));
                let scalar = if inv <= 1.0 {
                    sum_zeros_unscaled(&g)
                } else {
                    sum_zeros(&g, |x| x * inv)
                } == 0.0;
                assert_eq!(scalar, expected, "inv {inv} bad {bad:?}");
                assert_eq!(grads_finite(Portable, &g, inv), expected, "inv {inv} bad {bad:?}");
            }
        }
    }
}
