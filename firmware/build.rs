//! Puts the selected board's memory layout (`memory/<board>.x`) where the linker finds it as
//! `memory.x`, and rebuilds when it or the embedded data changes.

use std::{env, fs, path::PathBuf};

/// The board features (Cargo.toml); exactly one must be on.
const BOARDS: [&str; 6] = [
    "netduinoplus2",
    "mps2-an500",
    "mps2-an505",
    "microbit",
    "sifive-e",
    "stm32f405",
];

fn main() {
    let on: Vec<&str> = BOARDS
        .into_iter()
        .filter(|b| env::var_os(format!("CARGO_FEATURE_{}", b.to_uppercase().replace('-', "_"))).is_some())
        .collect();
    let [board] = on[..] else {
        panic!("enable exactly one board feature of {BOARDS:?} (enabled: {on:?})");
    };
    let layout = format!("memory/{board}.x");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    fs::copy(&layout, out.join("memory.x")).expect("copy the memory layout");
    println!("cargo:rustc-link-search={}", out.display());
    for f in ["memory", "generated"] {
        println!("cargo:rerun-if-changed={f}");
    }
}
