//! The runner's one progress-bar style (indicatif draws nothing when stderr is not a terminal).

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of `len` steps labelled `prefix`, or a hidden one when `show` is false.
pub fn bar(show: bool, len: u64, prefix: String) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let style = ProgressStyle::with_template("{prefix:>24} {bar:30} {pos}/{len} {msg} [{elapsed}<{eta}]")
        .expect("valid template");
    ProgressBar::new(len).with_style(style).with_prefix(prefix)
}
