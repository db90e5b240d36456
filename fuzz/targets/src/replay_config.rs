//! Any text → `ReplayConfig::parse` (the `--config` file of `homeadam replay`): Ok or an
//! error with a message, never a panic.

use homeadam_replay::ReplayConfig;

/// Parses `data`, if UTF-8, as a replay config; panics only on a bug.
pub fn replay_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = ReplayConfig::parse(text) {
        let _ = format!("{e:#}");
    }
}
