//! The drivers that run a rule's element function over one tensor.
//!
//! A rule writes its per-element math once, as [`Kernel::element`]. The scalar reference
//! ([`run_reference`]) applies it one element at a time, loading and storing through the
//! storage types; the fast path ([`run_fast`]) runs the same function over chunks in a loop
//! the compiler vectorizes: in place for `f32` data, in blocks of 16 held in registers where θ
//! and the state are of one half-precision type, through `f32` staging arrays in L1 for other
//! half or q8 data (converted with the instruction set's conversions, [`crate::simd`]); on 32-bit
//! Arm and RISC-V, where nothing vectorizes, as one in-place loop ([`scalar::run_scalar`]). All
//! must give the same bits (property-tested for every rule × storage combination); a backend
//! that re-implements a rule (CUDA, MCU) is tested against [`run_reference`] too.
//!
//! This file holds the trait and what the loops share (a tensor's parts, the staging of its
//! state slots); the loops are in [`mod@reference`], [`fast`] and [`scalar`].

use crate::exact::ExactSum;
#[cfg(feature = "std")]
use crate::parallel::Split;
use crate::q8::Map;
use crate::scalars::StepScalars;
use crate::simd::Convert;
use crate::state::{Requantize, StateStorage};

mod fast;
mod reference;
mod scalar;

pub(crate) use fast::run_fast;
pub(crate) use reference::run_reference;
pub(crate) use scalar::{grads_finite, SCALAR_FPU, SCALAR_LOOP};

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

/// What an element function reads from the config besides the step's scalars.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Options {
    /// Nesterov momentum (SGD, SWATS).
    pub nesterov: bool,
    /// Decoupled weight decay (AdaBelief, SWATS).
    pub weight_decouple: bool,
}

/// A computation over one kernel of any type: what the kernel table's dispatch
/// ([`crate::dispatch`]) hands the kernel it chose.
pub(crate) trait Apply {
    /// What the computation returns.
    type Out;

    /// Runs the computation with `kernel`.
    fn apply<K: Kernel>(self, kernel: K) -> Self::Out;
}

/// A rule's per-element update, with the step's scalars captured in `self`.
pub(crate) trait Kernel: Copy + Send + Sync {
    /// State slots used (0 to 3), each one element per parameter.
    const SLOTS: usize;
    /// The slots [`Kernel::element`] reads or writes, as a bit mask (all of them unless a
    /// phase of the rule leaves some alone): the fast path neither loads nor stores the others.
    const TOUCHES: u8 = (1 << Self::SLOTS) - 1;
    /// The slot holding v, whose minimum over the tensor divided by bc2 is ρ.
    const RHO_SLOT: Option<usize>;
    /// Whether to accumulate SWATS's dot products pᵀp and pᵀg.
    const DOTS: bool;
    /// Global and per-layer HomeAdam(W): whether to also find min v over the elements with
    /// v > 0 and the chunk where min v sits ([`TensorResult::v_min_at`]), so that the next step
    /// can bound its ρ without the first pass.
    const DECIDES: bool = false;

    /// The kernel of a step whose scalars are `s`.
    fn new(s: &StepScalars, options: Options) -> Self;

    /// Updates one element: θ, the unscaled gradient g and the state slots `s` in `f32`.
    fn element(self, p: f32, g: f32, s: &mut [f32; 3]) -> Elem;
}

/// What a driver reports about one tensor.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TensorResult {
    /// min of the `RHO_SLOT` slot after the update (+∞ when none).
    pub v_min: f32,
    /// [`Kernel::DECIDES`]: min of the `RHO_SLOT` slot over its elements > 0 (+∞ when none).
    pub v_min_active: f32,
    /// [`Kernel::DECIDES`]: the tensor's index of the first element of a chunk of at most
    /// [`crate::reduce::CHUNK`] elements that holds `v_min` (0 when none).
    pub v_min_at: usize,
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
    pub(crate) const fn new() -> Self {
        TensorResult {
            v_min: f32::INFINITY,
            v_min_active: f32::INFINITY,
            v_min_at: 0,
            home: 0,
            nonfinite: false,
            step_sq: ExactSum::new(),
            step_grad: ExactSum::new(),
        }
    }
}

/// The code maps and random keys a tensor's state slots are stored with (q8; unused by the
/// element types).
#[derive(Clone, Copy)]
pub(crate) struct SlotStores {
    pub maps: [Map; 3],
    /// [`Map::slot_key`] of each slot.
    pub keys: [u64; 3],
}

impl SlotStores {
    /// What element state (`f32`, `bf16`, `f16`), which stores no codes, is given.
    pub const ELEMENTS: SlotStores = SlotStores {
        maps: [Map::Unsigned; 3],
        keys: [0; 3],
    };

    /// The slots of `config`'s rule, keyed by the tensor's step key.
    pub fn new(config: &crate::Config, key: u64) -> Self {
        SlotStores {
            maps: [0, 1, 2].map(|k| config.q8_map(k)),
            keys: [0, 1, 2].map(|k| Map::slot_key(key, k)),
        }
    }
}

/// The slots in the mask `used` of the chunk of `len` elements at `start`, as `f32` (see
/// [`StateOps::stage`]); the others are parts of `bufs`.
#[inline(always)]
fn stage_slots<'a, const N: usize, S: StateStorage, C: Convert>(
    conv: C,
    used: u8,
    slots: &'a mut [&mut [S]; 3],
    bufs: &'a mut [[f32; N]; 3],
    start: usize,
    len: usize,
    how: SlotStores,
) -> [&'a mut [f32]; 3] {
    let [s0, s1, s2] = slots;
    let [b0, b1, b2] = bufs;
    let one = |k: usize, s: &'a mut [S], b: &'a mut [f32; N]| -> &'a mut [f32] {
        if used >> k & 1 != 0 {
            S::stage(conv, s, start, len, how.maps[k], b)
        } else {
            &mut b[..len]
        }
    };
    [one(0, s0, b0), one(1, s1, b1), one(2, s2, b2)]
}

/// Stores back what [`stage_slots`] staged of `chunk`; `first` is the tensor's index of the
/// slots' first element.
#[inline(always)]
fn unstage_slots<const N: usize, S: StateStorage, C: Convert>(
    conv: C,
    used: u8,
    slots: &mut [&mut [S]; 3],
    bufs: &[[f32; N]; 3],
    chunk: core::ops::Range<usize>,
    how: SlotStores,
    first: usize,
) {
    let (start, len) = (chunk.start, chunk.len());
    for (k, (slot, buf)) in slots.iter_mut().zip(bufs).enumerate() {
        if used >> k & 1 == 0 {
            continue;
        }
        let requantize = Requantize {
            map: how.maps[k],
            slot_key: how.keys[k],
            first: first + start,
        };
        S::unstage(conv, slot, start, &buf[..len], requantize);
    }
}

/// Elements `first .. first + param.len()` of one tensor: what the fast path updates (the
/// whole tensor, or one thread's share of it).
pub(crate) struct Part<'a, P, G, S> {
    pub param: &'a mut [P],
    pub grad: &'a [G],
    /// The state slots, each as long as `param`; empty past the rule's slots.
    pub slots: [&'a mut [S]; 3],
    /// The tensor's index of `param[0]` (it keys stochastic rounding).
    pub first: usize,
}

#[cfg(feature = "std")]
impl TensorResult {
    /// The result of two parts of one tensor, exactly.
    pub(crate) fn merge(mut self, other: TensorResult) -> TensorResult {
        if other.v_min < self.v_min {
            self.v_min = other.v_min;
            self.v_min_at = other.v_min_at;
        }
        if other.v_min_active < self.v_min_active {
            self.v_min_active = other.v_min_active;
        }
        self.home += other.home;
        self.nonfinite |= other.nonfinite;
        self.step_sq.merge(&other.step_sq);
        self.step_grad.merge(&other.step_grad);
        self
    }
}

#[cfg(feature = "std")]
impl<P: Send, G: Sync, S: StateStorage> Split for Part<'_, P, G, S> {
    fn len(&self) -> usize {
        Part::len(self)
    }
    fn split_at(self, mid: usize) -> (Self, Self) {
        Part::split_at(self, mid)
    }
}

impl<'a, P, G, S: StateStorage> Part<'a, P, G, S> {
    /// The whole tensor, whose `state` holds `slots` slots one after the other.
    ///
    /// Not inlined: it runs once per tensor, and its slice splits inlined into the step would
    /// grow the single-rule firmware's flash.
    #[inline(never)]
    pub fn whole(param: &'a mut [P], grad: &'a [G], state: &'a mut [S], slots: usize) -> Self {
        let n = S::slot_len(param.len());
        let len = |k: usize| if slots > k { n } else { 0 };
        let (s0, rest) = state.split_at_mut(len(0));
        let (s1, rest) = rest.split_at_mut(len(1));
        let s2 = &mut rest[..len(2)];
        Part {
            param,
            grad,
            slots: [s0, s1, s2],
            first: 0,
        }
    }

    /// Elements before `mid` (at most `len()`; a multiple of [`CHUNK`]) and from `mid` on.
    #[cfg(feature = "std")]
    pub fn split_at(self, mid: usize) -> (Self, Self) {
        let mid = mid.min(self.param.len());
        let (p0, p1) = self.param.split_at_mut(mid);
        let (g0, g1) = self.grad.split_at(mid.min(self.grad.len()));
        let [a, b, c] = self.slots.map(|s| {
            let at = S::slot_len(mid).min(s.len());
            s.split_at_mut(at)
        });
        let head = Part {
            param: p0,
            grad: g0,
            slots: [a.0, b.0, c.0],
            first: self.first,
        };
        let tail = Part {
            param: p1,
            grad: g1,
            slots: [a.1, b.1, c.1],
            first: self.first + mid,
        };
        (head, tail)
    }

    /// Elements in this part.
    #[cfg(feature = "std")]
    pub fn len(&self) -> usize {
        self.param.len()
    }
}
