//! The parallel host step (`std`): one tensor's elements split over scoped threads.
//!
//! Every per-element result is independent of the split (stochastic rounding is keyed by the
//! element's index in the tensor), and every per-tensor result is merged exactly: min v and
//! the finite check are order-independent, the home count is an integer sum and SWATS's dot
//! products are exact sums ([`crate::ExactSum`]). So a step gives the same bits for any
//! thread count.

use std::thread;

use crate::reduce::CHUNK;
use crate::state::StateStorage;

/// Elements below which a piece is not worth a thread (spawning one costs more than a step
/// over a smaller piece).
const MIN_PIECE: usize = 128 * CHUNK;

/// Data that splits at an element index into two disjoint halves.
pub(crate) trait Split: Sized + Send {
    /// Elements.
    fn len(&self) -> usize;
    /// Elements before `mid` and from `mid` on.
    fn split_at(self, mid: usize) -> (Self, Self);
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
/// (one on the caller's), the results combined with `merge`, which must be exact and
/// order-independent, with `empty` as its identity.
pub(crate) fn run_split<D: Split, R: Send>(
    data: D,
    threads: usize,
    f: impl Fn(D) -> R + Sync,
    merge: impl Fn(R, R) -> R + Sync,
    empty: R,
) -> R {
    let pieces = threads.min(data.len() / MIN_PIECE).max(1);
    split_in(data, pieces, &f, &merge).unwrap_or(empty)
}

/// [`run_split`] over `pieces` pieces: two halves side by side, each split further (`None`
/// only if a half did not run, which [`join`] rules out).
fn split_in<D: Split, R: Send>(
    data: D,
    pieces: usize,
    f: &(impl Fn(D) -> R + Sync),
    merge: &(impl Fn(R, R) -> R + Sync),
) -> Option<R> {
    if pieces <= 1 {
        return Some(f(data));
    }
    let head_pieces = pieces / 2;
    let mid = (data.len() / pieces * head_pieces).next_multiple_of(CHUNK);
    let (head, tail) = data.split_at(mid);
    let (mut head, mut tail) = (Some(head), Some(tail));
    let (mut a, mut b) = (None, None);
    join(
        &mut || a = head.take().and_then(|head| split_in(head, head_pieces, f, merge)),
        &mut || {
            b = tail
                .take()
                .and_then(|tail| split_in(tail, pieces - head_pieces, f, merge))
        },
    );
    match (a, b) {
        (Some(a), Some(b)) => Some(merge(a, b)),
        (a, b) => a.or(b),
    }
}

/// Runs `a` on a scoped thread and `b` on the caller's. Not generic, so that the threads' code
/// is compiled once rather than once per rule and storage combination.
fn join(a: &mut (dyn FnMut() + Send), b: &mut dyn FnMut()) {
    thread::scope(|scope| {
        let handle = scope.spawn(a);
        b();
        handle
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    });
}
