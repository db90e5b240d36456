//! The fuzz targets on stable, with no fuzzer: every seed and every kept crash input
//! ([`corpus`]), and a fixed number of blind mutants of them per target ([`mutation`]), run
//! without a panic. A panic fails the test with the target's name and the input's bytes.

mod corpus;
mod mutation;

use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use homeadam_fuzz_targets::{seeds, Target, TARGETS};

/// The folder of the crash inputs kept as regression tests, one subfolder per target.
fn regressions_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../regressions")
}

/// The target named `name`, as [`TARGETS`] lists it.
fn target(name: &str) -> Target {
    TARGETS
        .into_iter()
        .find_map(|(target, run)| (target == name).then_some(run))
        .unwrap_or_else(|| panic!("no fuzz target is named {name:?}"))
}

/// The seeds of `target`, then the files of `fuzz/regressions/<target>/` (if any) in name order,
/// named `regressions/<file>`.
fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let mut corpus = seeds(target);
    let dir = regressions_dir().join(target);
    if dir.exists() {
        let mut files: Vec<PathBuf> = fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
            .map(|entry| entry.expect("a directory entry").path())
            .collect();
        files.sort();
        for path in files {
            let bytes = fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            let name = path.file_name().expect("a file name").to_string_lossy();
            corpus.push((format!("regressions/{name}"), bytes));
        }
    }
    assert!(!corpus.is_empty(), "{target} has no seeds");
    corpus
}

/// Runs `input` through the target named `name`; on a panic (whose message the panic hook has
/// printed already), fails the test naming the target, what the input is, and its bytes as hex
/// (`xxd -r -p` turns them back into a file for `fuzz/regressions/<target>/`).
fn run_or_fail(name: &str, what: &str, input: &[u8]) {
    let run = target(name);
    if catch_unwind(AssertUnwindSafe(|| run(input))).is_err() {
        let hex: String = input.iter().map(|b| format!("{b:02x}")).collect();
        panic!(
            "fuzz target {name} panicked on {what} ({} bytes):\n{hex}",
            input.len()
        );
    }
}
