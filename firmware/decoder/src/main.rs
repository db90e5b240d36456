//! `homeadam-defmt-decode <elf> < raw` prints the decoded log lines of a raw defmt stream.

use std::io::Read;
use std::process::exit;

use defmt_decoder::{DecodeError, Table};

fn main() {
    let elf = std::env::args().nth(1).unwrap_or_else(|| {
        eprintln!("usage: homeadam-defmt-decode <elf> < raw-defmt-stream");
        exit(2)
    });
    let bytes = std::fs::read(&elf).unwrap_or_else(|e| {
        eprintln!("cannot read {elf}: {e}");
        exit(2)
    });
    let table = match Table::parse(&bytes) {
        Ok(Some(table)) => table,
        Ok(None) => {
            eprintln!("{elf} has no defmt table");
            exit(2)
        }
        Err(e) => {
            eprintln!("{elf}: bad defmt table: {e}");
            exit(2)
        }
    };
    let mut raw = Vec::new();
    std::io::stdin().read_to_end(&mut raw).unwrap_or_else(|e| {
        eprintln!("cannot read stdin: {e}");
        exit(2)
    });
    let mut decoder = table.new_stream_decoder();
    decoder.received(&raw);
    loop {
        match decoder.decode() {
            Ok(frame) => println!("{}", frame.display_message()),
            Err(DecodeError::UnexpectedEof) => break,
            Err(DecodeError::Malformed) => {
                eprintln!("malformed defmt frame");
                exit(1)
            }
        }
    }
}
