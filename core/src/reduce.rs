//! The reductions of the HomeAdam decision, over chunks of a tensor: the minima of v of the
//! global and per-layer rules' first pass, the histogram count of a calibrated τ, and over
//! which elements ρ = min v̂ is taken. Below the drivers, the state types and the rules, which
//! all use them.

use crate::bits::is_nonfinite;
use crate::calibration::Histogram;
use crate::lines::Lines;
use crate::simd::Convert;
use crate::storage::{Dtype, Storage};

/// Elements per chunk of the fast path: a multiple of every SIMD width in use (the unit in
/// which the drivers split and report positions).
pub(crate) const CHUNK: usize = 256;

/// Over which elements the global and per-layer HomeAdam(W) rules take ρ = min v̂.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RhoOver {
    /// Every element (Alg. 2). An element that has never had a non-zero gradient has v̂ = 0,
    /// so ρ = 0 < τ and the rule goes home at every step on most real models.
    #[default]
    All,
    /// The elements with v_t > 0, those that have had a non-zero gradient; ρ = 0 when there
    /// is none. Not in the paper.
    Active,
}

impl RhoOver {
    /// The config names, in order: `all`, `active`.
    pub const NAMES: [&'static str; 2] = ["all", "active"];

    /// The config name.
    pub const fn name(self) -> &'static str {
        match self {
            RhoOver::All => RhoOver::NAMES[0],
            RhoOver::Active => RhoOver::NAMES[1],
        }
    }

    /// The value of a config name.
    pub fn from_name(name: &str) -> Option<Self> {
        [RhoOver::All, RhoOver::Active]
            .into_iter()
            .find(|r| r.name() == name)
    }

    /// The ρ that decides, from min v̂ over all elements and over the active ones (+∞ when
    /// none is active).
    #[inline]
    pub fn rho(self, all: f32, active: f32) -> f32 {
        match self {
            RhoOver::All => all,
            RhoOver::Active if active == f32::INFINITY => 0.0,
            RhoOver::Active => active,
        }
    }
}

/// The minima of the global and per-layer HomeAdam rules' first pass over one tensor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SecondMomentMin {
    /// min v_t over the elements (+∞ for none).
    pub all: f32,
    /// min v_t over the elements with v_t > 0 (+∞ for none).
    pub active: f32,
}

impl SecondMomentMin {
    /// No element yet.
    pub const EMPTY: SecondMomentMin = SecondMomentMin {
        all: f32::INFINITY,
        active: f32::INFINITY,
    };

    /// Folds `v` in (NaN is not folded: `x < min` is false).
    #[inline(always)]
    pub fn fold(&mut self, v: f32) {
        self.all = if v < self.all { v } else { self.all };
        self.active = if v > 0.0 && v < self.active {
            v
        } else {
            self.active
        };
    }

    /// ρ = `rho_over`'s minimum of v̂: each minimum divided by bc2 (exact: division by bc2 > 0
    /// is monotonic), then [`RhoOver::rho`].
    #[inline]
    pub fn rho(self, rho_over: RhoOver, bc2: f32) -> f32 {
        rho_over.rho(self.all / bc2, self.active / bc2)
    }

    /// The minima of two parts (min is exact: the order does not matter).
    pub fn merge(self, other: Self) -> Self {
        let mut m = self;
        m.fold(other.all);
        m.fold(other.active);
        m
    }
}

/// First pass of the global and per-layer HomeAdam rules: the minima of the new second moment
/// `v_new(v, g)` (not stored) over the tensor, and whether every unscaled gradient is finite.
/// Half-precision data is converted a chunk at a time with `conv`'s instructions where they
/// are vector ones ([`Convert::VECTOR`]), else element by element.
#[inline(always)]
pub(crate) fn min_new_second_moment<C: Convert, G: Storage, S: Storage>(
    conv: C,
    grad: &[G],
    v: &[S],
    inv_grad_scale: f32,
    v_new: impl Fn(f32, f32) -> f32,
) -> (SecondMomentMin, bool) {
    if !C::VECTOR || (G::DTYPE == Dtype::F32 && S::DTYPE == Dtype::F32) {
        return min_new_lanes::<C, _, _>(grad, v, inv_grad_scale, v_new);
    }
    let (mut g32, mut v32) = (Lines::<CHUNK>::new(), Lines::<CHUNK>::new());
    let mut min = SecondMomentMin::EMPTY;
    let mut finite = true;
    for (g, v) in grad.chunks(CHUNK).zip(v.chunks(CHUNK)) {
        let g = as_f32(conv, g, &mut g32.0);
        let v = as_f32(conv, v, &mut v32.0);
        let (m, f) = min_new_lanes::<C, _, _>(g, v, inv_grad_scale, &v_new);
        min = min.merge(m);
        finite &= f;
    }
    (min, finite)
}

/// `src` itself where it is `f32`, else its values converted with `conv` into `buf` (at least
/// as long).
#[inline(always)]
pub(crate) fn as_f32<'a, C: Convert, T: Storage>(conv: C, src: &'a [T], buf: &'a mut [f32]) -> &'a [f32] {
    if let Some(src) = T::as_f32(src) {
        return src;
    }
    let buf = &mut buf[..src.len()];
    conv.load(src, buf);
    buf
}

/// [`min_new_second_moment`] element by element: sixteen lanes of each minimum (min is exact,
/// so their order does not matter), which vectorize at any width up to 16.
#[inline(always)]
fn min_new_lanes<C: Convert, G: Storage, S: Storage>(
    grad: &[G],
    v: &[S],
    inv_grad_scale: f32,
    v_new: impl Fn(f32, f32) -> f32,
) -> (SecondMomentMin, bool) {
    const LANES: usize = 16;
    let mut all = [f32::INFINITY; LANES];
    let mut active = [f32::INFINITY; LANES];
    // Vector lanes too, so that no iteration reduces across them; one on scalar cores.
    let bad_lanes = if C::VECTOR { LANES } else { 1 };
    let mut bad = [0u32; LANES];
    let mut gc = grad.chunks_exact(LANES);
    let mut vc = v.chunks_exact(LANES);
    for (gs, vs) in (&mut gc).zip(&mut vc) {
        for l in 0..LANES {
            let g = gs[l].to_f32() * inv_grad_scale;
            bad[l % bad_lanes] |= is_nonfinite(g) as u32;
            let x = v_new(vs[l].to_f32(), g);
            all[l] = if x < all[l] { x } else { all[l] };
            active[l] = if x > 0.0 && x < active[l] { x } else { active[l] };
        }
    }
    let mut min = SecondMomentMin::EMPTY;
    let mut bad = bad.iter().fold(0, |a, &b| a | b);
    for (g, v) in gc.remainder().iter().zip(vc.remainder()) {
        let g = g.to_f32() * inv_grad_scale;
        bad |= is_nonfinite(g) as u32;
        min.fold(v_new(v.to_f32(), g));
    }
    for (&a, &b) in all.iter().zip(&active) {
        min = min.merge(SecondMomentMin { all: a, active: b });
    }
    (min, bad == 0)
}

/// The element-wise rule's calibration pass: v̂ = `v_new(v, g)` / bc2 of every element with
/// v_new > 0 counted into `hist`, and whether every unscaled gradient is finite.
pub(crate) fn count_new_second_moment<G: Storage, S: Storage>(
    grad: &[G],
    v: &[S],
    inv_grad_scale: f32,
    bc2: f32,
    v_new: impl Fn(f32, f32) -> f32,
    hist: &mut Histogram,
) -> bool {
    let mut bad = 0u32;
    for (g, v) in grad.iter().zip(v) {
        let g = g.to_f32() * inv_grad_scale;
        bad |= is_nonfinite(g) as u32;
        let v = v_new(v.to_f32(), g);
        if v > 0.0 {
            hist.add(v / bc2);
        }
    }
    bad == 0
}
