//! The device-side structs of `kernels/homeadam.cuh`, mirrored in Rust (`repr(C)`).

use cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use homeadam_core::backend::{Histogram, SecondMomentMin, StepScalars, BUCKETS};
use homeadam_core::RhoOver;

/// `HaVmin`: the minima of a first pass, as f32 bits.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct HaVmin {
    /// min v_t over every element.
    pub all: u32,
    /// min v_t over the elements with v_t > 0.
    pub active: u32,
}

impl HaVmin {
    /// The minima as the core's [`SecondMomentMin`] (+∞: no element).
    pub fn get(self) -> SecondMomentMin {
        SecondMomentMin {
            all: f32::from_bits(self.all),
            active: f32::from_bits(self.active),
        }
    }

    /// ρ = `rho_over`'s min v̂, as the core's first pass ([`SecondMomentMin::rho`]).
    pub fn rho(self, rho_over: RhoOver, bc2: f32) -> f32 {
        self.get().rho(rho_over, bc2)
    }
}

/// `HaTensor`: one entry of the tensor table.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct HaTensor {
    pub param: u64,
    pub grad: u64,
    pub state: u64,
    pub numel: u64,
    /// The minima of the first pass's v_t.
    pub vmin_pre: HaVmin,
    /// min of the v slot after the update (f32 bits).
    pub vmin_post: u32,
    /// Elements that took the home branch.
    pub home: u32,
    /// The index of the tensor's parameter group in the step's scalars.
    pub group: u32,
    /// Explicit padding (no byte of the struct undefined).
    pub unused: u32,
    /// [`crate::kernels::flags::BOUND`]: the min over the update of v's f32 bits above the
    /// index of its chunk of [`crate::kernels::BOUND_CHUNK`] elements (`ha_bound_key`).
    pub vmin_at: u64,
}

/// `HaBlock`: one chunk of `kernels::CHUNK` elements of one tensor (whose index in the table
/// keys its stochastic rounding).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct HaBlock {
    pub tensor: u32,
    pub chunk: u32,
}

/// `HaStatus`: the model-wide results of a step.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct HaStatus {
    pub nonfinite: u32,
    pub vmin_pre: HaVmin,
    pub vmin_post: u32,
    pub nonfinite_applied: u32,
    /// 1: `ha_home_bound` proved the home branch; the first pass did not run.
    pub decided: u32,
    pub home: u64,
    /// [`crate::kernels::flags::BOUND`]: the min over the update of u's f32 bits (v as stored)
    /// above the tensor's index.
    pub bound: u64,
    /// [`crate::kernels::flags::BOUND`]: min v over the elements with v > 0 after the update
    /// (f32 bits).
    pub vmin_post_active: u32,
    /// The chunk of the last update's bound, as `ha_reset` keeps it for `ha_home_bound`.
    pub bound_at: u32,
}

impl HaStatus {
    /// The bound the update of global HomeAdam(W) leaves (with [`crate::kernels::flags::BOUND`]):
    /// u = min v as stored, and the tensor that holds it (the earliest of equals).
    pub fn bound(&self) -> (f32, u32) {
        (f32::from_bits((self.bound >> 32) as u32), self.bound as u32)
    }
}

/// `HaScalars`: the core's [`StepScalars`] (same `repr(C)` layout), one per parameter group.
#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct HaScalars(pub StepScalars);

// SAFETY: plain `repr(C)` data of integers and floats, valid for any bit pattern, with the
// layout of the C structs of homeadam.cuh (checked by the size tests below).
unsafe impl DeviceRepr for HaTensor {}
unsafe impl ValidAsZeroBits for HaTensor {}
unsafe impl DeviceRepr for HaBlock {}
unsafe impl DeviceRepr for HaStatus {}
unsafe impl ValidAsZeroBits for HaStatus {}
unsafe impl DeviceRepr for HaScalars {}
unsafe impl ValidAsZeroBits for HaScalars {}

/// The calibration histogram of the element-wise rule from the device's 64-bit counts
/// (`ha_home_hist_*`), each saturated at `u32::MAX` as the core's [`Histogram`] counts.
pub(crate) fn histogram(counts: &[u64]) -> Histogram {
    let mut h = [0u32; BUCKETS];
    for (c, &d) in h.iter_mut().zip(counts) {
        *c = u32::try_from(d).unwrap_or(u32::MAX);
    }
    Histogram::from_counts(h)
}

/// The block table of `numels`: one entry per chunk of `chunk` elements, tensors in order.
pub(crate) fn block_table(numels: &[usize], chunk: usize) -> Vec<HaBlock> {
    let mut blocks = Vec::new();
    for (tensor, &n) in numels.iter().enumerate() {
        for c in 0..n.div_ceil(chunk) {
            blocks.push(HaBlock {
                tensor: tensor as u32,
                chunk: c as u32,
            });
        }
    }
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_the_c_structs() {
        assert_eq!(std::mem::size_of::<HaTensor>(), 64);
        assert_eq!(std::mem::size_of::<HaBlock>(), 8);
        assert_eq!(std::mem::size_of::<HaStatus>(), 48);
        // The C struct's size and offsets are the core's StepScalars', asserted in the
        // kernels' header against the generated defines.
        assert_eq!(
            std::mem::size_of::<HaScalars>(),
            std::mem::size_of::<StepScalars>()
        );
    }

    #[test]
    fn device_counts_saturate_as_the_cores() {
        let mut counts = vec![0u64; BUCKETS];
        (counts[0], counts[5], counts[127]) = (3, u64::from(u32::MAX) + 9, 1);
        let h = histogram(&counts);
        assert_eq!(h.counts()[0], 3);
        assert_eq!(h.counts()[5], u32::MAX);
        assert_eq!(h.counts()[127], 1);
        assert_eq!(h.total(), 4 + u64::from(u32::MAX));
    }

    #[test]
    fn block_table_covers_every_element_once() {
        let blocks = block_table(&[0, 1, 5, 4], 4);
        let pairs: Vec<(u32, u32)> = blocks.iter().map(|b| (b.tensor, b.chunk)).collect();
        assert_eq!(pairs, [(1, 0), (2, 0), (2, 1), (3, 0)]);
    }
}
