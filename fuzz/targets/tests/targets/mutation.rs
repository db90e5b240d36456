//! A blind mutation pass: a fixed number of mutants of each target's corpus, made by a
//! splitmix64 generator of a fixed seed, so that every run does the same work and a failure
//! reproduces. No coverage guides it (`cargo xtask fuzz` runs libFuzzer for that); what it
//! catches is a panic a few mutations away from a seed or a kept crash input.
//!
//! Each mutant is 1 to 4 stacked mutations of one corpus entry (taken in turn): a flipped bit, a
//! byte set to 0, 0xFF, 0x7F, 0x80 or any value, an inserted run of bytes, a deleted run, a
//! truncation, a splice with another entry, or 4 or 8 bytes (either endianness) overwritten
//! with an interesting integer (0, 1, the edges of the signed and unsigned widths, a length
//! near the input's or its remainder's, the old value nudged). A quarter of the bytes changed,
//! inserted or deleted are in the first 8 bytes and a quarter in the first 256, where the formats
//! keep their headers.

use homeadam_core::backend::mix64;

use crate::{corpus, run_or_fail};

/// The generator's seed: any fixed value.
const SEED: u64 = 0x484f_4d45_4144_414d;

/// Bytes that sit on the edges of the signed and unsigned ranges.
const INTERESTING_BYTES: [u8; 4] = [0, 0xFF, 0x7F, 0x80];

/// Integers on the edges of the 8, 16, 32 and 64-bit ranges, signed and unsigned.
const INTERESTING: [u64; 15] = [
    0,
    1,
    2,
    0x7F,
    0x80,
    0xFF,
    0x100,
    0x7FFF,
    0xFFFF,
    0x7FFF_FFFF,
    0x8000_0000,
    0xFFFF_FFFF,
    0x7FFF_FFFF_FFFF_FFFF,
    0x8000_0000_0000_0000,
    u64::MAX,
];

/// splitmix64.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.0)
    }

    /// A number in `0..n` (`n` > 0; the modulo's bias is of no matter here).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A position in `0..len` (`len` > 0): a quarter of the time in the first 8 bytes, a quarter in
/// the first 256.
fn position(rng: &mut SplitMix64, len: usize) -> usize {
    let window = match rng.below(4) {
        0 => 8,
        1 => 256,
        _ => len,
    };
    rng.below(len.min(window))
}

/// A mutant of `input`: 1 to 4 mutations, a splice taking its tail from an entry of `corpus`.
fn mutant(rng: &mut SplitMix64, input: &[u8], corpus: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut m = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        mutate(rng, &mut m, corpus);
    }
    m
}

fn mutate(rng: &mut SplitMix64, m: &mut Vec<u8>, corpus: &[(String, Vec<u8>)]) {
    let len = m.len();
    // An empty input can only grow.
    let kind = if len == 0 { 3 } else { rng.below(9) };
    match kind {
        0 => m[position(rng, len)] ^= 1 << rng.below(8),
        1 => m[position(rng, len)] = INTERESTING_BYTES[rng.below(INTERESTING_BYTES.len())],
        2 => m[position(rng, len)] = rng.next() as u8,
        3 => {
            let at = position(rng, len + 1);
            let longest = if rng.below(4) == 0 { 256 } else { 16 };
            let run = 1 + rng.below(longest);
            let bytes: Vec<u8> = if rng.below(2) == 0 {
                vec![INTERESTING_BYTES[rng.below(INTERESTING_BYTES.len())]; run]
            } else {
                (0..run).map(|_| rng.next() as u8).collect()
            };
            m.splice(at..at, bytes);
        }
        4 => {
            let at = position(rng, len);
            let run = 1 + rng.below((len - at).min(16));
            m.drain(at..at + run);
        }
        5 => m.truncate(rng.below(len)),
        6 => {
            let other = &corpus[rng.below(corpus.len())].1;
            let from = rng.below(other.len() + 1);
            m.truncate(rng.below(len + 1));
            m.extend_from_slice(&other[from..]);
        }
        _ => {
            let width = if kind == 7 { 4 } else { 8 };
            if len < width {
                return;
            }
            let at = position(rng, len - width + 1);
            let field = &mut m[at..at + width];
            let big_endian = rng.below(4) == 0;
            let mut bytes = [0u8; 8];
            if big_endian {
                bytes[8 - width..].copy_from_slice(field);
            } else {
                bytes[..width].copy_from_slice(field);
            }
            let old = if big_endian {
                u64::from_be_bytes(bytes)
            } else {
                u64::from_le_bytes(bytes)
            };
            let value = match rng.below(3) {
                0 => INTERESTING[rng.below(INTERESTING.len())],
                1 => {
                    let base = if rng.below(2) == 0 { len } else { len - at };
                    (base as u64).wrapping_add(rng.below(33) as u64).wrapping_sub(16)
                }
                _ => old.wrapping_add(rng.below(33) as u64).wrapping_sub(16),
            };
            if big_endian {
                field.copy_from_slice(&value.to_be_bytes()[8 - width..]);
            } else {
                field.copy_from_slice(&value.to_le_bytes()[..width]);
            }
        }
    }
}

/// Runs `count` mutants of the corpus of `target`, the entries in turn; the first to panic
/// fails the test.
fn mutants(target: &str, count: usize) {
    let corpus = corpus(target);
    let mut rng = SplitMix64(SEED);
    for i in 0..count {
        let (name, input) = &corpus[i % corpus.len()];
        let m = mutant(&mut rng, input, &corpus);
        run_or_fail(target, &format!("mutant {i} (of {name})"), &m);
    }
}

/// How many mutants: `optimized` in the optimized profiles (`cargo xtask test` runs `ci`), where
/// each target runs for some seconds, and `unoptimized` in the dev profile (`cargo test`), where
/// every target runs many times slower and all of them take some seconds together. The counts
/// differ from target to target as their speeds do.
fn count(optimized: usize, unoptimized: usize) -> usize {
    if cfg!(homeadam_unoptimized) {
        unoptimized
    } else {
        optimized
    }
}

#[test]
fn checkpoint() {
    mutants("checkpoint", count(128_000, 4_000));
}

#[test]
fn step() {
    mutants("step", count(200_000, 4_000));
}

#[test]
fn replay_config() {
    mutants("replay_config", count(1_600_000, 100_000));
}

#[test]
fn replay_safetensors() {
    mutants("replay_safetensors", count(200_000, 4_000));
}
