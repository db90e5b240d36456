//! Errors from below the adapter (the core, homeadam-cuda, the CUDA driver) as candle's: the
//! one place their messages are written.

use std::fmt::Display;

/// `e` as candle's error: "homeadam: {e}".
pub(crate) fn core_err(e: impl Display) -> candle_core::Error {
    candle_core::Error::Msg(format!("homeadam: {e}"))
}

/// [`core_err`] about `what` (a variable, its state): "homeadam: {what}: {e}".
pub(crate) fn core_err_about<E: Display>(what: impl Display) -> impl FnOnce(E) -> candle_core::Error {
    move |e| core_err(format_args!("{what}: {e}"))
}

/// An error of homeadam-cuda or the CUDA driver: "homeadam (CUDA): {e}".
#[cfg(feature = "cuda")]
pub(crate) fn cuda_err(e: impl Display) -> candle_core::Error {
    candle_core::Error::Msg(format!("homeadam (CUDA): {e}"))
}

/// candle's `bail!` without its backtrace: our messages are whole sentences of their own, and
/// candle's macro appends a multi-line backtrace to the message under `RUST_BACKTRACE=1`.
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err(candle_core::Error::Msg(format!($($arg)*)))
    };
}
pub(crate) use bail;
