//! The fast path ([`run_fast`]): the element function over chunks, in a loop the compiler
//! vectorizes, with the instruction set's conversions, over threads (`std`).

use super::scalar::{run_scalar, SCALAR_LOOP, SUM_ZEROS};
use super::{stage_slots, unstage_slots, Kernel, Part, SlotStores, TensorResult};
use crate::bits::is_nonfinite;
use crate::lines::Lines;
use crate::reduce::CHUNK;
use crate::rounding::ParamStore;
use crate::simd::{Convert, Isa, SlicesJob, WithConvert};
use crate::state::StateStorage;
use crate::storage::{Dtype, Storage};

/// The fast path: chunks of [`CHUNK`] elements, each converted into `f32` arrays in L1 where its
/// storage is not `f32` (in place where it is), updated by a vectorizable element loop, and
/// converted back. `isa` picks the conversions and the instructions the loop is compiled for;
/// the elements are spread over up to `threads` threads (`std`).
///
/// Only for the layouts of [`fused`] ([`run_chunks`]) and on the scalar targets
/// ([`run_scalar`]) is the element loop compiled into the storage loop. Every other layout
/// runs [`run_staged`], which is not generic over the rule: compiling each rule's element loop
/// once per instruction set, and each storage loop once for all rules, rather than every rule ×
/// storage × rounding combination, keeps the core's build short.
pub(crate) fn run_fast<K: Kernel, P: Storage, G: Storage, S: StateStorage, R: ParamStore>(
    kernel: K,
    part: Part<'_, P, G, S>,
    inv_grad_scale: f32,
    store: R,
    slots: SlotStores,
    isa: Isa,
    threads: usize,
) -> TensorResult {
    if const { SCALAR_LOOP || fused::<P, G, S>() } {
        let run = |part| {
            isa.run(Chunks {
                kernel,
                part,
                inv_grad_scale,
                store,
                slots,
            })
        };
        return over_threads(part, threads, run);
    }
    let elements = Elements {
        kernel,
        inv_grad_scale,
    };
    run_staged(part, &elements, K::TOUCHES, store, slots, isa, threads)
}

/// `run` over `part`, its elements spread over `threads` threads where there are threads (`std`).
#[inline(always)]
fn over_threads<'a, P: Storage, G: Storage, S: StateStorage>(
    part: Part<'a, P, G, S>,
    threads: usize,
    run: impl Fn(Part<'a, P, G, S>) -> TensorResult + Sync,
) -> TensorResult {
    #[cfg(feature = "std")]
    if threads > 1 {
        return crate::parallel::run_split(part, threads, run, TensorResult::merge, TensorResult::new());
    }
    #[cfg(not(feature = "std"))]
    let _ = threads;
    run(part)
}

/// Whether [`run_fast`] compiles the rule's element loop into the storage loop ([`run_chunks`])
/// rather than calling it per chunk ([`run_staged`]): the layouts whose speed the benchmarks
/// hold (θ, g and the state `f32`, or q8 state; θ and the state of one half-precision type).
const fn fused<P: Storage, G: Storage, S: StateStorage>() -> bool {
    let f32_data = matches!((P::DTYPE, G::DTYPE), (Dtype::F32, Dtype::F32));
    in_blocks::<P, S>() || (f32_data && matches!(S::DTYPE, Dtype::F32 | Dtype::Q8))
}

/// Whether [`run_chunks`] runs blocks of [`BLOCK`] elements: θ and the state of one half-precision
/// type (the layout of mixed-precision training; a mix of the two half types is staged).
const fn in_blocks<P: Storage, S: StateStorage>() -> bool {
    matches!(
        (P::DTYPE, S::DTYPE),
        (Dtype::BF16, Dtype::BF16) | (Dtype::F16, Dtype::F16)
    )
}

/// [`run_fast`] of the layouts that [`fused`] leaves out: chunks staged by the storage types'
/// conversions, each updated by `elements` (the rule's loop, compiled on its own:
/// [`Isa::run_on_slices`]).
#[inline(never)]
fn run_staged<P: Storage, G: Storage, S: StateStorage, R: ParamStore>(
    part: Part<'_, P, G, S>,
    elements: &dyn ElementLoop,
    used: u8,
    store: R,
    how: SlotStores,
    isa: Isa,
    threads: usize,
) -> TensorResult {
    let run = |part| {
        isa.run(StagedChunks {
            part,
            elements,
            used,
            store,
            how,
            isa,
        })
    };
    over_threads(part, threads, run)
}

/// A rule's element loop over one staged chunk, as an object, so that [`run_staged`] is not
/// generic over the rule.
trait ElementLoop: Sync {
    /// Updates `chunk` with `isa`'s instructions, folding its reductions into `sums`.
    fn update(&self, isa: Isa, chunk: Staged<'_>, sums: &mut Reductions);
}

/// The rule `K` and the gradients' scale: [`ElementLoop`] of `K`.
struct Elements<K> {
    kernel: K,
    inv_grad_scale: f32,
}

impl<K: Kernel> ElementLoop for Elements<K> {
    fn update(&self, isa: Isa, chunk: Staged<'_>, sums: &mut Reductions) {
        let Staged { p, g, slots, first } = chunk;
        let job = OneChunk {
            kernel: self.kernel,
            inv_grad_scale: self.inv_grad_scale,
            first,
            sums,
        };
        isa.run_on_slices(job, p, g, slots);
    }
}

/// [`element_loop`] as a job of [`Isa::run_on_slices`].
struct OneChunk<'a, K> {
    kernel: K,
    inv_grad_scale: f32,
    first: usize,
    sums: &'a mut Reductions,
}

impl<K: Kernel> SlicesJob for OneChunk<'_, K> {
    #[inline(always)]
    fn run<C: Convert>(self, _: C, p: &mut [f32], g: &[f32], slots: [&mut [f32]; 3]) {
        let chunk = Staged {
            p,
            g,
            slots,
            first: self.first,
        };
        element_loop(self.kernel, self.inv_grad_scale, chunk, self.sums);
    }
}

/// The arguments of [`run_staged`]'s chunk loop but its conversions.
struct StagedChunks<'a, 'e, P, G, S, R> {
    part: Part<'a, P, G, S>,
    elements: &'e dyn ElementLoop,
    used: u8,
    store: R,
    how: SlotStores,
    isa: Isa,
}

impl<P: Storage, G: Storage, S: StateStorage, R: ParamStore> WithConvert
    for StagedChunks<'_, '_, P, G, S, R>
{
    type Output = TensorResult;

    #[inline(always)]
    fn run<C: Convert>(self, conv: C) -> TensorResult {
        let StagedChunks {
            mut part,
            elements,
            used,
            store,
            how,
            isa,
        } = self;
        let each = Chunk {
            store,
            how,
            conv,
            used,
        };
        let n = part.param.len();
        let mut sums = Reductions::new();
        // Zeroed once: each chunk overwrites what it reads; the slots a rule does not use stay unread.
        let mut staging = Staging::<CHUNK>::new();
        let mut start = 0;
        while start < n {
            let len = CHUNK.min(n - start);
            let chunk = each.stage(&mut part, &mut staging, start, len);
            elements.update(isa, chunk, &mut sums);
            each.unstage(&mut part, &staging, start, len);
            start += len;
        }
        sums.finish()
    }
}

/// The arguments of [`run_chunks`] but its conversions.
struct Chunks<'a, K, P, G, S, R> {
    kernel: K,
    part: Part<'a, P, G, S>,
    inv_grad_scale: f32,
    store: R,
    slots: SlotStores,
}

impl<K: Kernel, P: Storage, G: Storage, S: StateStorage, R: ParamStore> WithConvert
    for Chunks<'_, K, P, G, S, R>
{
    type Output = TensorResult;

    #[inline(always)]
    fn run<C: Convert>(self, conv: C) -> TensorResult {
        if SCALAR_LOOP {
            return run_scalar::<SUM_ZEROS, _, _, _, _, _>(
                self.kernel,
                self.part,
                self.inv_grad_scale,
                self.store,
                self.slots,
            );
        }
        run_chunks(
            self.kernel,
            self.part,
            self.inv_grad_scale,
            self.store,
            self.slots,
            conv,
        )
    }
}

/// `dst` itself for `f32` data, else `buf` holding `dst` converted.
#[inline(always)]
fn stage_mut<'a, T: Storage, C: Convert>(conv: C, dst: &'a mut [T], buf: &'a mut [f32]) -> &'a mut [f32] {
    if T::DTYPE != Dtype::F32 {
        conv.load(dst, buf);
        return buf;
    }
    T::as_f32_mut(dst).unwrap_or(buf)
}

/// `src` itself for `f32` data, else `buf` holding `src` converted.
#[inline(always)]
fn stage<'a, T: Storage, C: Convert>(conv: C, src: &'a [T], buf: &'a mut [f32]) -> &'a [f32] {
    if T::DTYPE != Dtype::F32 {
        conv.load(src, buf);
        return buf;
    }
    T::as_f32(src).unwrap_or(buf)
}

/// Elements per block of the fast path's loop over half-precision data: small enough that
/// each block's `f32` values stay in vector registers between the conversions and the element
/// math (one block is one AVX-512 register, two AVX2 and four NEON ones).
const BLOCK: usize = 16;

/// The chunk loop of [`run_fast`] for the layouts of [`fused`], with the conversions of `conv`:
/// where θ and the state are of one half-precision type, blocks of [`BLOCK`] elements first;
/// then chunks of up to [`CHUNK`]. Blocks only there: a block whose loop also writes `f32`
/// slices in place is not vectorized (LLVM weighs the checks that those slices do not overlap
/// against 16 iterations), and q8 state is encoded a chunk at a time; and not for SWATS's dot
/// products, which are summed a chunk at a time.
#[inline(always)]
fn run_chunks<K: Kernel, P: Storage, G: Storage, S: StateStorage, R: ParamStore, C: Convert>(
    kernel: K,
    mut part: Part<'_, P, G, S>,
    inv_grad_scale: f32,
    store: R,
    how: SlotStores,
    conv: C,
) -> TensorResult {
    let each = Chunk {
        store,
        how,
        conv,
        used: K::TOUCHES,
    };
    let n = part.param.len();
    let mut sums = Reductions::new();
    let mut start = 0;
    if in_blocks::<P, S>() && !K::DOTS {
        while n - start >= BLOCK {
            let mut staging = Staging::<BLOCK>::new();
            let chunk = each.stage(&mut part, &mut staging, start, BLOCK);
            element_loop(kernel, inv_grad_scale, chunk, &mut sums);
            each.unstage(&mut part, &staging, start, BLOCK);
            start += BLOCK;
        }
    }
    // Zeroed once: each chunk overwrites what it reads; the slots a rule does not use stay unread.
    let mut staging = Staging::<CHUNK>::new();
    while start < n {
        let len = CHUNK.min(n - start);
        let chunk = each.stage(&mut part, &mut staging, start, len);
        element_loop(kernel, inv_grad_scale, chunk, &mut sums);
        each.unstage(&mut part, &staging, start, len);
        start += len;
    }
    sums.finish()
}

/// `f32` copies of up to `N` elements of θ, g and the state slots, for the data that is not
/// `f32` (which is updated in place); on cache lines of their own, as [`Lines`].
#[repr(C, align(64))]
struct Staging<const N: usize> {
    param: [f32; N],
    grad: [f32; N],
    slots: [[f32; N]; 3],
}

impl<const N: usize> Staging<N> {
    #[inline(always)]
    fn new() -> Self {
        Staging {
            param: [0.0; N],
            grad: [0.0; N],
            slots: [[0.0; N]; 3],
        }
    }
}

/// What [`run_chunks`] folds over its chunks.
struct Reductions {
    result: TensorResult,
    /// Eight lane minima of v (see [`fold_min`]); [`Kernel::DECIDES`] keeps each chunk's
    /// minimum in `result.v_min` instead, with its chunk.
    v_min: [f32; 8],
    /// [`Kernel::DECIDES`]: eight lane minima of the v > 0.
    v_min_active: [f32; 8],
    nonfinite: u32,
}

impl Reductions {
    fn new() -> Self {
        Reductions {
            result: TensorResult::new(),
            v_min: [f32::INFINITY; 8],
            v_min_active: [f32::INFINITY; 8],
            nonfinite: 0,
        }
    }

    fn finish(mut self) -> TensorResult {
        self.result.nonfinite = self.nonfinite != 0;
        self.result.v_min = lanes_min(&self.v_min, self.result.v_min);
        self.result.v_min_active = lanes_min(&self.v_min_active, f32::INFINITY);
        self.result
    }
}

/// min of `lanes` and `init` (NaN is not folded).
#[inline(always)]
fn lanes_min(lanes: &[f32; 8], init: f32) -> f32 {
    lanes.iter().fold(init, |a, &b| if b < a { b } else { a })
}

/// How [`run_chunks`] and [`run_staged`] convert a chunk: everything but the data and the rule.
struct Chunk<R, C> {
    store: R,
    how: SlotStores,
    conv: C,
    /// The state slots the rule touches, as [`Kernel::TOUCHES`].
    used: u8,
}

impl<R: ParamStore, C: Convert> Chunk<R, C> {
    /// Elements `start .. start + len` of `part` as `f32`: converted into `staging` where they
    /// are not `f32`, the data itself where they are.
    #[inline(always)]
    fn stage<'s, const N: usize, P: Storage, G: Storage, S: StateStorage>(
        &self,
        part: &'s mut Part<'_, P, G, S>,
        staging: &'s mut Staging<N>,
        start: usize,
        len: usize,
    ) -> Staged<'s> {
        let (conv, end) = (self.conv, start + len);
        let p = stage_mut(conv, &mut part.param[start..end], &mut staging.param[..len]);
        let g = stage(conv, &part.grad[start..end], &mut staging.grad[..len]);
        let slots = stage_slots(
            conv,
            self.used,
            &mut part.slots,
            &mut staging.slots,
            start,
            len,
            self.how,
        );
        let first = part.first + start;
        Staged { p, g, slots, first }
    }

    /// Converts back what [`Chunk::stage`] staged of elements `start .. start + len`.
    #[inline(always)]
    fn unstage<const N: usize, P: Storage, G: Storage, S: StateStorage>(
        &self,
        part: &mut Part<'_, P, G, S>,
        staging: &Staging<N>,
        start: usize,
        len: usize,
    ) {
        let (conv, end) = (self.conv, start + len);
        if P::DTYPE != Dtype::F32 {
            let first = part.first + start;
            self.store
                .store_chunk(conv, &staging.param[..len], &mut part.param[start..end], first);
        }
        unstage_slots(
            conv,
            self.used,
            &mut part.slots,
            &staging.slots,
            start..end,
            self.how,
            part.first,
        );
    }
}

/// One chunk's θ, g and state slots as `f32` (copies, or the data itself where it is `f32`),
/// all of one length, and the tensor's index of its first element.
struct Staged<'a> {
    p: &'a mut [f32],
    g: &'a [f32],
    slots: [&'a mut [f32]; 3],
    first: usize,
}

/// The rule's element function over one staged chunk, its reductions folded into `sums`.
#[inline(always)]
fn element_loop<K: Kernel>(kernel: K, inv_grad_scale: f32, chunk: Staged<'_>, sums: &mut Reductions) {
    let Staged {
        p,
        g,
        slots: [c0, c1, c2],
        first,
    } = chunk;
    let len = p.len();
    let (g, c0, c1, c2) = (&g[..len], &mut c0[..len], &mut c1[..len], &mut c2[..len]);
    let slot = |k: usize| K::TOUCHES >> k & 1 != 0;
    const { assert!(K::RHO_SLOT.is_none() || K::TOUCHES >> K::RHO_SLOT.unwrap() & 1 != 0) };
    let mut home = 0u32;
    let mut nonfinite = 0u32;
    // SWATS: each element's step and gradient, summed exactly after the loop, in vector lanes.
    let (mut steps, mut grads) = (Lines::<CHUNK>::new(), Lines::<CHUNK>::new());
    for i in 0..len {
        let mut s = [0.0f32; 3];
        if slot(0) {
            s[0] = c0[i];
        }
        if slot(1) {
            s[1] = c1[i];
        }
        if slot(2) {
            s[2] = c2[i];
        }
        let gi = g[i] * inv_grad_scale;
        let e = kernel.element(p[i], gi, &mut s);
        p[i] = e.p;
        if slot(0) {
            c0[i] = s[0];
        }
        if slot(1) {
            c1[i] = s[1];
        }
        if slot(2) {
            c2[i] = s[2];
        }
        home += e.home as u32;
        nonfinite |= is_nonfinite(gi) as u32;
        if K::DOTS {
            steps.0[i] = e.step;
            grads.0[i] = e.grad;
        }
    }
    if K::DOTS {
        sums.result.step_sq.add_squares(&steps.0[..len]);
        sums.result
            .step_grad
            .add_products(&steps.0[..len], &grads.0[..len]);
    }
    sums.result.home += home;
    sums.nonfinite |= nonfinite;
    if let Some(r) = K::RHO_SLOT {
        let v = [&*c0, &*c1, &*c2][r];
        if K::DECIDES {
            // One minimum per chunk: the next step's bound needs the chunk where min v sits.
            let mut lanes = [f32::INFINITY; 8];
            fold_min(&mut lanes, v);
            let chunk_min = lanes_min(&lanes, f32::INFINITY);
            if chunk_min < sums.result.v_min {
                sums.result.v_min = chunk_min;
                sums.result.v_min_at = first;
            }
            fold_min_active(&mut sums.v_min_active, v);
        } else {
            fold_min(&mut sums.v_min, v);
        }
    }
}

/// Folds `v` into eight lane minima (order-independent: min is exact).
#[inline(always)]
fn fold_min(v_min: &mut [f32; 8], v: &[f32]) {
    let mut lanes = v.chunks_exact(8);
    for eight in &mut lanes {
        for (m, &x) in v_min.iter_mut().zip(eight) {
            *m = if x < *m { x } else { *m };
        }
    }
    for (m, &x) in v_min.iter_mut().zip(lanes.remainder()) {
        *m = if x < *m { x } else { *m };
    }
}

/// Folds the `v` > 0 into eight lane minima, as [`fold_min`].
#[inline(always)]
fn fold_min_active(v_min: &mut [f32; 8], v: &[f32]) {
    let mut lanes = v.chunks_exact(8);
    for eight in &mut lanes {
        for (m, &x) in v_min.iter_mut().zip(eight) {
            *m = if x > 0.0 && x < *m { x } else { *m };
        }
    }
    for (m, &x) in v_min.iter_mut().zip(lanes.remainder()) {
        *m = if x > 0.0 && x < *m { x } else { *m };
    }
}
