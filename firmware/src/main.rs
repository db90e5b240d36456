//! On-device fine-tuning of the pretrained digits classifier with HomeAdamW-ew, with a
//! simulated reset (and a power cut mid-save) that must resume to the same bits. On 16 KiB
//! boards the state is bf16 (or q8, feature `q8-state`) and the resume check (two trainers and
//! a flash image) is left out.
#![no_std]
#![no_main]

use homeadam_core::{ByteSink, CheckpointError, SliceSink, StateStorage};
use homeadam_firmware::board::{State, NAME, RESUME_CHECK};
use homeadam_firmware::data::{FINETUNE, RECORD};
use homeadam_firmware::finetune::{accuracy, new_model, step, Model, BATCH};
use homeadam_firmware::model::{CLASSES, FEATURES, PARAMS};
use homeadam_firmware::{entry, exit, paint_stack, ram_bytes, stack_peak};
use homeadam_mcu::{FlashStore, RamFlash, SampleReader};

/// Steps of fine-tuning: two passes over the fine-tuning split.
const STEPS: u64 = 2 * (600 / BATCH as u64);
/// Flash bytes: two 8 KiB slots.
const FLASH: usize = 16 * 1024;

/// Steps until `model` has taken `until` steps; step t reads the batch after t - 1 batches.
fn train(model: &mut Model, until: u64) {
    let samples = FINETUNE.len() / RECORD;
    while model.optimizer().step_count() < until {
        let first = (model.optimizer().step_count() as usize * BATCH) % samples;
        let mut reader = SampleReader::<_, FEATURES>::new(&FINETUNE[first * RECORD..], CLASSES as u8);
        if !step(model, || reader.read_sample().ok()) {
            exit(false)
        }
    }
}

/// The run of `straight` again, persisted half-way, interrupted by a power cut during the next
/// save, and resumed after a "reset" (a fresh trainer: nothing but the flash survives); returns
/// whether it resumed from the half-way step and ended bit-identical to `straight`.
fn resume_check(straight: &Model) -> bool {
    let mut mem = [0xFFu8; FLASH];
    let half = STEPS / 2;
    {
        let mut run = new_model();
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
    let mut resumed = new_model();
    let mut scratch = [0u8; 8 * 1024];
    let mut store =
        FlashStore::new(RamFlash::new(&mut mem), 0, FLASH as u32 / 2).unwrap_or_else(|_| exit(false));
    let seq = store.load(&mut resumed, &mut scratch);
    let step = resumed.optimizer().step_count();
    defmt::info!("after reset: loaded {} at step {}", seq, step);
    train(&mut resumed, STEPS);
    let same = same_bits(&resumed, straight, &mut scratch) && resumed.optimizer().step_count() == STEPS;
    defmt::info!(
        "resume check: {} (resumed from step {})",
        if same { "bit-identical" } else { "DIFFERS" },
        step
    );
    same && step == half
}

/// Whether `a` and `b` save the same bytes (weights, state, step counter, telemetry): `b`'s
/// save goes to `scratch`, `a`'s is compared with it as it streams.
fn same_bits(a: &Model, b: &Model, scratch: &mut [u8]) -> bool {
    let mut sink = SliceSink::new(scratch);
    if b.save(&mut sink).is_err() {
        return false;
    }
    let len = sink.len();
    let mut rest = Rest(&scratch[..len]);
    a.save(&mut rest).is_ok() && rest.0.is_empty()
}

/// A [`ByteSink`] that accepts only the bytes it holds, in order, consuming them.
struct Rest<'a>(&'a [u8]);

impl ByteSink for Rest<'_> {
    fn write(&mut self, bytes: &[u8]) -> Result<(), CheckpointError> {
        match self.0.split_at_checked(bytes.len()) {
            Some((head, tail)) if head == bytes => {
                self.0 = tail;
                Ok(())
            }
            _ => Err(CheckpointError::Corrupt),
        }
    }
}

#[entry]
fn main() -> ! {
    paint_stack();
    defmt::info!(
        "homeadam firmware on {}: softmax regression, {} parameters, HomeAdamW-ew, {} state",
        NAME,
        PARAMS,
        State::DTYPE.name()
    );
    let mut straight = new_model();
    let state = size_of_val(straight.state());
    defmt::info!(
        "trainer RAM: {} bytes; {} state (m, v): {} bytes, {} B per parameter",
        size_of::<Model>(),
        State::DTYPE.name(),
        state,
        state as f32 / PARAMS as f32
    );
    let before = accuracy(straight.params());
    defmt::info!("held-out accuracy before fine-tuning: {} per mille", before);
    train(&mut straight, STEPS);
    let after = accuracy(straight.params());
    defmt::info!("held-out accuracy after {} steps: {} per mille", STEPS, after);
    let resumed = !RESUME_CHECK || resume_check(&straight);
    let (peak, spare) = stack_peak();
    defmt::info!(
        "stack peak: {} bytes of {} bytes of RAM ({} bytes never reached)",
        peak,
        ram_bytes(),
        spare
    );
    let ok = after > before && resumed && spare > 0;
    defmt::info!(
        "fine-tuning result: {} -> {} per mille; {}",
        before,
        after,
        if ok { "PASS" } else { "FAIL" }
    );
    exit(ok)
}
