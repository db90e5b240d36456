//! The real-board app (STM32F405, feature `stm32f405`): fine-tunes the pretrained digits
//! classifier on samples streamed over USART2 (PA2 TX, PA3 RX; 115,200 baud, 8N1) in the framed
//! format of `homeadam_mcu::frame` (`homeadam send-samples --port PATH` on the host). Bad frames
//! are counted and skipped, never trained on. Every [`SAVE_EVERY`] steps the trainer goes to the
//! chip's flash (sectors 10 and 11, two slots of `homeadam_mcu::FlashStore`), so after a reset
//! or a power cut it resumes from the last save. defmt over RTT.
#![no_std]
#![no_main]

use homeadam_firmware::finetune::{accuracy, new_model, step};
use homeadam_firmware::model::{CLASSES, FEATURES};
use homeadam_firmware::{entry, exit};
use homeadam_mcu::{FlashError, FlashStore, FrameReader, ReadError};
use stm32f4xx_hal::flash::{FlashExt, LockedFlash, UnlockedFlash};
use stm32f4xx_hal::{pac, prelude::*, rcc::Config, serial::Serial};

/// Flash offset of the store: sector 10 (memory/stm32f405.x keeps the program below it).
const STORE: u32 = 0x000C_0000;
/// Bytes per slot: one 128 KiB sector each (sectors 10 and 11).
const SLOT: u32 = 128 * 1024;
/// Steps between saves and accuracy reports: one pass over the 600 fine-tuning samples.
const SAVE_EVERY: u64 = 60;

/// A UART receiver as an `embedded-io` reader: blocks for the first byte, then takes what has
/// already arrived.
struct Uart<R>(R);

/// A receive error (overrun, framing, noise, parity): the bytes around it are lost, and the
/// frame they belonged to fails its checks.
#[derive(Debug)]
struct UartError;

impl embedded_io::Error for UartError {
    fn kind(&self) -> embedded_io::ErrorKind {
        embedded_io::ErrorKind::Other
    }
}

impl<R> embedded_io::ErrorType for Uart<R> {
    type Error = UartError;
}

impl<R: embedded_hal_nb::serial::Read<u8>> embedded_io::Read for Uart<R> {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, UartError> {
        let Some(first) = buf.first_mut() else {
            return Ok(0);
        };
        *first = nb::block!(self.0.read()).map_err(|_| UartError)?;
        let mut n = 1;
        // An error after the first byte is left for the next call to report.
        while let (Some(slot), Ok(b)) = (buf.get_mut(n), self.0.read()) {
            *slot = b;
            n += 1;
        }
        Ok(n)
    }
}

/// The store over the unlocked flash; the flash locks again when the store is dropped.
fn store(flash: &mut LockedFlash) -> Result<FlashStore<UnlockedFlash<'_>>, FlashError> {
    FlashStore::new(flash.unlocked(), STORE, SLOT)
}

#[entry]
fn main() -> ! {
    let Some(dp) = pac::Peripherals::take() else {
        exit(false)
    };
    let mut rcc = dp.RCC.freeze(Config::hsi().sysclk(48.MHz()));
    let gpioa = dp.GPIOA.split(&mut rcc);
    let Ok(serial) = Serial::new(dp.USART2, (gpioa.pa2, gpioa.pa3), 115_200.bps(), &mut rcc) else {
        exit(false)
    };
    let (_tx, rx) = serial.split();
    let mut flash = LockedFlash::new(dp.FLASH);

    let mut model = new_model();
    let mut scratch = [0u8; 8 * 1024];
    match store(&mut flash).and_then(|mut s| s.load(&mut model, &mut scratch)) {
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
    defmt::info!(
        "held-out accuracy: {} per mille; waiting for samples on USART2",
        accuracy(model.params())
    );

    let mut reader = FrameReader::<_, FEATURES>::new(Uart(rx), CLASSES as u8);
    let mut uart_errors = 0u32;
    loop {
        let stepped = step(&mut model, || loop {
            match reader.read_sample() {
                Ok(s) => return Some(s),
                Err(ReadError::Io(_)) => uart_errors += 1,
                // A UART stream does not end; a label error is a bad frame, not an error here.
                Err(_) => return None,
            }
        });
        if !stepped {
            exit(false)
        }
        let t = model.optimizer().step_count();
        if t.is_multiple_of(SAVE_EVERY) {
            match store(&mut flash).and_then(|mut s| s.save(&model)) {
                Ok(seq) => defmt::info!("step {}: saved to flash (save {})", t, seq),
                Err(e) => defmt::error!("step {}: save failed: {}", t, e),
            }
            defmt::info!(
                "step {}: held-out accuracy {} per mille; bad frames {}, UART errors {}",
                t,
                accuracy(model.params()),
                reader.bad_frames(),
                uart_errors
            );
        }
    }
}
