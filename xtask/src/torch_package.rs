//! The PyTorch package (`backends/torch`, the Python package `homeadam`): installed into the
//! Python that has PyTorch with the README's `pip install ./backends/torch`, then its tests
//! under pytest (the bits against the core's reference, torch.optim's peers, state dicts, the
//! core's byte format, bad input, and two processes on gloo).

use std::path::Path;
use std::process::Command;

use crate::{fail_exit, try_command};

/// The test runner, pinned as PyTorch is.
const PYTEST: &str = "pytest==9.2.0";

/// Installs the package into `python`'s environment and runs its tests; exits on a failure.
pub(crate) fn test(python: &Path) {
    let root = crate::root();
    // The environment is the build cache's, kept between runs: reinstall the package from
    // this tree even where its version number is the one installed.
    let install = [
        "-m",
        "pip",
        "install",
        "--quiet",
        "--force-reinstall",
        "--no-deps",
        "./backends/torch",
    ];
    let pip =
        |name: &str, args: &[&str]| try_command(name, Command::new(python).args(args).current_dir(&root));
    if !pip(
        "torch package: pytest",
        &["-m", "pip", "install", "--quiet", PYTEST],
    ) {
        fail_exit(&format!("pip could not install {PYTEST}"), 1);
    }
    if !pip("torch package: install", &install) {
        fail_exit("pip install ./backends/torch failed", 1);
    }
    let tests = [
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "backends/torch/tests",
    ];
    if !pip("torch package: tests", &tests) {
        fail_exit("the torch package's tests failed", 1);
    }
}
