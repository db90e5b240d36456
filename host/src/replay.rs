//! `homeadam replay`: run recorded gradients through a rule and record what it produced. The
//! config, the files and the loop are `homeadam_replay`'s; this is the command around them.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use homeadam_replay::{output_bytes, replay, telemetry_line, ReplayConfig, ReplayInput};

use crate::train::checkpoint::write_atomically;

/// The whole command: read, replay (printing telemetry lines to `out`), write.
pub fn run(config: &Path, input: &Path, output: &Path, out: &mut impl Write) -> Result<()> {
    let text = std::fs::read_to_string(config)
        .with_context(|| format!("config: cannot read {}", config.display()))?;
    let config = ReplayConfig::parse(&text)?;
    let bytes = std::fs::read(input).with_context(|| format!("input: cannot read {}", input.display()))?;
    let input = ReplayInput::parse(&bytes)?;
    let mut io_error = None;
    let result = replay(&config, &input, |r| {
        if io_error.is_none() {
            io_error = writeln!(out, "{}", telemetry_line(r)).err();
        }
    })?;
    if let Some(e) = io_error {
        return Err(e).context("writing telemetry");
    }
    write_atomically(output, &output_bytes(&result)?)
}
