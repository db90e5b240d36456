//! The core's release build against candle-core's, one after the other on the same machine:
//! each cold (an empty target directory, its dependencies built too), then the crate alone
//! (its dependencies kept, the crate itself cleaned). Compiling each piece of the fast path
//! once per instruction set rather than once per rule × storage was done to keep the first of
//! these at or below candle-core's; this measures whether it still is.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::fail_exit;

/// The crates measured, with the features their measured build enables.
const CRATES: [(&str, &[&str]); 2] = [("homeadam-core", &["--features", "std"]), ("candle-core", &[])];

/// Seconds of `cargo build --release -p NAME FEATURES` into `target_dir`.
fn seconds(name: &str, features: &[&str], target_dir: &str) -> f64 {
    let start = Instant::now();
    let status = Command::new("cargo")
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            name,
            "--target-dir",
            target_dir,
        ])
        .args(features)
        .current_dir(crate::root())
        .status()
        .unwrap_or_else(|e| fail_exit(&format!("cannot run cargo: {e}"), 1));
    if !status.success() {
        fail_exit(&format!("the release build of {name} failed"), 1);
    }
    start.elapsed().as_secs_f64()
}

/// Removes `dir` and what it holds, if it exists.
fn empty(dir: &Path) {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            fail_exit(&format!("cannot remove {}: {e}", dir.display()), 1)
        }
        _ => {}
    }
}

/// Measures both crates and returns the table, as Markdown.
pub(crate) fn build_times() -> String {
    let dir = crate::root().join("target/build-time");
    let target_dir = dir.to_string_lossy().into_owned();
    let mut rows = Vec::new();
    for (name, features) in CRATES {
        println!("\n== xtask: build time: {name}, cold, then alone");
        empty(&dir);
        let cold = seconds(name, features, &target_dir);
        let clean = Command::new("cargo")
            .args([
                "clean",
                "--release",
                "--quiet",
                "-p",
                name,
                "--target-dir",
                &target_dir,
            ])
            .current_dir(crate::root())
            .status();
        if !clean.is_ok_and(|s| s.success()) {
            fail_exit(&format!("cargo clean -p {name} failed"), 1);
        }
        let alone = seconds(name, features, &target_dir);
        rows.push((name, cold, alone));
    }
    empty(&dir);
    let mut text = String::from(
        "\nRelease builds, one after the other (`cargo build --release -p NAME`, the core with `std`):\n\n\
         | crate | cold, with its dependencies | the crate alone |\n|---|---|---|\n",
    );
    for (name, cold, alone) in &rows {
        text.push_str(&format!("| {name} | {cold:.0} s | {alone:.0} s |\n"));
    }
    let [(_, core_cold, core_alone), (_, candle_cold, candle_alone)] = rows[..] else {
        unreachable!("two crates");
    };
    text.push_str(&format!(
        "\nhomeadam-core / candle-core: {:.2} cold, {:.2} alone (goal ≤ 1.0, floor 1.2).\n",
        core_cold / candle_cold,
        core_alone / candle_alone
    ));
    text
}
