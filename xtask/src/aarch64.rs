//! The core on aarch64 (Jetson's CPU, Apple silicon), under QEMU's user-mode emulation: the
//! core's tests cross-built for `aarch64-unknown-linux-gnu` in release (emulated, the `ci`
//! profile's checks would slow them; the x86 run of the same code has them) and run by
//! `qemu-aarch64`, so that the NEON conversions (bf16 and f16, to nearest and stochastic; f16's
//! also against `half`'s software conversion, under the FPCR that Linux gives a thread) and the
//! fast path compiled for NEON are proven equal to the scalar reference bit for bit. Emulation
//! is many times slower than native, so the step runs the unit tests (every conversion), and
//! the property test (with fewer cases) and the chunk-crossing sizes over 6 of the 27 storage
//! combinations, which cover each storage type in each position, so every NEON conversion of
//! θ, g and the state (`--cfg homeadam_emulated`, core/tests/common/mod.rs). Last, `cargo check` of
//! homeadam-jetson for aarch64 (the Jetson backend's build), in the same target directory.

use crate::system::present;
use crate::{cache, stage_retrying, try_run};
use std::path::Path;

pub(crate) const TARGET: &str = "aarch64-unknown-linux-gnu";

/// Debian's cross linker and user-mode QEMU, and the folder of the aarch64 C library.
const LINKER: &str = "aarch64-linux-gnu-gcc";
const QEMU: &str = "qemu-aarch64";
const SYSROOT: &str = "/usr/aarch64-linux-gnu";

/// Property-test cases per storage combination under emulation (32 natively).
const PROPTEST_CASES: &str = "16";

/// Builds and runs the core's tests for aarch64 under QEMU (the target and
/// [`missing_packages`] installed).
pub(crate) fn test() {
    let linker = format!("target.{TARGET}.linker=\"{LINKER}\"");
    let runner = format!("target.{TARGET}.runner=[\"{QEMU}\", \"-L\", \"{SYSROOT}\"]");
    // Fewer storage combinations per test file, and no bench dependencies (core/Cargo.toml).
    let rustflags = format!("target.{TARGET}.rustflags=[\"--cfg\", \"homeadam_emulated\"]");
    let cases = format!("PROPTEST_CASES={PROPTEST_CASES}");
    // A target directory of its own: `cargo xtask test` runs this as a lane beside the
    // workspace's tests, which hold the workspace's.
    let target = cache::build_root().join("aarch64");
    let target_dir = target.to_string_lossy();
    let cargo = |name: &str, tests: &[&str]| {
        let args = [
            &cases[..],
            "cargo",
            "test",
            "-p",
            "homeadam-core",
            "--release",
            "--target",
            TARGET,
            "--target-dir",
            &target_dir,
            "--config",
            &linker,
            "--config",
            &runner,
            "--config",
            &rustflags,
        ]
        .into_iter()
        .chain(tests.iter().copied())
        .collect::<Vec<_>>();
        stage_retrying(name, &target, || try_run(name, "env", &args));
    };
    cargo(
        "aarch64 core: build the tests",
        &[
            "--no-run",
            "--lib",
            "--test",
            "fast_equals_reference",
            "--test",
            "sizes",
        ],
    );
    cargo("aarch64 core: unit tests", &["--lib"]);
    cargo(
        "aarch64 core: fast path = reference (property test)",
        &["--test", "fast_equals_reference"],
    );
    cargo(
        "aarch64 core: fast path = reference (sizes)",
        &["--test", "sizes"],
    );
    // Here rather than in the main lane, which is the run's longest.
    let jetson = [
        "check",
        "-p",
        "homeadam-jetson",
        "--target",
        TARGET,
        "--target-dir",
        &target_dir,
    ];
    let name = "Jetson build (aarch64)";
    stage_retrying(name, &target, || try_run(name, "cargo", &jetson));
}

/// The Debian packages of the cross linker, the aarch64 C library and QEMU that are missing.
pub(crate) fn missing_packages() -> Vec<&'static str> {
    let crt = Path::new(SYSROOT).join("lib/crt1.o").exists();
    [
        (present(LINKER), "gcc-aarch64-linux-gnu"),
        (crt, "libc6-dev-arm64-cross"),
        (present(QEMU), "qemu-user"),
    ]
    .into_iter()
    .filter(|(present, _)| !present)
    .map(|(_, package)| package)
    .collect()
}
