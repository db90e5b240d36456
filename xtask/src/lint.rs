//! Linting while building: cargo builds with clippy's driver as the workspace's compiler (what
//! `cargo clippy` runs, here with code generation on), so that one pass lints and compiles the
//! workspace's crates and the dependencies are built once, not once for clippy's check and
//! again for the tests.

use std::path::PathBuf;
use std::process::Command;

use crate::fail_exit;

/// Makes `cargo` lint the workspace's crates with `-D warnings` as it builds them. Every build
/// into the same target directory must do the same: the compiler is part of what cargo
/// fingerprints, so a build without it would compile the workspace's crates again.
pub(crate) fn while_building(cargo: &mut Command) -> &mut Command {
    cargo
        .env("RUSTC_WORKSPACE_WRAPPER", clippy_driver())
        .env("CLIPPY_ARGS", "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__")
}

/// The absolute path of the toolchain's `clippy-driver` (a path that stays the same from run
/// to run: cargo rebuilds the workspace's crates when their compiler changes).
fn clippy_driver() -> PathBuf {
    let out = Command::new("rustup")
        .args(["which", "clippy-driver"])
        .output()
        .unwrap_or_else(|e| fail_exit(&format!("cannot run rustup: {e}"), 1));
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !out.status.success() || !path.is_file() {
        fail_exit("clippy-driver not found: rustup component add clippy", 1);
    }
    path
}
