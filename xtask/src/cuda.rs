//! CUDA checks without a GPU (DESIGN §5, §8), in the `ci` profile of the workspace's tests:
//!
//! 1. NVRTC 12.9 from PyPI (`nvidia-cuda-nvrtc-cu12`; the kernels include no CUDA header, so
//!    the runtime wheel's headers are not needed), then homeadam-cuda's tests with the NVRTC
//!    variables set: `compile_kernels` compiles every kernel to PTX and SASS for sm_72, sm_87,
//!    sm_89 and sm_90 (no spills, register counts printed); `parity_gxx` compiles the element
//!    math header with g++ (the metadata of `kernels.rs` as `-D` flags) and holds it to the
//!    core bit for bit, parameter groups included; the GPU tests (`gpu`, and homeadam-jetson's)
//!    say they skipped without a driver; homeadam-torch's NVRTC, opened by its path, compiles a
//!    model's kernels to the bytes homeadam-cuda's does. Their output is shown (`--nocapture`).
//!
//! They run as the background lane `cuda-tests` beside the workspace's other tests, from the
//! executables the main lane built.
//!
//! The aarch64 (Jetson) build of homeadam-jetson is checked in the aarch64 lane
//! ([`crate::aarch64`]).

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{exit, Command};

use crate::lanes::{self, Lane};
use crate::wheels::NVRTC_WHEEL;
use crate::{cache, run, run_counting, stage_retrying, test_executables};

/// The packages whose tests need NVRTC.
const PACKAGES: &[&str] = &["homeadam-cuda", "homeadam-jetson", "homeadam-torch"];

/// Starts the CUDA tests as the background lane `cuda-tests`, beside the workspace's other
/// tests. Their executables are listed here, before `cargo test` holds the build directory's
/// lock for as long as its tests run; the lane itself runs no cargo.
pub(crate) fn spawn() -> Lane {
    let executables = test_executables(PACKAGES);
    let args: Vec<&OsStr> = executables
        .iter()
        .flat_map(|(dir, exe)| [dir.as_os_str(), exe.as_os_str()])
        .collect();
    lanes::spawn_with("cuda-tests", &args)
}

/// Waits for the lane of [`spawn`]; when it failed on a warm build cache, the CUDA tests are
/// built and run once more from an emptied build directory, as every cargo stage is.
pub(crate) fn join(lane: Lane) {
    let lane = std::cell::Cell::new(Some(lane));
    stage_retrying("CUDA tests", &cache::workspace_target(), || match lane.take() {
        Some(lane) => lane.passed(),
        None => run_all(&test_executables(PACKAGES)),
    });
}

/// The lane `cuda-tests`: `args` are the executables' (package folder, executable) pairs.
pub(crate) fn lane(args: &[String]) {
    let executables: Vec<(PathBuf, PathBuf)> = args
        .chunks_exact(2)
        .map(|pair| (PathBuf::from(&pair[0]), PathBuf::from(&pair[1])))
        .collect();
    if executables.len() * 2 != args.len() || !run_all(&executables) {
        exit(1);
    }
}

/// Installs NVRTC and runs each (package folder, executable) with it; whether all passed.
fn run_all(executables: &[(PathBuf, PathBuf)]) -> bool {
    run(
        "NVRTC wheel",
        "python3",
        &["-m", "pip", "install", "--quiet", NVRTC_WHEEL],
    );
    let lib = nvrtc_lib_dir();
    let ld_path = match std::env::var("LD_LIBRARY_PATH") {
        Ok(old) if !old.is_empty() => format!("{lib}:{old}"),
        _ => lib.clone(),
    };
    executables.iter().all(|(dir, exe)| {
        // `parity_gxx-0123abcd`: the test's name and its hash.
        let file = exe.file_name().unwrap_or_default().to_string_lossy();
        let test = file.rsplit_once('-').map_or(&*file, |(name, _)| name);
        let package = dir.file_name().unwrap_or_default().to_string_lossy();
        let name = format!("CUDA tests: {package} {test}");
        println!("\n== xtask: {name}: {} --nocapture", exe.display());
        let mut command = Command::new(exe);
        command
            .arg("--nocapture")
            .current_dir(dir)
            .env("HOMEADAM_NVRTC_LIB", &lib)
            .env("LD_LIBRARY_PATH", &ld_path);
        run_counting(&name, command)
    })
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
