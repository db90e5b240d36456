//! The framed sample link: good frames, corrupt frames (counted, skipped, never returned) and a
//! stream cut mid-frame, through a reader that hands out a few bytes at a time like a UART.

mod uart;

use homeadam_mcu::frame::{encode, frame_len, DELIMITER};
use homeadam_mcu::{FrameReader, ReadError, Sample};
use uart::Uart;

/// Digits-like samples: pixels 0..=16 (zeros included) and labels 0..10.
fn samples<const F: usize>(count: usize) -> Vec<Sample<F>> {
    (0..count)
        .map(|k| Sample {
            features: core::array::from_fn(|j| ((k * 7 + j * 3) % 17) as u8),
            label: (k % 10) as u8,
        })
        .collect()
}

fn stream<const F: usize>(samples: &[Sample<F>]) -> Vec<u8> {
    let mut out = Vec::new();
    for s in samples {
        let mut frame = vec![0; frame_len(F)];
        let n = encode(s, &mut frame).expect("buffer of frame_len");
        out.extend_from_slice(&frame[..n]);
    }
    out
}

/// Reads every good sample until the end of the stream; returns them and the bad-frame count.
fn read_all<const F: usize>(bytes: &[u8]) -> (Vec<Sample<F>>, u32) {
    let mut reader = FrameReader::<_, F>::new(Uart { bytes }, 10);
    let mut good = Vec::new();
    loop {
        match reader.read_sample() {
            Ok(s) => good.push(s),
            Err(ReadError::EndOfStream) => return (good, reader.bad_frames()),
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
}

#[test]
fn good_frames_round_trip() {
    let sent = samples::<64>(50);
    let bytes = stream(&sent);
    assert_eq!(bytes.len(), 50 * frame_len(64));
    assert_eq!(
        bytes.iter().filter(|&&b| b == DELIMITER).count(),
        50,
        "0x00 only ends frames"
    );
    assert_eq!(read_all::<64>(&bytes), (sent, 0));
}

#[test]
fn long_records_need_extra_code_bytes() {
    // Bodies over 254 bytes without zeros, and with zeros: both round-trip.
    let dense: Vec<Sample<600>> = (0..3)
        .map(|k| Sample {
            features: core::array::from_fn(|j| 1 + ((j + k) % 200) as u8),
            label: k as u8,
        })
        .collect();
    let sent = [dense.clone(), samples::<600>(3)].concat();
    let bytes = stream(&sent);
    assert!(bytes.len() <= 6 * frame_len(600));
    assert_eq!(read_all::<600>(&bytes), (sent, 0));
}

#[test]
fn short_buffer_is_refused() {
    let s = samples::<64>(1)[0];
    assert_eq!(encode(&s, &mut [0; 69]), None);
    assert_eq!(encode(&s, &mut [0; 100]), Some(frame_len(64)));
}

#[test]
fn corrupt_frames_are_counted_and_skipped() {
    let sent = samples::<64>(20);
    let len = frame_len(64);
    let mut bytes = stream(&sent);
    // Changes from the back, so that each index is still a frame's. Line noise between frames
    // 17 and 18 (one bad piece, then an empty frame). Frame 15: a byte dropped (wrong length).
    // Frame 11: its delimiter lost (merged with frame 12: one bad frame, both samples lost).
    // Frame 7: a byte turned into a delimiter (two bad pieces). Frame 3: one bit flipped (CRC).
    bytes.splice(18 * len..18 * len, [0xFF, 0x12, DELIMITER, DELIMITER]);
    bytes.remove(15 * len + 5);
    bytes[11 * len + len - 1] = 0x33;
    bytes[7 * len + 30] = DELIMITER;
    bytes[3 * len + 10] ^= 0x04;
    // Noise before the first frame, ended by the delimiter a sender starts with.
    let noisy = [&[0x41, 0x42, DELIMITER][..], &bytes].concat();
    let (good, bad) = read_all::<64>(&noisy);
    let lost = [3, 7, 11, 12, 15];
    let expected: Vec<_> = (0..20).filter(|k| !lost.contains(k)).map(|k| sent[k]).collect();
    assert_eq!(good, expected, "every good frame, nothing from a bad one");
    assert_eq!(bad, 1 + 1 + 2 + 1 + 1 + 1);
}

#[test]
fn a_cut_stream_ends_cleanly() {
    let sent = samples::<64>(5);
    let bytes = stream(&sent);
    let cut = &bytes[..3 * frame_len(64) + 20];
    let (good, bad) = read_all::<64>(cut);
    assert_eq!(good, sent[..3]);
    assert_eq!(bad, 1, "the cut frame is counted");
    assert_eq!(read_all::<64>(&[]), (vec![], 0));
}

#[test]
fn labels_out_of_range_are_bad_frames() {
    let mut sent = samples::<64>(3);
    sent[1].label = 10;
    let (good, bad) = read_all::<64>(&stream(&sent));
    assert_eq!(good, [sent[0], sent[2]]);
    assert_eq!(bad, 1);
}

#[test]
fn random_damage_never_yields_a_sample_that_was_not_sent() {
    let sent = samples::<64>(40);
    let clean = stream(&sent);
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    };
    for _ in 0..200 {
        let mut bytes = clean.clone();
        for _ in 0..1 + next(8) {
            let at = next(bytes.len());
            match next(3) {
                0 => bytes[at] = next(256) as u8,
                1 => _ = bytes.remove(at),
                _ => bytes.insert(at, next(256) as u8),
            }
        }
        let (good, _) = read_all::<64>(&bytes);
        // In order, each one sent (a subsequence of `sent`).
        let mut rest = sent.iter();
        assert!(good.iter().all(|g| rest.any(|s| s == g)));
        assert!(
            good.len() >= sent.len() - 2 * 8,
            "damage costs only the frames it touches"
        );
    }
}
