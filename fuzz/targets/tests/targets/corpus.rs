//! Every seed and every kept crash input runs through its target without a panic.

use std::fs;

use homeadam_fuzz_targets::TARGETS;

use crate::{corpus, regressions_dir, run_or_fail};

fn replay(target: &str) {
    for (name, input) in &corpus(target) {
        run_or_fail(target, name, input);
    }
}

#[test]
fn checkpoint() {
    replay("checkpoint");
}

#[test]
fn step() {
    replay("step");
}

#[test]
fn replay_config() {
    replay("replay_config");
}

#[test]
fn replay_safetensors() {
    replay("replay_safetensors");
}

/// A folder under `fuzz/regressions/` that no target is named after would be skipped unseen.
#[test]
fn regression_folders_are_targets() {
    for entry in fs::read_dir(regressions_dir()).expect("fuzz/regressions/") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            let name = path.file_name().expect("a folder name").to_string_lossy();
            assert!(
                TARGETS.iter().any(|&(target, _)| target == name),
                "{} is not named after a fuzz target",
                path.display()
            );
        }
    }
}
