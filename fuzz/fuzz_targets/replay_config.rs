//! Any text → `ReplayConfig::parse` (the `--config` file of `homeadam replay`): Ok or an
//! error with a message, never a panic.

#![no_main]

use homeadam_replay::ReplayConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = ReplayConfig::parse(text) {
        let _ = format!("{e:#}");
    }
});
