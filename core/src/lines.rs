//! [`Lines`]: `f32` scratch arrays on cache lines of their own.

/// `N` values starting a cache line: a vector that a loop stores into such an array and loads
/// back never straddles two lines. Where one does, the load waits for the store to leave the
/// core, and a loop over stack scratch ran at full speed or at a third of it by where the stack
/// happened to start.
#[repr(C, align(64))]
pub(crate) struct Lines<const N: usize>(pub(crate) [f32; N]);

impl<const N: usize> Lines<N> {
    /// Zeros.
    #[inline(always)]
    pub(crate) const fn new() -> Self {
        Lines([0.0; N])
    }
}
