//! The data written by `tools/pretrain.py`: pretrained weights, a fine-tuning split and a
//! held-out split of the digits, 65-byte records (64 pixels 0..=16, then the label).

use crate::model::PARAMS;

/// Bytes per sample record.
pub const RECORD: usize = 65;
/// Samples the device fine-tunes on (never seen by the host pretraining).
pub static FINETUNE: &[u8] = include_bytes!("../generated/finetune.bin");
/// Samples the accuracy is measured on (seen by neither).
pub static HELDOUT: &[u8] = include_bytes!("../generated/heldout.bin");
static WEIGHTS: &[u8; 4 * PARAMS] = include_bytes!("../generated/weights.bin");
/// Golden vectors of the host core (`cargo run -p homeadam-mcu --example golden`).
pub static GOLDEN: &[u8] = include_bytes!("../generated/golden.bin");

/// The pretrained parameters.
pub fn pretrained() -> [f32; PARAMS] {
    core::array::from_fn(|k| {
        let b = &WEIGHTS[4 * k..4 * k + 4];
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    })
}
