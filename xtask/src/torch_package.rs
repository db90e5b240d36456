//! The PyTorch package (`backends/torch`, the Python package `homeadam`): installed into the
//! Python that has PyTorch with the README's `pip install ./backends/torch`, then its tests
//! under pytest (the bits against the core's reference, torch.optim's peers, state dicts, the
//! core's byte format, bad input, and two processes on gloo), and its types under mypy.

use std::path::Path;
use std::process::Command;

use crate::{fail_exit, try_command};

/// The test runner and the type checker, pinned as PyTorch is.
const PYTEST: &str = "pytest==9.2.0";
const MYPY: &str = "mypy==2.4.1";

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
    let python_in = |dir: &Path, name: &str, args: &[&str]| {
        try_command(name, Command::new(python).args(args).current_dir(dir))
    };
    let tools = ["-m", "pip", "install", "--quiet", PYTEST, MYPY];
    if !python_in(&root, "torch package: pytest and mypy", &tools) {
        fail_exit(&format!("pip could not install {PYTEST} and {MYPY}"), 1);
    }
    if !python_in(&root, "torch package: install", &install) {
        fail_exit("pip install ./backends/torch failed", 1);
    }
    // The sources, with their stub of the native module, as the package's users' checkers see them.
    let sources = root.join("backends/torch/python");
    let strict = [
        "-m",
        "mypy",
        "--strict",
        "--ignore-missing-imports",
        "--cache-dir=/dev/null",
        "-p",
        "homeadam",
    ];
    if !python_in(&sources, "torch package: mypy --strict", &strict) {
        fail_exit("the torch package's types do not check", 1);
    }
    let tests = [
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "backends/torch/tests",
    ];
    if !python_in(&root, "torch package: tests", &tests) {
        fail_exit("the torch package's tests failed", 1);
    }
}
