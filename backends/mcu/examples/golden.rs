//! Writes the golden vectors the firmware's on-target test checks:
//! `cargo run -p homeadam-mcu --example golden -- firmware/generated/golden.bin`.

use homeadam_core::SliceSink;
use homeadam_mcu::golden;

fn main() {
    let path = std::env::args().nth(1).expect("usage: golden <output file>");
    let mut buf = vec![0u8; golden::file_len()];
    let mut sink = SliceSink::new(&mut buf);
    golden::write(&mut sink).expect("golden vectors");
    // An unchanged file keeps its modification time: the firmware that embeds it is not rebuilt.
    if std::fs::read(&path).is_ok_and(|old| old == buf) {
        println!("{path} holds these {} bytes already", buf.len());
        return;
    }
    std::fs::write(&path, &buf).expect("write the golden file");
    println!("wrote {} bytes to {path}", buf.len());
}
