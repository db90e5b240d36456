//! The device-side structs of `kernels/homeadam.cuh`, mirrored in Rust (`repr(C)`).

use cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use homeadam_core::backend::StepScalars;

/// `HaTensor`: one entry of the tensor table.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct HaTensor {
    pub param: u64,
    pub grad: u64,
    pub state: u64,
    pub numel: u64,
    /// min v_t of the first pass (f32 bits).
    pub vmin_pre: u32,
    /// min of the v slot after the update (f32 bits).
    pub vmin_post: u32,
    /// Elements that took the home branch.
    pub home: u32,
    /// The index of the tensor's parameter group in the step's scalars.
    pub group: u32,
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
    pub vmin_pre: u32,
    pub vmin_post: u32,
    pub nonfinite_applied: u32,
    pub home: u64,
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
        assert_eq!(std::mem::size_of::<HaTensor>(), 48);
        assert_eq!(std::mem::size_of::<HaBlock>(), 8);
        assert_eq!(std::mem::size_of::<HaStatus>(), 24);
        // 20 f32 + 3 u32, no padding.
        assert_eq!(std::mem::size_of::<HaScalars>(), 92);
    }

    #[test]
    fn block_table_covers_every_element_once() {
        let blocks = block_table(&[0, 1, 5, 4], 4);
        let pairs: Vec<(u32, u32)> = blocks.iter().map(|b| (b.tensor, b.chunk)).collect();
        assert_eq!(pairs, [(1, 0), (2, 0), (2, 1), (3, 0)]);
    }
}
