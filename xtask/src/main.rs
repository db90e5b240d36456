//! Project automation.
//!
//! - `cargo xtask test`: every check of the project, as CI runs it (`.ci/run` calls this). It
//!   installs what it needs (the thumbv7em target, rustfmt, clippy) and stops at the first
//!   failing check with its name.
//! - `cargo xtask bench`: the core's step benchmarks, PyTorch's fused AdamW on the same sizes in
//!   the same run, and the table of BENCHMARKS.md.

mod bench;
mod cuda;
mod firmware;

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
}

fn test() {
    setup();
    run("format", "cargo", &["fmt", "--all", "--", "--check"]);
    run(
        "clippy",
        "cargo",
        &["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"],
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
    cuda::test();
    firmware::test();
    let (passed, failed) = run_tests(&["test", "--workspace", "--release"]);
    println!("\nxtask: every check passed");
    println!("tests: {passed} passed, {failed} failed");
}

/// Runs `cargo test`, echoing its output, and sums its `test result:` lines.
fn run_tests(args: &[&str]) -> (u64, u64) {
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
    if !status.success() {
        eprintln!("xtask: tests failed ({status})");
        println!("tests: {passed} passed, {failed} failed");
        exit(status.code().unwrap_or(1));
    }
    (passed, failed)
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

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("test") => test(),
        Some("setup") => setup(),
        Some("bench") => bench::bench(),
        _ => {
            eprintln!("usage: cargo xtask <test|bench|setup>\n  test   fmt, clippy, no_std builds, all tests\n  bench  step benchmarks next to PyTorch fused AdamW, as a table\n  setup  install the rustup components and targets the checks need");
            exit(2);
        }
    }
}
