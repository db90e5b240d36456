//! The two drivers that run a rule's element function over one tensor.
//!
//! A rule writes its per-element math once, as [`Kernel::element`]. The scalar reference
//! ([`run_reference`]) applies it one element at a time, loading and storing through the
//! storage types; the fast path ([`run_fast`]) runs the same function over chunks in a loop
//! the compiler vectorizes: in place for `f32` tensors, through `f32` staging arrays for the
//! half types (converted in loops of their own). Both must
//! give the same bits (property-tested for every rule × storage combination); a backend that
//! re-implements a rule (CUDA, MCU) is tested against [`run_reference`] too.

use crate::exact::ExactSum;
use crate::rounding::ParamStore;
use crate::storage::Storage;
use crate::tensor::Tensor;

/// Elements per chunk of the fast path: a multiple of every SIMD width in use.
pub(crate) const CHUNK: usize = 256;

/// What one element's update produced besides the state.
#[derive(Clone, Copy)]
pub(crate) struct Elem {
    /// The new θ, before rounding to its storage type.
    pub p: f32,
    /// The element took the home (SGDM) branch.
    pub home: bool,
    /// SWATS: the step taken, θ_t − θ_{t−1}, for γ = pᵀp / (−pᵀg).
    pub step: f32,
    /// SWATS: the gradient the step used (after coupled weight decay).
    pub grad: f32,
}

impl Elem {
    #[inline(always)]
    pub const fn param(p: f32) -> Self {
        Elem {
            p,
            home: false,
            step: 0.0,
            grad: 0.0,
        }
    }
}

/// A rule's per-element update, with the step's scalars captured in `self`.
pub(crate) trait Kernel: Copy {
    /// State slots used (0 to 3), each one element per parameter.
    const SLOTS: usize;
    /// The slot holding v, whose minimum over the tensor divided by bc2 is ρ.
    const RHO_SLOT: Option<usize>;
    /// Whether to accumulate SWATS's dot products pᵀp and pᵀg.
    const DOTS: bool;

    /// Updates one element: θ, the unscaled gradient g and the state slots `s` in `f32`.
    fn element(self, p: f32, g: f32, s: &mut [f32; 3]) -> Elem;
}

/// What a driver reports about one tensor.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TensorResult {
    /// min of the `RHO_SLOT` slot after the update (+∞ when none).
    pub v_min: f32,
    /// Elements that took the home branch.
    pub home: u32,
    /// A non-finite unscaled gradient was seen.
    pub nonfinite: bool,
    /// Σ step², exactly.
    pub step_sq: ExactSum,
    /// Σ step · grad, exactly.
    pub step_grad: ExactSum,
}

impl TensorResult {
    const fn new() -> Self {
        TensorResult {
            v_min: f32::INFINITY,
            home: 0,
            nonfinite: false,
            step_sq: ExactSum::new(),
            step_grad: ExactSum::new(),
        }
    }
}

#[inline(always)]
pub(crate) fn is_nonfinite(x: f32) -> bool {
    x.to_bits() & 0x7f80_0000 == 0x7f80_0000
}

/// The scalar reference: one element at a time, in index order.
pub(crate) fn run_reference<K: Kernel, P: Storage, G: Storage, S: Storage, R: ParamStore>(
    kernel: K,
    tensor: &mut Tensor<'_, P, G, S>,
    inv_grad_scale: f32,
    store: R,
) -> TensorResult {
    let n = tensor.param.len();
    let mut result = TensorResult::new();
    for i in 0..n {
        let p = tensor.param[i].to_f32();
        let g = tensor.grad[i].to_f32() * inv_grad_scale;
        result.nonfinite |= is_nonfinite(g);
        let mut s = [0.0f32; 3];
        for (k, slot) in s.iter_mut().enumerate().take(K::SLOTS) {
            *slot = tensor.state[k * n + i].to_f32();
        }
        let e = kernel.element(p, g, &mut s);
        tensor.param[i] = store.store(e.p, i);
        for (k, slot) in s.iter().enumerate().take(K::SLOTS) {
            tensor.state[k * n + i] = S::from_f32(*slot);
        }
        if let Some(r) = K::RHO_SLOT {
            if s[r] < result.v_min {
                result.v_min = s[r];
            }
        }
        result.home += e.home as u32;
        if K::DOTS {
            result.step_sq.add_square(e.step);
            result.step_grad.add_product(e.step, e.grad);
        }
    }
    result
}

/// The fast path: chunked loads into `f32` arrays, a vectorizable element loop, chunked stores.
///
/// With `std` on x86-64, the same code is also compiled for AVX2 and chosen at run time when
/// the CPU has it (bit-identical: the same IEEE operations, and Rust never fuses them).
pub(crate) fn run_fast<K: Kernel, P: Storage, G: Storage, S: Storage, R: ParamStore>(
    kernel: K,
    tensor: &mut Tensor<'_, P, G, S>,
    inv_grad_scale: f32,
    store: R,
) -> TensorResult {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, the only requirement of `run_fast_avx2`.
        return unsafe { run_fast_avx2(kernel, tensor, inv_grad_scale, store) };
    }
    run_fast_chunks(kernel, tensor, inv_grad_scale, store)
}

#[cfg(all(feature = "std", target_arch = "x86_64"))]
#[target_feature(enable = "avx2")]
unsafe fn run_fast_avx2<K: Kernel, P: Storage, G: Storage, S: Storage, R: ParamStore>(
    kernel: K,
    tensor: &mut Tensor<'_, P, G, S>,
    inv_grad_scale: f32,
    store: R,
) -> TensorResult {
    run_fast_chunks(kernel, tensor, inv_grad_scale, store)
}

/// Chooses the driver: all-`f32` tensors are updated in place; others are staged.
#[inline(always)]
fn run_fast_chunks<K: Kernel, P: Storage, G: Storage, S: Storage, R: ParamStore>(
    kernel: K,
    tensor: &mut Tensor<'_, P, G, S>,
    inv_grad_scale: f32,
    store: R,
) -> TensorResult {
    let (param, grad, state) = (&mut *tensor.param, tensor.grad, &mut *tensor.state);
    match (P::as_f32_mut(param), G::as_f32(grad), S::as_f32_mut(state)) {
        (Some(param), Some(grad), Some(state)) => run_in_place(kernel, param, grad, state, inv_grad_scale),
        _ => run_staged(kernel, tensor, inv_grad_scale, store),
    }
}

/// All-`f32` tensors: chunks updated in place, no copies (staging `f32` data costs ~30 %).
/// Stochastic rounding of `f32` parameters is the identity, so no store is needed.
#[inline(always)]
fn run_in_place<K: Kernel>(
    kernel: K,
    param: &mut [f32],
    grad: &[f32],
    state: &mut [f32],
    inv_grad_scale: f32,
) -> TensorResult {
    let n = param.len();
    let mut result = TensorResult::new();
    let slot_len = |k: usize| if K::SLOTS > k { n } else { 0 };
    let (s0, rest) = state.split_at_mut(slot_len(0));
    let (s1, rest) = rest.split_at_mut(slot_len(1));
    let s2 = &mut rest[..slot_len(2)];
    // The v of one chunk, for the lane-wise minimum; entries past the chunk's end stay +∞.
    let mut v = [f32::INFINITY; CHUNK];
    let mut v_min = [f32::INFINITY; 8];
    let mut nonfinite = 0u32;
    let mut start = 0;
    while start < n {
        let len = CHUNK.min(n - start);
        let end = start + len;
        let p = &mut param[start..end];
        let g = &grad[start..end];
        let c0 = &mut s0[start.min(slot_len(0))..end.min(slot_len(0))];
        let c1 = &mut s1[start.min(slot_len(1))..end.min(slot_len(1))];
        let c2 = &mut s2[start.min(slot_len(2))..end.min(slot_len(2))];
        let mut home = 0u32;
        for i in 0..len {
            let mut s = [0.0f32; 3];
            if K::SLOTS > 0 {
                s[0] = c0[i];
            }
            if K::SLOTS > 1 {
                s[1] = c1[i];
            }
            if K::SLOTS > 2 {
                s[2] = c2[i];
            }
            let gi = g[i] * inv_grad_scale;
            let e = kernel.element(p[i], gi, &mut s);
            p[i] = e.p;
            if K::SLOTS > 0 {
                c0[i] = s[0];
            }
            if K::SLOTS > 1 {
                c1[i] = s[1];
            }
            if K::SLOTS > 2 {
                c2[i] = s[2];
            }
            if let Some(r) = K::RHO_SLOT {
                v[i] = s[r];
            }
            home += e.home as u32;
            nonfinite |= is_nonfinite(gi) as u32;
            if K::DOTS {
                result.step_sq.add_square(e.step);
                result.step_grad.add_product(e.step, e.grad);
            }
        }
        result.home += home;
        if K::RHO_SLOT.is_some() {
            fold_min(&mut v_min, &mut v, len);
        }
        start = end;
    }
    result.nonfinite = nonfinite != 0;
    result.v_min = v_min
        .iter()
        .fold(f32::INFINITY, |a, &b| if b < a { b } else { a });
    result
}

/// Folds `v[..len]` into eight lane minima (order-independent: min is exact).
#[inline(always)]
fn fold_min(v_min: &mut [f32; 8], v: &mut [f32; CHUNK], len: usize) {
    for x in v[len..].iter_mut() {
        *x = f32::INFINITY;
    }
    for lanes in v.chunks_exact(8) {
        for (m, &x) in v_min.iter_mut().zip(lanes) {
            *m = if x < *m { x } else { *m };
        }
    }
}

/// Storage types other than `f32`: each chunk is converted into `f32` arrays, updated by a
/// vectorizable element loop, and converted back, in loops of their own.
#[inline(always)]
fn run_staged<K: Kernel, P: Storage, G: Storage, S: Storage, R: ParamStore>(
    kernel: K,
    tensor: &mut Tensor<'_, P, G, S>,
    inv_grad_scale: f32,
    store: R,
) -> TensorResult {
    let n = tensor.param.len();
    let mut result = TensorResult::new();
    let mut v_min = [f32::INFINITY; 8];
    let mut nonfinite = 0u32;
    // Zeroed once: each chunk overwrites the first `len` entries it reads.
    let mut pv = [0.0f32; CHUNK];
    let mut gv = [0.0f32; CHUNK];
    let mut sv = [[0.0f32; CHUNK]; 3];
    let mut start = 0;
    while start < n {
        let len = CHUNK.min(n - start);
        let params = &mut tensor.param[start..start + len];
        for (d, s) in pv.iter_mut().zip(params.iter()) {
            *d = s.to_f32();
        }
        for (d, s) in gv.iter_mut().zip(&tensor.grad[start..start + len]) {
            *d = s.to_f32() * inv_grad_scale;
        }
        for (k, slot) in sv.iter_mut().enumerate().take(K::SLOTS) {
            let base = k * n + start;
            for (d, s) in slot.iter_mut().zip(&tensor.state[base..base + len]) {
                *d = s.to_f32();
            }
        }
        let mut home = 0u32;
        for i in 0..len {
            let mut s = [sv[0][i], sv[1][i], sv[2][i]];
            let e = kernel.element(pv[i], gv[i], &mut s);
            pv[i] = e.p;
            sv[0][i] = s[0];
            if K::SLOTS > 1 {
                sv[1][i] = s[1];
            }
            if K::SLOTS > 2 {
                sv[2][i] = s[2];
            }
            home += e.home as u32;
            nonfinite |= is_nonfinite(gv[i]) as u32;
            if K::DOTS {
                result.step_sq.add_square(e.step);
                result.step_grad.add_product(e.step, e.grad);
            }
        }
        result.home += home;
        for (i, (d, s)) in params.iter_mut().zip(pv.iter()).enumerate() {
            *d = store.store(*s, start + i);
        }
        for (k, slot) in sv.iter().enumerate().take(K::SLOTS) {
            let base = k * n + start;
            for (d, s) in tensor.state[base..base + len].iter_mut().zip(slot.iter()) {
                *d = S::from_f32(*s);
            }
        }
        if let Some(r) = K::RHO_SLOT {
            fold_min(&mut v_min, &mut sv[r], len);
        }
        start += len;
    }
    result.nonfinite = nonfinite != 0;
    result.v_min = v_min
        .iter()
        .fold(f32::INFINITY, |a, &b| if b < a { b } else { a });
    result
}

/// Whether every unscaled gradient is finite (one read of the gradients, vectorized).
pub(crate) fn grads_finite<G: Storage>(grad: &[G], inv_grad_scale: f32) -> bool {
    let mut bad = 0u32;
    for chunk in grad.chunks(CHUNK) {
        for g in chunk {
            bad |= is_nonfinite(g.to_f32() * inv_grad_scale) as u32;
        }
        if bad != 0 {
            return false;
        }
    }
    true
}

/// First pass of the global and per-layer HomeAdam rules: min over the tensor of the new
/// second moment `v_new(v, g)` (not stored), and whether every unscaled gradient is finite.
pub(crate) fn min_new_second_moment<G: Storage, S: Storage>(
    grad: &[G],
    v: &[S],
    inv_grad_scale: f32,
    v_new: impl Fn(f32, f32) -> f32,
) -> (f32, bool) {
    let mut lanes = [f32::INFINITY; 8];
    let mut bad = 0u32;
    let mut gc = grad.chunks_exact(8);
    let mut vc = v.chunks_exact(8);
    for (g8, v8) in (&mut gc).zip(&mut vc) {
        for l in 0..8 {
            let g = g8[l].to_f32() * inv_grad_scale;
            bad |= is_nonfinite(g) as u32;
            let x = v_new(v8[l].to_f32(), g);
            lanes[l] = if x < lanes[l] { x } else { lanes[l] };
        }
    }
    for (g, v) in gc.remainder().iter().zip(vc.remainder()) {
        let g = g.to_f32() * inv_grad_scale;
        bad |= is_nonfinite(g) as u32;
        let x = v_new(v.to_f32(), g);
        lanes[0] = if x < lanes[0] { x } else { lanes[0] };
    }
    let min = lanes
        .iter()
        .fold(f32::INFINITY, |a, &b| if b < a { b } else { a });
    (min, bad == 0)
}
