//! The runner's one random number generator: SplitMix64, small, seedable and savable.
//!
//! candle's CPU device cannot be seeded, so initialisation, dropout masks and data order all
//! draw from this generator; its whole state is one `u64`, which checkpoints store so that a
//! resumed run continues the same stream.

/// SplitMix64's increment (the golden ratio's fraction, 2⁶⁴ / φ).
pub const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64 (Steele, Lea & Flood, 2014): `state += GAMMA`, then a 64-bit mix; draw `i` is
/// thus a pure function of the state and `i` ([`Rng::draw`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rng {
    /// The whole state; save it to resume the stream.
    pub state: u64,
}

impl Rng {
    /// A generator whose stream is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        Rng { state: seed }
    }

    /// An independent generator for the sub-task `stream` (e.g. one per layer or per epoch).
    pub fn fork(&self, stream: u64) -> Self {
        Rng::new(homeadam_core::backend::mix64(
            self.state ^ homeadam_core::backend::mix64(stream),
        ))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let bits = Rng::draw(self.state, 0);
        self.skip(1);
        bits
    }

    /// Draw `i` (0-based) of the generator whose state is `state`: what the `i + 1`-th
    /// [`Rng::next_u64`] from that state returns, computed without the draws before it.
    pub fn draw(state: u64, i: u64) -> u64 {
        homeadam_core::backend::mix64(state.wrapping_add(GAMMA.wrapping_mul(i.wrapping_add(1))))
    }

    /// Advances the state past `draws` draws, as that many [`Rng::next_u64`] calls would.
    pub fn skip(&mut self, draws: u64) {
        self.state = self.state.wrapping_add(GAMMA.wrapping_mul(draws));
    }

    /// Uniform in [0, 1) with 24 random bits.
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
    }

    /// Uniform in `0..n` (`n > 0`), by Lemire's multiply-shift (bias below 2⁻³²·n).
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }

    /// Standard normal, by Box–Muller on two uniforms.
    pub fn normal(&mut self) -> f32 {
        let u1 = (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
        let u2 = (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
        ((-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    }

    /// Fisher–Yates shuffle of `xs`.
    pub fn shuffle<T>(&mut self, xs: &mut [T]) {
        for i in (1..xs.len()).rev() {
            xs.swap(i, self.below(i + 1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_state_resumes_it() {
        let mut a = Rng::new(7);
        let first: Vec<u64> = (0..5).map(|_| a.next_u64()).collect();
        let mut b = Rng::new(7);
        assert_eq!(first, (0..5).map(|_| b.next_u64()).collect::<Vec<_>>());
        let mut resumed = Rng { state: a.state };
        assert_eq!(a.next_u64(), resumed.next_u64());
    }

    #[test]
    fn draws_are_a_function_of_the_state_and_their_index() {
        let start = Rng::new(0xdead_beef);
        let mut r = start;
        for i in 0..10 {
            assert_eq!(r.next_u64(), Rng::draw(start.state, i));
        }
        let mut skipped = start;
        skipped.skip(10);
        assert_eq!(skipped, r);
        // The stream's first values from seed 0 (SplitMix64's reference sequence).
        assert_eq!(Rng::draw(0, 0), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn below_and_shuffle_stay_in_range() {
        let mut r = Rng::new(1);
        assert!((0..1000).all(|_| r.below(10) < 10));
        let mut xs: Vec<usize> = (0..100).collect();
        r.shuffle(&mut xs);
        xs.sort_unstable();
        assert_eq!(xs, (0..100).collect::<Vec<_>>());
        let mean = (0..10_000).map(|_| r.normal()).sum::<f32>() / 10_000.0;
        assert!(mean.abs() < 0.05, "{mean}");
    }
}
