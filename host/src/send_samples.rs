//! `homeadam send-samples --port PATH`: streams the digits fine-tuning set to a board's serial
//! port, framed as `homeadam_mcu::frame` (COBS, CRC-32, one sample per frame), for the
//! firmware's `board` app, which fine-tunes on it and skips bad frames. The frames go out
//! back to back at the line rate: the board receives by interrupt into a queue sized for its
//! longest pause (firmware/README.md), so the sender leaves it no gaps.
//!
//! The set is `firmware/generated/finetune.bin` (65-byte records: 64 pixels 0..=16, then the
//! label), written by `firmware/tools/pretrain.py`: the samples the QEMU firmware trains on.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use homeadam_mcu::frame::{encode, frame_len, DELIMITER};
use homeadam_mcu::Sample;

/// The fine-tuning set, relative to the repository root.
pub const DEFAULT_SAMPLES: &str = "firmware/generated/finetune.bin";
/// Features per sample (8 × 8 pixels).
pub const FEATURES: usize = 64;
/// Classes (labels 0..10).
pub const CLASSES: u8 = 10;
/// Bytes per record of the set: the features, then the label.
pub const RECORD: usize = FEATURES + 1;

/// Hardware flow control on a terminal port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Flow {
    /// None: the receiver keeps up by itself (the firmware's `board` app does).
    #[default]
    None,
    /// RTS/CTS: the adapter sends only while the receiver asserts CTS; for a receiver that
    /// drives it (the `board` app does not: left unwired, CTS would stop the stream).
    RtsCts,
}

/// The serial settings a terminal port gets: raw 8N1 at this speed, with the [`Flow`] asked for.
pub const BAUD: libc::speed_t = libc::B115200;

/// What was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sent {
    /// Frames (samples × passes).
    pub frames: usize,
    /// Bytes, the leading delimiter included.
    pub bytes: usize,
    /// Whether the port is a terminal (then set to raw mode).
    pub terminal: bool,
}

/// Why the samples were not sent (the I/O cause, where there is one, is the error's `source`).
#[derive(Debug)]
pub enum SendError {
    /// The samples file could not be read.
    Samples {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The samples file is not a whole number of records.
    Length {
        /// Its bytes.
        len: usize,
    },
    /// A record's label is not a class.
    Label {
        /// The record's index.
        index: usize,
        /// Its label.
        label: u8,
    },
    /// The port could not be opened or set to raw mode.
    Port {
        /// The port.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// Writing to the port failed.
    Write(io::Error),
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::Samples { path, .. } => write!(f, "cannot read {}", path.display()),
            SendError::Length { len } => {
                write!(
                    f,
                    "{len} bytes of samples is not a whole number of {RECORD}-byte records"
                )
            }
            SendError::Label { index, label } => {
                write!(f, "sample {index} has label {label}, not below {CLASSES}")
            }
            SendError::Port { path, .. } => write!(f, "cannot open {} as a serial port", path.display()),
            SendError::Write(_) => write!(f, "writing to the port failed"),
        }
    }
}

impl std::error::Error for SendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SendError::Samples { source, .. } | SendError::Port { source, .. } => Some(source),
            SendError::Write(e) => Some(e),
            SendError::Length { .. } | SendError::Label { .. } => None,
        }
    }
}

/// The samples of a file of records, checked.
pub fn read_samples(path: &Path) -> Result<Vec<Sample<FEATURES>>, SendError> {
    let bytes = std::fs::read(path).map_err(|source| SendError::Samples {
        path: path.into(),
        source,
    })?;
    if bytes.len() % RECORD != 0 {
        return Err(SendError::Length { len: bytes.len() });
    }
    bytes
        .chunks_exact(RECORD)
        .enumerate()
        .map(|(index, r)| {
            let mut features = [0; FEATURES];
            features.copy_from_slice(&r[..FEATURES]);
            let label = r[FEATURES];
            match label < CLASSES {
                true => Ok(Sample { features, label }),
                false => Err(SendError::Label { index, label }),
            }
        })
        .collect()
}

/// The frame of one sample.
pub fn frame(sample: &Sample<FEATURES>) -> Vec<u8> {
    let mut out = vec![0; frame_len(FEATURES)];
    let n = encode(sample, &mut out).expect("a buffer of frame_len bytes");
    out.truncate(n);
    out
}

/// Opens `port` for writing (never creating it) and, if it is a terminal, sets it to raw 8N1
/// at [`BAUD`] with `flow`; returns the file and whether it is a terminal.
fn open_port(port: &Path, flow: Flow) -> Result<(File, bool), SendError> {
    use std::os::unix::fs::OpenOptionsExt;
    let err = |source| SendError::Port {
        path: port.into(),
        source,
    };
    let file = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(port)
        .map_err(err)?;
    let terminal = raw_mode(&file, flow).map_err(err)?;
    Ok((file, terminal))
}

/// Raw mode: no echo, no line editing, no newline translation, 8 data bits, RTS/CTS as `flow`.
fn raw_mode(file: &File, flow: Flow) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: `fd` is open for the lifetime of `file`; `termios` is plain data that
    // `tcgetattr` fills before it is read.
    unsafe {
        if libc::isatty(fd) != 1 {
            return Ok(false);
        }
        let mut t: libc::termios = std::mem::zeroed();
        if libc::tcgetattr(fd, &mut t) != 0 {
            return Err(io::Error::last_os_error());
        }
        libc::cfmakeraw(&mut t);
        t.c_cflag |= libc::CLOCAL | libc::CREAD;
        t.c_cflag &= !(libc::CRTSCTS | libc::CSTOPB);
        if flow == Flow::RtsCts {
            t.c_cflag |= libc::CRTSCTS;
        }
        if libc::cfsetspeed(&mut t, BAUD) != 0 || libc::tcsetattr(fd, libc::TCSANOW, &t) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(true)
}

/// Streams the samples of `samples` (records, see the module doc) to `port`, `passes` times,
/// back to back: a delimiter first (it ends any line noise before it), then one frame per
/// sample. Returns once the bytes have left (a terminal is drained).
pub fn send_samples(port: &Path, samples: &Path, passes: u32, flow: Flow) -> Result<Sent, SendError> {
    let frames: Vec<Vec<u8>> = read_samples(samples)?.iter().map(frame).collect();
    let (mut file, terminal) = open_port(port, flow)?;
    let mut sent = Sent {
        frames: 0,
        bytes: 1,
        terminal,
    };
    file.write_all(&[DELIMITER]).map_err(SendError::Write)?;
    for _ in 0..passes {
        for f in &frames {
            file.write_all(f).map_err(SendError::Write)?;
            sent.frames += 1;
            sent.bytes += f.len();
        }
    }
    file.flush().map_err(SendError::Write)?;
    if terminal {
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor is open; tcdrain only waits.
        if unsafe { libc::tcdrain(file.as_raw_fd()) } != 0 {
            return Err(SendError::Write(io::Error::last_os_error()));
        }
    }
    Ok(sent)
}
