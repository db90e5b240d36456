//! The parallel host step (`std`): one tensor's elements split over scoped threads.
//!
//! Every per-element result is independent of the split (stochastic rounding is keyed by the
//! element's index in the tensor), and every per-tensor result is merged exactly: min v and
//! the finite check are order-independent, the home count is an integer sum and SWATS's dot
//! products are exact sums ([`crate::ExactSum`]). So a step gives the same bits for any
//! thread count.

use std::thread;
use std::vec::Vec;

use crate::kernel::{Part, TensorResult, CHUNK};
use crate::state::StateStorage;

/// Elements below which a piece is not worth a thread (spawning one costs ~20 µs, the time of
/// ~100 K elements of a step).
const MIN_PIECE: usize = 128 * CHUNK;

/// Data that splits at an element index into two disjoint halves.
pub(crate) trait Split: Sized + Send {
    /// Elements.
    fn len(&self) -> usize;
    /// Elements before `mid` and from `mid` on.
    fn split_at(self, mid: usize) -> (Self, Self);
}

impl<P: Send, G: Sync, S: StateStorage> Split for Part<'_, P, G, S> {
    fn len(&self) -> usize {
        Part::len(self)
    }
    fn split_at(self, mid: usize) -> (Self, Self) {
        Part::split_at(self, mid)
    }
}

/// A tensor's gradients and the state slot its first pass reads.
impl<G: Sync, S: StateStorage> Split for (&[G], &[S]) {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn split_at(self, mid: usize) -> (Self, Self) {
        let (g0, g1) = self.0.split_at(mid.min(self.0.len()));
        let (s0, s1) = self.1.split_at(S::slot_len(mid).min(self.1.len()));
        ((g0, s0), (g1, s1))
    }
}

impl<G: Sync> Split for &[G] {
    fn len(&self) -> usize {
        <[G]>::len(self)
    }
    fn split_at(self, mid: usize) -> (Self, Self) {
        <[G]>::split_at(self, mid.min(<[G]>::len(self)))
    }
}

/// `f` over `data` split into up to `threads` pieces of whole chunks, each on its own thread
/// (the last on the caller's), the results combined with `merge`, which must be exact and
/// order-independent.
pub(crate) fn run_split<D: Split, R: Send>(
    data: D,
    threads: usize,
    f: impl Fn(D) -> R + Sync,
    merge: impl Fn(R, R) -> R,
) -> R {
    let pieces = threads.min(data.len() / MIN_PIECE).max(1);
    if pieces == 1 {
        return f(data);
    }
    let per = data.len().div_ceil(pieces).next_multiple_of(CHUNK);
    thread::scope(|scope| {
        let f = &f;
        let mut rest = data;
        let mut handles = Vec::with_capacity(pieces - 1);
        while handles.len() + 1 < pieces && rest.len() > per {
            let (head, tail) = rest.split_at(per);
            rest = tail;
            handles.push(scope.spawn(move || f(head)));
        }
        let mut result = f(rest);
        for handle in handles {
            let piece = handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            result = merge(piece, result);
        }
        result
    })
}

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
