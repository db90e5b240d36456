//! The UART app: fine-tunes the pretrained digits classifier on samples streamed to USART2
//! (115,200 baud, 8N1) in the framed format of `homeadam_mcu::frame` (`homeadam send-samples
//! --port PATH` on the host). USART2 is received by interrupt into a queue
//! (`homeadam_firmware::usart`) that the main loop drains between steps, so the sender needs no
//! pauses. Bad frames are counted and skipped, never trained on; bytes lost on the way in are
//! counted and reported at once. Every [`SAVE_EVERY`] steps the trainer is saved (two slots of
//! `homeadam_mcu::FlashStore`), so that after a reset it resumes from the last save.
//!
//! On the real board (feature `stm32f405`): clocks and pins through `stm32f4xx-hal`, the
//! chip's flash sectors 10 and 11 (`homeadam_firmware::flash`), defmt over RTT, forever. Under
//! QEMU `netduinoplus2`: the same receiving, decoding, training and saving, with QEMU's serial
//! port as the line and a `RamFlash` as the flash (QEMU models the flash as ROM); it ends after
//! [`LAST_STEP`] with a summary.
#![no_std]
#![no_main]

use embedded_storage::nor_flash::NorFlash;
use homeadam_firmware::finetune::{accuracy, new_model, step, Model};
use homeadam_firmware::model::{CLASSES, FEATURES};
use homeadam_firmware::usart::{self, Counts, Receiver};
use homeadam_firmware::{entry, exit};
use homeadam_mcu::{FlashStore, FrameReader};
use stm32f4::stm32f405 as pac;

/// Steps between saves and accuracy reports: one pass over the 600 fine-tuning samples.
const SAVE_EVERY: u64 = 60;
/// The step the run ends after, with a summary: under QEMU two passes, as the embedded run
/// (src/main.rs); on the board none.
const LAST_STEP: Option<u64> = if cfg!(feature = "qemu") {
    Some(2 * SAVE_EVERY)
} else {
    None
};

/// The real board: HSI through the PLL to 48 MHz, PA2 and PA3 as USART2's TX and RX, the state
/// store in flash sectors 10 and 11 (memory/stm32f405.x keeps the program below them).
#[cfg(feature = "stm32f405")]
mod platform {
    use homeadam_firmware::flash::Flash;
    use homeadam_mcu::{FlashError, FlashStore};
    use stm32f4xx_hal::{pac, prelude::*, rcc::Config};

    /// Flash offset of the store: sector 10.
    const STORE: u32 = 0x000C_0000;
    /// Bytes per slot: one 128 KiB sector each.
    const SLOT: u32 = 128 * 1024;

    /// Sets the clocks and USART2's pins; returns USART2's peripheral clock in Hz.
    pub fn init(rcc: pac::RCC, gpioa: pac::GPIOA) -> u32 {
        let mut rcc = rcc.freeze(Config::hsi().sysclk(48.MHz()));
        let gpioa = gpioa.split(&mut rcc);
        gpioa.pa2.into_alternate::<7>();
        gpioa.pa3.into_alternate::<7>();
        rcc.clocks.pclk1().raw()
    }

    /// The store over the chip's flash.
    pub fn store(flash: pac::FLASH) -> Result<FlashStore<Flash>, FlashError> {
        FlashStore::new(Flash::new(flash), STORE, SLOT)
    }
}

/// QEMU `netduinoplus2`: the reset clock (HSI, 16 MHz; QEMU's USART ignores the rate), and
/// the store in a `RamFlash`.
#[cfg(feature = "qemu")]
mod platform {
    use homeadam_mcu::{FlashError, FlashStore, RamFlash};
    use stm32f4::stm32f405 as pac;

    /// Flash bytes: two 8 KiB slots.
    pub const FLASH: usize = 16 * 1024;

    /// Nothing to set; returns the peripheral clock at reset in Hz.
    pub fn init(_: pac::RCC, _: pac::GPIOA) -> u32 {
        16_000_000
    }

    /// The store over `mem`.
    pub fn store(mem: &mut [u8; FLASH]) -> Result<FlashStore<RamFlash<'_, FLASH>>, FlashError> {
        FlashStore::new(RamFlash::new(mem), 0, FLASH as u32 / 2)
    }
}

#[entry]
fn main() -> ! {
    let Some(dp) = pac::Peripherals::take() else {
        exit(false)
    };
    let pclk1 = platform::init(dp.RCC, dp.GPIOA);
    #[cfg(feature = "stm32f405")]
    let store = platform::store(dp.FLASH);
    #[cfg(feature = "qemu")]
    let mut mem = [0xFF; platform::FLASH];
    #[cfg(feature = "qemu")]
    let store = platform::store(&mut mem);
    let Ok(mut store) = store else {
        defmt::error!("the state store does not fit the flash");
        exit(false)
    };
    let mut model = new_model();
    let mut scratch = [0u8; 8 * 1024];
    match store.load(&mut model, &mut scratch) {
        Ok(Some(seq)) => defmt::info!(
            "resumed from flash save {} at step {}",
            seq,
            model.optimizer().step_count()
        ),
        Ok(None) => defmt::info!("no saved state: starting from the pretrained weights"),
        Err(e) => defmt::warn!(
            "saved state refused ({}): starting from the pretrained weights",
            e
        ),
    }
    let before = accuracy(model.params());
    defmt::info!(
        "held-out accuracy: {} per mille; receive queue {} bytes ({} arrive in the longest pause, {} ms); waiting for samples on USART2",
        before,
        usart::CAPACITY - 1,
        usart::STALL_BYTES,
        usart::STALL_US / 1000
    );
    let Some(receiver) = usart::start(dp.USART2, pclk1) else {
        exit(false)
    };
    let mut reader = FrameReader::new(receiver, CLASSES as u8);
    let trained = train(&mut model, &mut store, &mut reader);
    finish(&model, &reader, trained, before)
}

/// Steps on the samples of `reader` until [`LAST_STEP`], saving to `store` every
/// [`SAVE_EVERY`] steps; returns the samples trained on.
fn train<F: NorFlash>(
    model: &mut Model,
    store: &mut FlashStore<F>,
    reader: &mut FrameReader<Receiver, FEATURES>,
) -> u32 {
    let mut trained = 0u32;
    let mut reported = usart::counts();
    loop {
        // The receiver never fails and the stream never ends: an error is a bad label.
        let stepped = step(model, || {
            let s = reader.read_sample().ok();
            trained += s.is_some() as u32;
            s
        });
        if !stepped {
            exit(false)
        }
        let counts = usart::counts();
        if counts != reported {
            defmt::warn!("bytes lost on USART2: {}", counts);
            reported = counts;
        }
        let t = model.optimizer().step_count();
        if t.is_multiple_of(SAVE_EVERY) {
            save(model, store, t);
            defmt::info!(
                "step {}: held-out accuracy {} per mille; samples {}, bad frames {}, {}",
                t,
                accuracy(model.params()),
                trained,
                reader.bad_frames(),
                counts
            );
        }
        if LAST_STEP == Some(t) {
            return trained;
        }
    }
}

/// Saves `model` to `store`, logging the result.
fn save<F: NorFlash>(model: &Model, store: &mut FlashStore<F>, t: u64) {
    match store.save(model) {
        Ok(seq) => defmt::info!("step {}: saved to flash (save {})", t, seq),
        Err(e) => defmt::error!("step {}: save failed: {}", t, e),
    }
}

/// Ends the run with its summary: passes if every frame was a good one, no byte was lost and
/// held-out accuracy rose from `before`.
fn finish(model: &Model, reader: &FrameReader<Receiver, FEATURES>, trained: u32, before: u32) -> ! {
    let after = accuracy(model.params());
    let lost = usart::counts();
    let ok = reader.bad_frames() == 0
        && lost
            == (Counts {
                overflows: 0,
                errors: 0,
            })
        && after > before;
    defmt::info!(
        "UART result: trained on {} samples in {} steps; bad frames {}, {}; held-out accuracy {} -> {} per mille; {}",
        trained,
        model.optimizer().step_count(),
        reader.bad_frames(),
        lost,
        before,
        after,
        if ok { "PASS" } else { "FAIL" }
    );
    exit(ok)
}
