//! `homeadam replay`: run recorded gradients through a rule and record what it produced. The
//! config, the files and the loop are `homeadam_replay`'s; this is the command around them.

use std::io::Write;
use std::path::Path;

use anyhow::{anyhow, Context, Result};
use homeadam_replay::{output_bytes, replay, telemetry_line, ReplayConfig, ReplayInput};

/// Writes `bytes` to `path` atomically: a temporary file beside it, fsync, rename.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| anyhow!("output: {} is not a file path", path.display()))?;
    let tmp = dir.join(format!(".{}.tmp{}", name.to_string_lossy(), std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.with_context(|| format!("output: cannot write {}", path.display()))
}

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
