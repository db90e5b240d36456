//! The fine-tuning both apps run, the QEMU demo on the embedded samples and the board app on
//! samples from the UART: the trainer, its config, one step on a batch, held-out accuracy.

use homeadam_core::rules::only;
use homeadam_core::{Config, Rule, Switch};
use homeadam_mcu::{Sample, SampleReader, Trainer};

use crate::board::{slot_items, State};
use crate::data::{pretrained, HELDOUT};
use crate::exit;
use crate::model::{accumulate_grad, predict, CLASSES, FEATURES, PARAMS};

/// Samples per step.
pub const BATCH: usize = 10;

/// The classifier's parameters and optimizer state (two slots, stored as [`State`]), linking
/// the kernel of [`config`]'s rule only.
pub type Model = Trainer<State, PARAMS, { 2 * slot_items(PARAMS) }, only::HomeAdamWElement>;

/// HomeAdamW-ew, η = 2e-3, ε = 1e-8, λ = 1e-4.
pub fn config() -> Config {
    let mut c = Config::new(Rule::HomeAdamW(Switch::Element));
    c.lr = 2e-3;
    c.eps = 1e-8;
    c.weight_decay = 1e-4;
    c
}

/// The pretrained model at step 0. Not inlined: `Trainer::new`'s result is a second model-sized
/// value, which would otherwise share the caller's frame with the model for the whole run
/// (5 KiB of a 16 KiB part).
#[inline(never)]
pub fn new_model() -> Model {
    Model::new(config(), pretrained()).unwrap_or_else(|e| {
        defmt::error!("model: {}", e);
        exit(false)
    })
}

/// Held-out accuracy, in per mille.
pub fn accuracy(params: &[f32; PARAMS]) -> u32 {
    let mut reader = SampleReader::<_, FEATURES>::new(HELDOUT, CLASSES as u8);
    let (mut right, mut all) = (0, 0);
    while let Ok(s) = reader.read_sample() {
        right += (predict(params, &s) == s.label as usize) as u32;
        all += 1;
    }
    1000 * right / all
}

/// One step on the next [`BATCH`] samples of `next` (the gradient of their mean loss); `false`
/// (no step) when `next` runs out first. Logs every 30th step. Not inlined: the gradient and
/// the optimizer's step would otherwise share the caller's frame with the model for the whole
/// run (16 KiB parts).
#[inline(never)]
pub fn step(model: &mut Model, mut next: impl FnMut() -> Option<Sample<FEATURES>>) -> bool {
    let mut grad = [0.0f32; PARAMS];
    for _ in 0..BATCH {
        let Some(s) = next() else {
            return false;
        };
        accumulate_grad(model.params(), &s, BATCH, &mut grad);
    }
    let report = model.step(&grad, 1.0).unwrap_or_else(|e| {
        defmt::error!("step failed: {}", e);
        exit(false)
    });
    if report.step.is_multiple_of(30) {
        defmt::info!(
            "step {}: home elements {}, rho {}",
            report.step,
            report.home_elements,
            report.rho
        );
    }
    true
}
