//! A Python with PyTorch, for the benches' peers: the one `python3` imports; without one,
//! [`TORCH`] from PyPI is installed into `target/bench-venv` (or the build cache's) first (about
//! 3 GB with the CUDA libraries PyPI's Linux wheel needs even on the CPU).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The PyTorch wheel installed when `python3` has none: the version of BENCHMARKS.md's runs.
const TORCH: &str = "torch==2.15.0";

/// Where [`TORCH`] is installed when `python3` has no PyTorch: `bench-venv` in the build root
/// (`target/`, or `cargo xtask test`'s cache).
fn venv() -> PathBuf {
    crate::cache::build_root().join("bench-venv")
}

/// Whether `python` imports torch.
fn imports_torch(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "import torch"])
        .output()
        .is_ok_and(|out| out.status.success())
}

/// A Python that imports torch: `python3`, else [`venv`]'s, created and filled with [`TORCH`].
pub(crate) fn python_with_torch() -> Result<PathBuf, String> {
    let system = PathBuf::from("python3");
    if imports_torch(&system) {
        return Ok(system);
    }
    let venv = venv();
    let shown = venv.display();
    let venv_python = venv.join("bin/python");
    if !venv_python.is_file() {
        println!("\n== xtask: PyTorch: python3 -m venv {shown}");
        let made = Command::new("python3").arg("-m").arg("venv").arg(&venv).status();
        if !made.is_ok_and(|s| s.success()) {
            return Err(format!("cannot create {shown}"));
        }
    }
    if !imports_torch(&venv_python) {
        println!("== xtask: PyTorch: pip install {TORCH} into {shown} (about 3 GB)");
        let installed = Command::new(&venv_python)
            .args(["-m", "pip", "install", "--quiet", TORCH])
            .status();
        if !installed.is_ok_and(|s| s.success()) || !imports_torch(&venv_python) {
            return Err(format!("pip could not install {TORCH} into {shown}"));
        }
    }
    Ok(venv_python)
}
