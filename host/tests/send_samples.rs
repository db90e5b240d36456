//! `homeadam send-samples` against a pseudo-terminal: what the board would receive decodes, with
//! the firmware's own `FrameReader`, to exactly the digits fine-tuning set (so the port was in
//! raw mode: a cooked terminal turns 0x0A into 0x0D 0x0A); and every failure is a typed error.

use std::ffi::CStr;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};

use homeadam_host::send_samples::{frame, read_samples, send_samples, Flow, SendError, DEFAULT_SAMPLES};
use homeadam_mcu::frame::frame_len;
use homeadam_mcu::{FrameReader, ReadError};

fn finetune_set() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(DEFAULT_SAMPLES)
}

/// A pseudo-terminal: the master (the board's side), the slave's path (the port), and the slave
/// kept open so that the terminal stays up while the master reads.
fn pty() -> (File, PathBuf, File) {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: out-pointers to two ints; null name, termios and window size are allowed.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened and are owned by the returned files.
    let (master, slave) = unsafe { (File::from_raw_fd(master), File::from_raw_fd(slave)) };
    // SAFETY: ttyname returns a NUL-terminated static buffer (or null), copied at once.
    let name = unsafe { libc::ttyname(slave.as_raw_fd()) };
    assert!(!name.is_null(), "ttyname: {}", std::io::Error::last_os_error());
    let path = PathBuf::from(unsafe { CStr::from_ptr(name) }.to_str().expect("UTF-8 path"));
    (master, path, slave)
}

/// Every good sample of `bytes`, and the bad-frame count.
fn decode(bytes: &[u8]) -> (Vec<homeadam_mcu::Sample<64>>, u32) {
    let mut reader = FrameReader::<_, 64>::new(bytes, 10);
    let mut good = Vec::new();
    loop {
        match reader.read_sample() {
            Ok(s) => good.push(s),
            Err(ReadError::EndOfStream) => return (good, reader.bad_frames()),
            Err(e) => panic!("{e:?}"),
        }
    }
}

#[test]
fn streams_the_finetune_set_through_a_pty_in_raw_mode() {
    let set = read_samples(&finetune_set()).expect("the committed fine-tuning set");
    assert_eq!(set.len(), 600);
    let (mut master, port, slave) = pty();
    let expected = 1 + 2 * set.len() * frame_len(64);
    let board = std::thread::spawn(move || {
        let mut got = vec![0; expected];
        master
            .read_exact(&mut got)
            .expect("the board side reads every byte");
        (got, master)
    });
    let sent = send_samples(&port, &finetune_set(), 2, Flow::None).expect("sent");
    // The master stays open while the slave's settings are read below.
    let (got, _master) = board.join().expect("reader thread");
    assert_eq!((sent.frames, sent.bytes, sent.terminal), (1200, expected, true));
    let (good, bad) = decode(&got);
    assert_eq!(bad, 0);
    assert_eq!(good, [set.clone(), set].concat());

    // The port is left raw: no canonical input, no echo, no output processing.
    // SAFETY: plain data filled by tcgetattr on an open descriptor.
    let t = unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        assert_eq!(libc::tcgetattr(slave.as_raw_fd(), &mut t), 0);
        t
    };
    assert_eq!(t.c_lflag & (libc::ICANON | libc::ECHO), 0);
    assert_eq!(t.c_oflag & libc::OPOST, 0);
    assert_eq!(t.c_cflag & libc::CSIZE, libc::CS8);
}

#[test]
fn rts_cts_is_set_only_when_asked() {
    for (flow, set) in [(Flow::RtsCts, true), (Flow::None, false)] {
        let (mut master, port, slave) = pty();
        let expected = 1 + read_samples(&finetune_set()).expect("set").len() * frame_len(64);
        let board = std::thread::spawn(move || {
            let mut got = vec![0; expected];
            master
                .read_exact(&mut got)
                .expect("the board side reads every byte");
            master
        });
        send_samples(&port, &finetune_set(), 1, flow).expect("sent");
        let _master = board.join().expect("reader thread");
        // SAFETY: plain data filled by tcgetattr on an open descriptor.
        let t = unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            assert_eq!(libc::tcgetattr(slave.as_raw_fd(), &mut t), 0);
            t
        };
        assert_eq!(t.c_cflag & libc::CRTSCTS != 0, set, "{flow:?}");
    }
}

#[test]
fn a_plain_file_gets_the_same_stream() {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = dir.path().join("port");
    File::create(&port).expect("create");
    let sent = send_samples(&port, &finetune_set(), 1, Flow::None).expect("sent");
    assert!(!sent.terminal);
    let bytes = std::fs::read(&port).expect("read back");
    let set = read_samples(&finetune_set()).expect("set");
    assert_eq!(bytes.len(), 1 + set.iter().map(|s| frame(s).len()).sum::<usize>());
    assert_eq!(decode(&bytes), (set, 0));
}

#[test]
fn errors_are_typed_and_nothing_is_created() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing_port = dir.path().join("ttyNONE");
    let err = send_samples(&missing_port, &finetune_set(), 1, Flow::None).unwrap_err();
    assert!(matches!(err, SendError::Port { .. }), "{err}");
    assert!(!missing_port.exists(), "a mistyped port is not created");

    let samples = dir.path().join("samples.bin");
    let err = send_samples(&missing_port, &samples, 1, Flow::None).unwrap_err();
    assert!(matches!(err, SendError::Samples { .. }), "{err}");

    std::fs::write(&samples, [0u8; 64]).expect("write");
    let err = read_samples(&samples).unwrap_err();
    assert!(matches!(err, SendError::Length { len: 64 }), "{err}");

    let mut records = vec![0u8; 2 * 65];
    records[129] = 10;
    std::fs::write(&samples, &records).expect("write");
    let err = read_samples(&samples).unwrap_err();
    assert!(matches!(err, SendError::Label { index: 1, label: 10 }), "{err}");
    assert_eq!(err.to_string(), "sample 1 has label 10, not below 10");
}
