//! CUDA checks without a GPU (DESIGN §5, §8):
//!
//! 1. NVRTC 12.9 from PyPI (`nvidia-cuda-nvrtc-cu12`; the kernels include no CUDA header, so
//!    the runtime wheel's headers are not needed), then homeadam-cuda's `compile_kernels` test:
//!    every kernel to PTX and SASS for sm_72, sm_87, sm_89 and sm_90, no spills, register
//!    counts printed. The NVRTC variables are set for that command only: in the workspace
//!    tests that follow, `compile_kernels` says it is skipped (it has run here).
//! 2. homeadam-cuda's `parity_gxx` test: the element math header compiled by g++ (the metadata
//!    of `kernels.rs` as `-D` flags) against the core, bit for bit, parameter groups included.
//! 3. The aarch64 (Jetson) build of homeadam-jetson.
//!
//! 4. The GPU tests (`gpu`), with their output shown: without a driver they say they skipped.

use std::process::{exit, Command};

use crate::run;

/// The NVRTC wheel (CUDA 12.9, as cudarc's `cuda-12090` feature).
const NVRTC_WHEEL: &str = "nvidia-cuda-nvrtc-cu12==12.9.86";
/// The Jetson target.
const AARCH64: &str = "aarch64-unknown-linux-gnu";

/// Runs the CUDA checks.
pub(crate) fn test() {
    run(
        "NVRTC wheels",
        "python3",
        &["-m", "pip", "install", "--quiet", NVRTC_WHEEL],
    );
    let lib = nvrtc_lib_dir();
    let ld_path = match std::env::var("LD_LIBRARY_PATH") {
        Ok(old) if !old.is_empty() => format!("{lib}:{old}"),
        _ => lib.clone(),
    };
    let nvrtc_var = format!("HOMEADAM_NVRTC_LIB={lib}");
    let ld_var = format!("LD_LIBRARY_PATH={ld_path}");
    run(
        "CUDA kernels compile (NVRTC, sm_72/87/89/90)",
        "env",
        &[
            &nvrtc_var,
            &ld_var,
            "cargo",
            "test",
            "-p",
            "homeadam-cuda",
            "--release",
            "--test",
            "compile_kernels",
            "--",
            "--nocapture",
        ],
    );
    run(
        "CUDA element math = core (g++)",
        "cargo",
        &[
            "test",
            "-p",
            "homeadam-cuda",
            "--release",
            "--test",
            "parity_gxx",
            "--",
            "--nocapture",
        ],
    );
    // Shown here because `cargo test` hides a passing test's output: without a driver, these
    // print why they skipped.
    run(
        "GPU tests (skip without a CUDA driver)",
        "cargo",
        &[
            "test",
            "-p",
            "homeadam-cuda",
            "-p",
            "homeadam-jetson",
            "--release",
            "--test",
            "gpu",
            "--",
            "--nocapture",
        ],
    );
    run("aarch64 target", "rustup", &["target", "add", AARCH64]);
    run(
        "Jetson build (aarch64)",
        "cargo",
        &["check", "-p", "homeadam-jetson", "--target", AARCH64],
    );
}

/// The folder of libnvrtc.so.12 inside the installed wheel.
fn nvrtc_lib_dir() -> String {
    let out = Command::new("python3")
        .args([
            "-c",
            "import nvidia.cuda_nvrtc as m, os; print(os.path.join(list(m.__path__)[0], 'lib'))",
        ])
        .output()
        .unwrap_or_else(|e| {
            eprintln!("xtask: cannot run python3: {e}");
            exit(1)
        });
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || !std::path::Path::new(&dir).join("libnvrtc.so.12").exists() {
        eprintln!(
            "xtask: libnvrtc.so.12 not found after installing {NVRTC_WHEEL} ({dir:?}): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        exit(1);
    }
    dir
}
