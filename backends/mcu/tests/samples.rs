//! Samples from an `embedded-io` reader that delivers bytes a few at a time, like a UART.

mod uart;

use homeadam_mcu::{ReadError, Sample, SampleReader};
use uart::Uart;

#[test]
fn frames_split_across_reads() {
    let stream = [1, 2, 3, 4, 5, 7, 6, 5, 4, 3, 2, 0];
    let mut reader = SampleReader::<_, 5>::new(Uart { bytes: &stream }, 10);
    assert_eq!(
        reader.read_sample(),
        Ok(Sample {
            features: [1, 2, 3, 4, 5],
            label: 7
        })
    );
    assert_eq!(reader.read_sample().map(|s| s.label), Ok(0));
    assert_eq!(reader.read_sample(), Err(ReadError::EndOfStream));
}

#[test]
fn a_torn_frame_and_a_bad_label_are_errors() {
    let mut reader = SampleReader::<_, 4>::new(&[1u8, 2, 3, 4, 12][..], 10);
    assert_eq!(reader.read_sample(), Err(ReadError::BadLabel(12)));
    let mut reader = SampleReader::<_, 4>::new(&[1u8, 2][..], 10);
    assert_eq!(reader.read_sample(), Err(ReadError::EndOfStream));
}

#[test]
fn the_firmware_data_parses() {
    let bytes = include_bytes!("../../../firmware/generated/heldout.bin");
    let mut reader = SampleReader::<_, 64>::new(&bytes[..], 10);
    let mut count = 0;
    while let Ok(s) = reader.read_sample() {
        assert!(s.features.iter().all(|&p| p <= 16));
        count += 1;
    }
    assert_eq!(count, 300);
}
