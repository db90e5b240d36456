//! A serial link for the tests: it hands out at most 3 bytes per read, like a UART.

use embedded_io::{ErrorType, Read};

/// A serial link that hands out at most 3 bytes per read.
pub struct Uart<'a> {
    /// The bytes not read yet.
    pub bytes: &'a [u8],
}

impl ErrorType for Uart<'_> {
    type Error = core::convert::Infallible;
}

impl Read for Uart<'_> {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, Self::Error> {
        let n = buf.len().min(3).min(self.bytes.len());
        buf[..n].copy_from_slice(&self.bytes[..n]);
        self.bytes = &self.bytes[n..];
        Ok(n)
    }
}
