//! Puts memory.x where the linker finds it and rebuilds when the embedded data changes.

use std::{env, fs, path::PathBuf};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    fs::copy("memory.x", out.join("memory.x")).expect("copy memory.x");
    println!("cargo:rustc-link-search={}", out.display());
    for f in ["memory.x", "generated"] {
        println!("cargo:rerun-if-changed={f}");
    }
}
