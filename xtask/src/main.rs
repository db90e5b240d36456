//! Project automation.
//!
//! - `cargo xtask test`: every check of the project, as CI runs it (`.ci/run` calls this). It
//!   installs what it needs (rustfmt, clippy, the no_std targets of the firmware's boards, the
//!   aarch64 target, QEMU and the cross linker, the CUDA wheels, PyTorch for
//!   `host/benches/torch_train.py` and the PyTorch package), builds in the cache of [`cache`],
//!   lints the workspace as it builds every test once in the `ci` profile ([`lint`]; optimized,
//!   overflow checks and debug assertions on), tests the PyTorch package ([`torch_package`]),
//!   runs the CUDA host's build, the CUDA tests, the firmware's and the aarch64
//!   checks as background [`lanes`], stops at the first failing check with its name, and ends
//!   with the [`stages`] table.
//! - `cargo xtask bench`: the core's step benchmarks, PyTorch's fused AdamW on the same sizes in
//!   the same run, every rule × layout over a plain AdamW loop, the core's build time against
//!   candle-core's, and the tables of BENCHMARKS.md.
//! - `cargo xtask firmware`: the firmware checks of `test` alone, see [`firmware`].
//! - `cargo xtask fuzz [SECONDS]`: every fuzz target for SECONDS (default 60), see [`fuzz`].
//! - `cargo xtask build-cuda`: the host with `--features cuda` on a machine without a CUDA
//!   toolkit, see [`build_cuda`]; prints the binary's path last.
//! - `cargo xtask gpu-bundle`: that host and the GPU test binaries, for `scripts/gpu-check.sh`.

mod aarch64;
mod bench;
mod build_cuda;
mod build_time;
mod cache;
mod cpu_training;
mod cuda;
mod cuda_stubs;
mod firmware;
mod fuzz;
mod lanes;
mod lint;
mod matrix;
mod publish;
mod stages;
mod system;
mod torch_package;
mod torch_python;
mod wheels;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{exit, Command, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

/// The no_std target every core build is checked for (Cortex-M4F).
const THUMB: &str = "thumbv7em-none-eabihf";

/// The variable a run sets when its build cache existed before it (lanes read it).
const CACHE_WARM: &str = "HOMEADAM_CACHE_WARM";

/// When this process started (the wall time of the stage table).
static START: OnceLock<Instant> = OnceLock::new();

/// The workspace root (xtask's parent).
pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// Starts installing every Debian package the checks need that is missing (the aarch64 stage's
/// and the firmware's).
fn install_in_background() -> system::Install {
    let mut missing = aarch64::missing_packages();
    missing.extend(firmware::missing_packages());
    system::install_packages_in_background(missing)
}

/// Prints `message`, the stage table so far and the test counts, and exits with `code`.
pub(crate) fn fail_exit(message: &str, code: i32) -> ! {
    eprintln!("xtask: {message}");
    if std::env::var_os(stages::LANE).is_none() {
        stages::print_table(START.get_or_init(Instant::now).elapsed().as_secs_f64());
        stages::print_totals();
    }
    exit(code)
}

/// Runs `program args` as the stage `name`; whether it succeeded.
fn try_run(name: &str, program: &str, args: &[&str]) -> bool {
    try_command(name, Command::new(program).args(args))
}

/// Runs `command` as the stage `name`: echoed, timed into the stage table, its outcome
/// printed; whether it succeeded.
pub(crate) fn try_command(name: &str, command: &mut Command) -> bool {
    let program = command.get_program().to_string_lossy().into_owned();
    let args: Vec<_> = command.get_args().map(|a| a.to_string_lossy()).collect();
    let line = format!("{program} {}", args.join(" "));
    match command.get_current_dir() {
        Some(dir) => println!("\n== xtask: {name}: (cd {} && {line})", dir.display()),
        None => println!("\n== xtask: {name}: {line}"),
    }
    let start = Instant::now();
    let status = command
        .status()
        .unwrap_or_else(|e| fail_exit(&format!("cannot run {program}: {e}"), 1));
    let seconds = start.elapsed().as_secs_f64();
    stages::record(name, seconds);
    if status.success() {
        println!("== xtask: {name} ok ({seconds:.0} s)");
    } else {
        eprintln!("xtask: {name} failed ({status})");
    }
    status.success()
}

/// Runs `program args` as the stage `name`; exits on failure.
pub(crate) fn run(name: &str, program: &str, args: &[&str]) {
    if !try_run(name, program, args) {
        fail_exit(&format!("{name} failed"), 1);
    }
}

/// Runs the stage `attempt` (true: it passed) whose builds live in `build_dir`; when it fails
/// on a build cache that existed before the run, once more with `build_dir` emptied, so that a
/// corrupt cache costs time and never decides the result.
pub(crate) fn stage_retrying(name: &str, build_dir: &Path, attempt: impl Fn() -> bool) {
    if attempt() {
        return;
    }
    if std::env::var_os(CACHE_WARM).is_none() {
        fail_exit(&format!("{name} failed"), 1);
    }
    println!(
        "\n== xtask: {name} failed on the warm build cache: once more from an empty {}",
        build_dir.display()
    );
    if let Err(e) = std::fs::remove_dir_all(build_dir) {
        eprintln!("xtask: cannot empty {}: {e}", build_dir.display());
    }
    if !attempt() {
        fail_exit(
            &format!("{name} failed (also with its build directory emptied)"),
            1,
        );
    }
}

/// `cargo args` in the workspace's target directory, as [`stage_retrying`].
fn cargo_stage(name: &str, args: &[&str]) {
    stage_retrying(name, &cache::workspace_target(), || try_run(name, "cargo", args));
}

fn setup() {
    run(
        "toolchain components",
        "rustup",
        &["component", "add", "rustfmt", "clippy"],
    );
    let mut targets = vec![THUMB, aarch64::TARGET];
    targets.extend(firmware::targets());
    targets.sort_unstable();
    targets.dedup();
    run(
        "rust targets",
        "rustup",
        &[&["target", "add"], &targets[..]].concat(),
    );
}

/// The profile every test runs in: optimized, with overflow checks and debug assertions
/// (Cargo.toml).
pub(crate) const PROFILE: &str = "ci";

fn test() {
    START.get_or_init(Instant::now);
    let cache = cache::open();
    cache::restore_mtimes(&cache);
    if cache.warm {
        std::env::set_var(CACHE_WARM, "1");
    }
    setup();
    let packages = install_in_background();
    // The peer of `homeadam bench-train` (host/tests/bench_train.rs) runs on PyTorch.
    let torch = std::thread::spawn(torch_python::python_with_torch);
    let cuda = lanes::spawn("cuda");
    run("format", "cargo", &["fmt", "--all", "--", "--check"]);
    run(
        "format (fuzz)",
        "cargo",
        &[&["fmt"], fuzz::PACKAGES, &["--", "--check"]].concat(),
    );
    firmware::format();
    evidence();
    fuzz::clippy(&cache.dir.join("fuzz"));
    cargo_stage(
        "no_std core",
        &["build", "-p", "homeadam-core", "--release", "--target", THUMB],
    );
    cargo_stage(
        "no_std core + defmt",
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
    // Clippy runs as the workspace's compiler of the one build every test runs from (lint.rs).
    let build = [
        "test",
        "--workspace",
        "--profile",
        PROFILE,
        "--no-run",
        "--all-targets",
    ];
    let name = "clippy and build the tests";
    stage_retrying(name, &cache::workspace_target(), || {
        try_command(name, lint::while_building(Command::new("cargo").args(build)))
    });
    firmware::golden_vectors();
    packages.join();
    let firmware = lanes::spawn("firmware");
    let aarch64 = lanes::spawn("aarch64");
    let python = match torch.join() {
        Ok(Ok(python)) => python,
        Ok(Err(e)) => fail_exit(&format!("PyTorch for host/benches/torch_train.py: {e}"), 1),
        Err(_) => fail_exit(
            "PyTorch for host/benches/torch_train.py: the installer panicked",
            1,
        ),
    };
    std::env::set_var("HOMEADAM_TORCH_PYTHON", &python);
    // homeadam-cuda and homeadam-jetson run with NVRTC and their output shown, in a lane
    // (cuda.rs).
    let tests = [
        "test",
        "--workspace",
        "--profile",
        PROFILE,
        "--exclude",
        "homeadam-cuda",
        "--exclude",
        "homeadam-jetson",
    ];
    let cuda_tests = cuda::spawn();
    stage_retrying("tests", &cache::workspace_target(), || run_tests("tests", &tests));
    torch_package::test(&python);
    publish::check();
    docs();
    cuda::join(cuda_tests);
    aarch64.join();
    firmware.join();
    cuda.join();
    println!("\nxtask: every check passed");
    stages::print_table(START.get().expect("started").elapsed().as_secs_f64());
    stages::print_totals();
}

/// EXPERIMENTS.md's verdict table against the per-seed CSVs it is computed from
/// (scripts/verdicts.py: every number, interval and verdict word regenerated; a cell that
/// differs fails the stage).
fn evidence() {
    let script = root().join("scripts").join("verdicts.py");
    let script = script.to_string_lossy();
    run("evidence: the verdict table", "python3", &[&script]);
}

/// The workspace's docs with rustdoc's warnings as errors (a broken link or a stray HTML tag
/// in a doc comment), as a crate's users read them. A failure is the docs', so the build
/// directory is not emptied for a second try.
fn docs() {
    let name = "docs";
    let mut cargo = Command::new("cargo");
    cargo
        .args(["doc", "--workspace", "--no-deps"])
        .env("RUSTDOCFLAGS", "-D warnings");
    if !try_command(name, lint::while_building(&mut cargo)) {
        fail_exit(&format!("{name} failed"), 1);
    }
}

/// Runs `cargo ARGS` (a `cargo test` of the workspace's target, with the compiler the tests were
/// built with: [`lint::while_building`]) as the stage `name`, echoing its output, and adds its
/// `test result:` lines to the totals; whether it passed.
pub(crate) fn run_tests(name: &str, args: &[&str]) -> bool {
    println!("\n== xtask: {name}: cargo {}", args.join(" "));
    let mut cargo = Command::new("cargo");
    lint::while_building(cargo.args(args));
    run_counting(name, cargo)
}

/// Runs `command` (tests printing libtest's `test result:` lines) as the stage `name`, echoing
/// its output and adding its results to the totals; whether it passed.
pub(crate) fn run_counting(name: &str, mut command: Command) -> bool {
    let start = Instant::now();
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| fail_exit(&format!("{name}: cannot run {command:?}: {e}"), 1));
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
    let status = child.wait().expect("the tests ran");
    let seconds = start.elapsed().as_secs_f64();
    stages::record_tests(name, seconds, passed, failed);
    if status.success() {
        println!("== xtask: {name} ok ({seconds:.0} s)");
    } else {
        eprintln!("xtask: {name} failed ({status})");
    }
    status.success()
}

/// The workspace's test executables of `packages` in the `ci` profile (built by the stage that
/// builds every test, with its compiler, so nothing is compiled here), each with its package's folder: running
/// them directly keeps cargo from resolving those packages' features alone, which would build
/// the core and its dependencies once more.
pub(crate) fn test_executables(packages: &[&str]) -> Vec<(PathBuf, PathBuf)> {
    let mut cargo = Command::new("cargo");
    lint::while_building(cargo.args(["test", "--workspace", "--profile", PROFILE, "--no-run"]));
    built_tests(cargo)
        .into_iter()
        .filter(|t| packages.contains(&t.package.as_str()))
        .map(|t| (t.manifest_dir, t.executable))
        .collect()
}

/// A test executable that `cargo test --no-run --message-format json` built.
pub(crate) struct BuiltTest {
    /// Its package's name.
    pub(crate) package: String,
    /// The test target's name (`gpu` for `tests/gpu.rs`; the crate's for its unit tests).
    pub(crate) target: String,
    pub(crate) executable: PathBuf,
    /// The folder of its package's Cargo.toml (the directory cargo runs it in).
    pub(crate) manifest_dir: PathBuf,
}

/// Runs `cargo` (a `cargo test --no-run …`) with JSON messages and returns the test executables
/// it built; exits if it fails.
pub(crate) fn built_tests(mut cargo: Command) -> Vec<BuiltTest> {
    let out = cargo
        .args(["--message-format", "json"])
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| fail_exit(&format!("cannot run cargo: {e}"), 1));
    if !out.status.success() {
        fail_exit(&format!("{cargo:?} failed ({})", out.status), 1);
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["profile"]["test"] == true)
        .filter_map(|m| {
            // `path+file:///…/folder#name@version`, or `…/name#version` when the folder has
            // the package's name.
            let (url, tail) = m["package_id"].as_str()?.rsplit_once('#')?;
            let package = match tail.split_once('@') {
                Some((name, _)) => name,
                None => url.rsplit('/').next()?,
            };
            Some(BuiltTest {
                package: package.to_string(),
                target: m["target"]["name"].as_str()?.to_string(),
                executable: PathBuf::from(m["executable"].as_str()?),
                manifest_dir: Path::new(m["manifest_path"].as_str()?).parent()?.to_path_buf(),
            })
        })
        .collect()
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
    "usage: cargo xtask <test|bench [FILTER]|setup|firmware|fuzz [SECONDS]|build-cuda|gpu-bundle [--before REV]>
  test        fmt, clippy, no_std builds, every test (the ci profile), the PyTorch package
              (pip install, mypy, pytest), the CUDA host build, the firmware in QEMU, aarch64
              under QEMU; ends with a stage-time table
  bench       step benchmarks next to PyTorch fused AdamW, as a table; every rule × layout over
              the plain AdamW loop, and the rows slower than BENCHMARKS.md records; the core's
              build time against candle-core's; the M4F's instruction counts; FILTER (a criterion
              regex) runs only the matching criterion benchmarks, and neither the matrix nor
              the build times
  setup       install the toolchains, components, targets and Debian packages the checks need
  firmware    the firmware checks of test alone: every QEMU board's apps, golden test and cost
  fuzz        every fuzz target for SECONDS (default 60)
  build-cuda  the host with --features cuda (CUDA 13.0 from PyPI, no GPU needed; CUDA_COMPUTE_CAP,
              default 89); prints the binary's path last
  gpu-bundle  build-cuda and the GPU test binaries, stripped and xz-compressed into target/gpu-bundle for
              scripts/gpu-check.sh on a GPU machine (prints the folder last); --before REV adds the
              host of commit REV as homeadam-before, timed there beside the current build";

fn usage() -> ! {
    eprintln!("{USAGE}");
    exit(2)
}

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("test") => test(),
        Some("setup") => {
            setup();
            install_in_background().join();
        }
        Some("bench") => bench::bench(std::env::args().nth(2).as_deref()),
        Some("firmware") => firmware::test(),
        // The background lanes of `test` (lanes.rs).
        Some("lane") => {
            lanes::watch_parent();
            match std::env::args().nth(2).as_deref() {
                Some("cuda") => {
                    build_cuda::check();
                    build_cuda::runs_without_a_driver();
                }
                Some("firmware") => firmware::boards(),
                Some("aarch64") => aarch64::test(),
                Some("cuda-tests") => {
                    cuda::lane(&std::env::args().skip(3).collect::<Vec<_>>());
                }
                _ => usage(),
            }
        }
        Some("build-cuda") => println!("{}", build_cuda::build().display()),
        Some("gpu-bundle") => {
            let before = match std::env::args().skip(2).collect::<Vec<_>>().as_slice() {
                [] => None,
                [flag, rev] if flag == "--before" => Some(rev.clone()),
                _ => usage(),
            };
            println!("{}", build_cuda::bundle(before.as_deref()).display())
        }
        Some("fuzz") => match std::env::args().nth(2).map(|s| s.parse()) {
            None => fuzz::fuzz(60),
            Some(Ok(seconds)) if seconds > 0 => fuzz::fuzz(seconds),
            Some(_) => usage(),
        },
        _ => usage(),
    }
}
