//! On-device fine-tuning of the pretrained digits classifier with HomeAdamW-ew, with a
//! simulated reset (and a power cut mid-save) that must resume to the same bits.
#![no_std]
#![no_main]

use cortex_m_rt::entry;
use homeadam_core::{Config, Rule, Switch};
use homeadam_firmware::data::{pretrained, FINETUNE, HELDOUT, RECORD};
use homeadam_firmware::model::{accumulate_grad, predict, CLASSES, FEATURES, PARAMS};
use homeadam_firmware::{exit, paint_stack, stack_peak};
use homeadam_mcu::{FlashStore, RamFlash, SampleReader, Trainer};

/// Samples per step.
const BATCH: usize = 10;
/// Steps of fine-tuning: two passes over the fine-tuning split.
const STEPS: u64 = 2 * (600 / BATCH as u64);
/// Flash bytes: two 8 KiB slots.
const FLASH: usize = 16 * 1024;

type Model = Trainer<f32, PARAMS, { 2 * PARAMS }>;

fn config() -> Config {
    let mut c = Config::new(Rule::HomeAdamW(Switch::Element));
    c.lr = 2e-3;
    c.weight_decay = 1e-4;
    c
}

/// Held-out accuracy, in per mille.
fn accuracy(params: &[f32; PARAMS]) -> u32 {
    let mut reader = SampleReader::<_, FEATURES>::new(HELDOUT, CLASSES as u8);
    let (mut right, mut all) = (0, 0);
    while let Ok(s) = reader.read_sample() {
        right += (predict(params, &s) == s.label as usize) as u32;
        all += 1;
    }
    1000 * right / all
}

/// Steps until `trainer` has taken `until` steps; step t reads the batch after t - 1 batches.
fn train(trainer: &mut Model, until: u64) {
    let samples = FINETUNE.len() / RECORD;
    while trainer.optimizer().step_count() < until {
        let first = (trainer.optimizer().step_count() as usize * BATCH) % samples;
        let mut reader = SampleReader::<_, FEATURES>::new(&FINETUNE[first * RECORD..], CLASSES as u8);
        let mut grad = [0.0f32; PARAMS];
        for _ in 0..BATCH {
            let s = reader.read_sample().unwrap_or_else(|_| exit(false));
            accumulate_grad(trainer.params(), &s, BATCH, &mut grad);
        }
        let report = trainer.step(&grad, 1.0).unwrap_or_else(|e| {
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
    }
}

#[entry]
fn main() -> ! {
    paint_stack();
    defmt::info!(
        "homeadam firmware: softmax regression, {} parameters, HomeAdamW-ew",
        PARAMS
    );
    let new = || Model::new(config(), pretrained()).unwrap_or_else(|_| exit(false));

    let mut straight = new();
    let before = accuracy(straight.params());
    defmt::info!("held-out accuracy before fine-tuning: {} per mille", before);
    train(&mut straight, STEPS);
    let after = accuracy(straight.params());
    defmt::info!("held-out accuracy after {} steps: {} per mille", STEPS, after);

    // The same run, persisted half-way, interrupted by a power cut during the next save, and
    // resumed after a "reset" (a fresh trainer: nothing but the flash survives).
    let mut mem = [0xFFu8; FLASH];
    let half = STEPS / 2;
    {
        let mut run = new();
        train(&mut run, half);
        let mut store =
            FlashStore::new(RamFlash::new(&mut mem), 0, FLASH as u32 / 2).unwrap_or_else(|_| exit(false));
        let seq = store.save(&run).unwrap_or_else(|_| exit(false));
        defmt::info!("saved step {} to flash (sequence {})", half, seq);
        train(&mut run, half + 7);
        let mut flash = store.release();
        flash.cut_after(FLASH / 2 + 3000);
        let mut store = FlashStore::new(flash, 0, FLASH as u32 / 2).unwrap_or_else(|_| exit(false));
        match store.save(&run) {
            Err(e) => defmt::info!("power cut during the save of step {}: {}", half + 7, e),
            Ok(_) => exit(false),
        }
    }
    let mut resumed = new();
    let mut scratch = [0u8; 8 * 1024];
    let mut store =
        FlashStore::new(RamFlash::new(&mut mem), 0, FLASH as u32 / 2).unwrap_or_else(|_| exit(false));
    let seq = store.load(&mut resumed, &mut scratch);
    let step = resumed.optimizer().step_count();
    defmt::info!("after reset: loaded {} at step {}", seq, step);
    train(&mut resumed, STEPS);
    let same = resumed.params().map(f32::to_bits) == straight.params().map(f32::to_bits)
        && resumed
            .state()
            .iter()
            .zip(straight.state())
            .all(|(a, b)| a.to_bits() == b.to_bits())
        && resumed.optimizer().step_count() == STEPS;
    defmt::info!(
        "resume check: {} (resumed from step {})",
        if same { "bit-identical" } else { "DIFFERS" },
        step
    );
    defmt::info!("stack peak: {} bytes of 128 KiB RAM", stack_peak());
    let ok = after > before && same && step == half;
    defmt::info!(
        "fine-tuning result: {} -> {} per mille; {}",
        before,
        after,
        if ok { "PASS" } else { "FAIL" }
    );
    exit(ok)
}
