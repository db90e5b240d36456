//! Project automation.
//!
//! - `cargo xtask test`: every check of the project, as CI runs it (`.ci/run` calls this). It
//!   installs what it needs (the no_std targets of the firmware's boards, rustfmt, clippy,
//!   nightly, cargo-fuzz and QEMU) and stops at the first failing check with its name.
//! - `cargo xtask bench`: the core's step benchmarks, PyTorch's fused AdamW on the same sizes in
//!   the same run, and the table of BENCHMARKS.md.
//! - `cargo xtask firmware`: the firmware checks of `test` alone, see [`firmware`].
//! - `cargo xtask fuzz [SECONDS]`: every fuzz target for SECONDS (default 60), see [`fuzz`].
//! - `cargo xtask build-cuda`: the host with `--features cuda` on a machine without a CUDA
//!   toolkit, see [`build_cuda`]; prints the binary's path last.
//! - `cargo xtask gpu-bundle`: that host and the GPU test binaries, for `scripts/gpu-check.sh`.

mod aarch64;
mod bench;
mod build_cuda;
mod cuda;
mod cuda_stubs;
mod firmware;
mod fuzz;
mod publish;

use std::io::{BufRead, BufReader};
use std::process::{exit, Command, Stdio};
use std::time::Instant;

/// The no_std target every core build is checked for (Cortex-M4F).
const THUMB: &str = "thumbv7em-none-eabihf";

pub(crate) fn run(name: &str, program: &str, args: &[&str]) {
    println!("\n== xtask: {name}: {program} {}", args.join(" "));
    let start = Instant::now();
    let status = Command::new(program).args(args).status().unwrap_or_else(|e| {
        eprintln!("xtask: cannot run {program}: {e}");
        exit(1)
    });
    if !status.success() {
        eprintln!("xtask: {name} failed ({status})");
        exit(status.code().unwrap_or(1));
    }
    println!("== xtask: {name} ok ({:.0} s)", start.elapsed().as_secs_f64());
}

fn setup() {
    run(
        "toolchain components",
        "rustup",
        &["component", "add", "rustfmt", "clippy"],
    );
    run("no_std target", "rustup", &["target", "add", THUMB]);
    fuzz::setup();
}

fn test() {
    setup();
    run("format", "cargo", &["fmt", "--all", "--", "--check"]);
    run(
        "clippy",
        "cargo",
        &["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"],
    );
    // The fuzz targets are their own workspace (cargo-fuzz; built with nightly by the fuzz pass).
    run(
        "format (fuzz)",
        "cargo",
        &[&["fmt"], fuzz::PACKAGES, &["--", "--check"]].concat(),
    );
    run(
        "clippy (fuzz)",
        "cargo",
        &[
            &["clippy"],
            fuzz::PACKAGES,
            &["--all-targets", "--", "-D", "warnings"],
        ]
        .concat(),
    );
    run(
        "no_std core",
        "cargo",
        &["build", "-p", "homeadam-core", "--release", "--target", THUMB],
    );
    run(
        "no_std core + defmt",
        "cargo",
        &[
            "build",
            "-p",
            "homeadam-core",
            "--release",
            "--target",
            THUMB,
            "--features",
            "defmt",
        ],
    );
    publish::check();
    cuda::test();
    firmware::test();
    aarch64::test();
    let mut totals = (0, 0);
    run_tests(&["test", "--workspace", "--release"], &mut totals);
    // Again in the debug profile, overflow checks on: no input may panic there either.
    run_tests(&["test", "-p", "homeadam-core"], &mut totals);
    run_tests(&["test", "-p", "homeadam-replay"], &mut totals);
    run_tests(
        &["test", "-p", "homeadam-host", "--test", "replay_cli"],
        &mut totals,
    );
    // Linted, compiled and linked (not run: no GPU here), so that the `cuda` feature cannot rot.
    build_cuda::check();
    fuzz::test(FUZZ_TEST_SECONDS);
    let (passed, failed) = totals;
    println!("\nxtask: every check passed");
    println!("tests: {passed} passed, {failed} failed");
}

/// Seconds per fuzz target in `cargo xtask test`.
const FUZZ_TEST_SECONDS: u64 = 15;

/// Runs `cargo test`, echoing its output, and adds its `test result:` lines to `totals`
/// (passed, failed); on a failure, prints the totals so far and exits.
fn run_tests(args: &[&str], totals: &mut (u64, u64)) {
    println!("\n== xtask: tests: cargo {}", args.join(" "));
    let mut child = Command::new("cargo")
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            eprintln!("xtask: cannot run cargo: {e}");
            exit(1)
        });
    let (mut passed, mut failed) = (0, 0);
    for line in BufReader::new(child.stdout.take().expect("piped stdout"))
        .lines()
        .map_while(Result::ok)
    {
        println!("{line}");
        if let Some(rest) = line.strip_prefix("test result: ") {
            passed += count(rest, " passed");
            failed += count(rest, " failed");
        }
    }
    let status = child.wait().expect("cargo test ran");
    totals.0 += passed;
    totals.1 += failed;
    if !status.success() {
        eprintln!("xtask: tests failed ({status})");
        println!("tests: {} passed, {} failed", totals.0, totals.1);
        exit(status.code().unwrap_or(1));
    }
}

/// The number before `what` in a `test result:` line, e.g. `ok. 12 passed; 0 failed; …`.
fn count(line: &str, what: &str) -> u64 {
    line.split(';')
        .find_map(|part| {
            part.trim()
                .trim_start_matches("ok. ")
                .trim_start_matches("FAILED. ")
                .strip_suffix(what.trim())
        })
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

const USAGE: &str =
    "usage: cargo xtask <test|bench [FILTER]|setup|firmware|fuzz [SECONDS]|build-cuda|gpu-bundle>
  test        fmt, clippy, no_std builds, all tests, the CUDA host build, a short fuzz pass
  bench       step benchmarks next to PyTorch fused AdamW, as a table, and the M4F's instruction
              counts; FILTER (a criterion regex) runs only the matching benchmarks
  setup       install the toolchains, components and targets the checks need
  firmware    the firmware checks of test alone: every QEMU board's apps, golden test and cost
  fuzz        every fuzz target for SECONDS (default 60)
  build-cuda  the host with --features cuda (CUDA 13.0 from PyPI, no GPU needed; CUDA_COMPUTE_CAP,
              default 89); prints the binary's path last
  gpu-bundle  build-cuda and the GPU test binaries, stripped and gzipped into target/gpu-bundle for
              scripts/gpu-check.sh on a GPU machine (prints the folder last)";

fn usage() -> ! {
    eprintln!("{USAGE}");
    exit(2)
}

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("test") => test(),
        Some("setup") => setup(),
        Some("bench") => bench::bench(std::env::args().nth(2).as_deref()),
        Some("firmware") => firmware::test(),
        Some("build-cuda") => println!("{}", build_cuda::build().display()),
        Some("gpu-bundle") => println!("{}", build_cuda::bundle().display()),
        Some("fuzz") => match std::env::args().nth(2).map(|s| s.parse()) {
            None => fuzz::fuzz(60),
            Some(Ok(seconds)) if seconds > 0 => fuzz::fuzz(seconds),
            Some(_) => usage(),
        },
        _ => usage(),
    }
}
