//! What every figure draws with: the bundled font, drawing errors as `anyhow` errors, and a PNG
//! written whole (through a temporary file and a rename, so a reader never sees half a figure).

use std::fs;
use std::path::Path;
use std::sync::OnceLock;

use anyhow::{anyhow, bail, Context, Result};
use plotters::style::{register_font, FontStyle};

/// DejaVu Sans 2.37 (Debian's fonts-dejavu-core); licence in `host/assets/DejaVuSans-LICENSE.txt`.
static FONT_BYTES: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");
/// The family the bundled font is registered under (plotters' default family).
pub(crate) const FONT: &str = "sans-serif";

/// A drawing backend's error, as an error of this crate.
pub(crate) fn plot_err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing: {e}")
}

/// Registers the bundled font under [`FONT`] (once per process).
pub(crate) fn register_bundled_font() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| register_font(FONT, FontStyle::Normal, FONT_BYTES).is_ok());
    if ok {
        Ok(())
    } else {
        bail!("the bundled font DejaVuSans.ttf could not be loaded")
    }
}

/// Encodes `pixels` (RGB) as a PNG at `path`, through a temporary file and a rename.
pub(crate) fn write_png(path: &Path, width: u32, height: u32, pixels: Vec<u8>) -> Result<()> {
    let image = image::RgbImage::from_raw(width, height, pixels)
        .ok_or_else(|| anyhow!("drawing: pixel buffer of the wrong size"))?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{file_name}.tmp"));
    image
        .save_with_format(&tmp, image::ImageFormat::Png)
        .with_context(|| format!("writing {}", tmp.display()))?;
    fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))
}
