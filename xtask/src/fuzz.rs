//! Fuzzing: one target per untrusted input, whose bodies are the library `homeadam-fuzz-targets`
//! (`fuzz/targets/`), a member of the workspace:
//!
//! - `checkpoint`: bytes → `Optimizer::load_state` (saving what loaded gives the same bytes);
//! - `step`: any config and slices → `Optimizer::step`, equal to `step_reference`;
//! - `replay_config`, `replay_safetensors`: the two files of `homeadam replay`.
//!
//! `cargo xtask test` runs them on stable as the tests of that crate: every seed and every crash
//! input kept in `fuzz/regressions/<target>/`, then a fixed pass of blind mutants of those.
//!
//! The coverage-guided runs are `cargo xtask fuzz` (this module): libFuzzer, through the
//! binaries of `fuzz/` (cargo-fuzz, nightly, their own workspace). Each target runs for a fixed
//! time with a fixed libFuzzer seed; the build keeps debug assertions and overflow checks on
//! (cargo-fuzz's default). The seeds are generated first (`homeadam-fuzz-seeds`: checkpoints
//! saved by the core, the golden cases' files) into `fuzz/target/seeds`. A crash stops its
//! target and leaves the input in `fuzz/artifacts/<target>/` (fuzz/regressions/README.md says
//! how to keep it); the run fails after every target had its turn.

use std::fs::{self, File};
use std::path::Path;
use std::process::{exit, Command, Stdio};
use std::time::Instant;

use crate::run;

/// Cargo's arguments that select the fuzz workspace's packages (for fmt and clippy).
pub(crate) const PACKAGES: &[&str] = &["--manifest-path", "fuzz/Cargo.toml", "-p", "homeadam-fuzz"];
/// The fuzz targets, in the order they run.
const TARGETS: [&str; 4] = ["checkpoint", "step", "replay_config", "replay_safetensors"];
const SEEDS: &str = "fuzz/target/seeds";
/// The crash inputs kept as regression tests, one folder per target (where one was kept).
const REGRESSIONS: &str = "fuzz/regressions";
const LOGS: &str = "fuzz/target/logs";
/// libFuzzer's seed: the same mutations on every run from the same corpus.
const SEED: &str = "-seed=1";

/// Lints the libFuzzer wrappers (their own workspace) in `target_dir`, on stable. Clippy links
/// nothing, so libfuzzer-sys is given an empty archive (`CUSTOM_LIBFUZZER_PATH`) instead of
/// compiling libFuzzer's C++.
pub(crate) fn clippy(target_dir: &Path) {
    let name = "clippy (fuzz)";
    let dir = target_dir.to_string_lossy();
    let args = [
        &["clippy", "--target-dir", &dir],
        PACKAGES,
        &["--all-targets", "--", "-D", "warnings"],
    ]
    .concat();
    let empty = target_dir.join("libfuzzer-empty.a");
    crate::stage_retrying(name, target_dir, || {
        let written = fs::create_dir_all(target_dir).and_then(|()| fs::write(&empty, "!<arch>\n"));
        if let Err(e) = written {
            crate::fail_exit(&format!("{name}: cannot write {}: {e}", empty.display()), 1);
        }
        crate::try_command(
            name,
            Command::new("cargo")
                .args(&args)
                .env("CUSTOM_LIBFUZZER_PATH", &empty),
        )
    });
}

/// Installs the nightly toolchain and cargo-fuzz when missing (not updated: a new nightly
/// would rebuild every fuzz dependency).
fn setup() {
    if !succeeds("rustup", &["run", "nightly", "rustc", "--version"]) {
        run(
            "nightly toolchain",
            "rustup",
            &["toolchain", "install", "nightly", "--profile", "minimal"],
        );
    }
    if !succeeds("cargo", &["fuzz", "--version"]) {
        run("cargo-fuzz", "cargo", &["install", "cargo-fuzz", "--locked"]);
    }
}

fn succeeds(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn create_dir(dir: &str) {
    fs::create_dir_all(dir).unwrap_or_else(|e| {
        eprintln!("xtask: cannot create {dir}: {e}");
        exit(1)
    });
}

/// What one target's run did.
struct Outcome {
    target: &'static str,
    executions: u64,
    per_second: u64,
    crashed: bool,
}

/// `cargo xtask fuzz [SECONDS]`: every target for SECONDS, on its corpus `fuzz/corpus/<target>`,
/// which grows from run to run, the seeds and the kept crash inputs.
pub(crate) fn fuzz(seconds: u64) {
    let start = Instant::now();
    setup();
    // Stable, in the project's workspace. Unoptimized: an optimized build of the library compiles
    // every rule's kernels for the step target, slowly, for seeds that need no speed.
    run(
        "fuzz seeds",
        "cargo",
        &[
            "run",
            "--quiet",
            "-p",
            "homeadam-fuzz-targets",
            "--bin",
            "homeadam-fuzz-seeds",
            "--",
            SEEDS,
        ],
    );
    // No sanitizer: the targets run safe code (the core's only unsafe calls are an AVX2 entry
    // and an FPU instruction), and AddressSanitizer would halve the executions.
    run(
        "fuzz build",
        "cargo",
        &["+nightly", "fuzz", "build", "-s", "none"],
    );
    create_dir(LOGS);
    let outcomes: Vec<Outcome> = TARGETS
        .iter()
        .map(|target| fuzz_target(target, seconds))
        .collect();
    println!(
        "\nxtask: fuzz, {seconds} s per target ({:.0} s in all):",
        start.elapsed().as_secs_f64()
    );
    for o in &outcomes {
        println!(
            "  {:<20} {:>11} executions {:>7} exec/s  {}",
            o.target,
            o.executions,
            o.per_second,
            if o.crashed { "CRASH" } else { "ok" }
        );
    }
    if outcomes.iter().any(|o| o.crashed) {
        eprintln!("xtask: fuzz found a crash: its input is in fuzz/artifacts/<target>/, its log in {LOGS}/");
        exit(1);
    }
}

/// Runs one target for `seconds`; its libFuzzer log goes to `fuzz/target/logs/<target>.log`.
fn fuzz_target(target: &'static str, seconds: u64) -> Outcome {
    // libFuzzer writes what it finds into the first corpus folder and only reads the others.
    let corpus = format!("fuzz/corpus/{target}");
    create_dir(&corpus);
    let mut corpora = vec![corpus, format!("{SEEDS}/{target}")];
    let regressions = format!("{REGRESSIONS}/{target}");
    if Path::new(&regressions).is_dir() {
        corpora.push(regressions);
    }
    let log_path = format!("{LOGS}/{target}.log");
    let time = format!("-max_total_time={seconds}");
    let mut args = vec!["+nightly", "fuzz", "run", "-s", "none", target];
    args.extend(corpora.iter().map(String::as_str));
    args.extend([
        "--",
        SEED,
        &time,
        "-timeout=10",
        "-rss_limit_mb=2048",
        "-print_final_stats=1",
    ]);
    println!("\n== xtask: fuzz {target}: cargo {} > {log_path}", args.join(" "));
    let log = File::create(&log_path).unwrap_or_else(|e| {
        eprintln!("xtask: cannot create {log_path}: {e}");
        exit(1)
    });
    let status = Command::new("cargo")
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .stdout(log.try_clone().expect("a log file handle"))
        .stderr(log)
        .status()
        .unwrap_or_else(|e| {
            eprintln!("xtask: cannot run cargo fuzz: {e}");
            exit(1)
        });
    let text = fs::read_to_string(&log_path).unwrap_or_default();
    let stat = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let outcome = Outcome {
        target,
        executions: stat("stat::number_of_executed_units:"),
        per_second: stat("stat::average_exec_per_sec:"),
        crashed: !status.success(),
    };
    if outcome.crashed {
        let lines: Vec<&str> = text.lines().collect();
        eprintln!("{}", lines[lines.len().saturating_sub(60)..].join("\n"));
        eprintln!("xtask: fuzz {target} failed ({status})");
    }
    println!(
        "== xtask: fuzz {target}: {} executions, {} exec/s, {}",
        outcome.executions,
        outcome.per_second,
        if outcome.crashed { "CRASH" } else { "ok" }
    );
    outcome
}
