//! A run killed with SIGKILL and continued with `--resume` ends with the same bits as a run
//! that was never interrupted; a corrupt, foreign or missing checkpoint is a clear error.
//!
//! `HOMEADAM_TEST_DEVICE` (e.g. `cuda`) runs every invocation on that device, and
//! `HOMEADAM_TEST_BIN` names the `homeadam` binary to run (a test binary built on one machine
//! and run on a GPU machine cannot find its build directory).

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use homeadam_host::train::checkpoint::RunCheckpoint;

/// One optimizer's run of one experiment, and the arguments every invocation gets.
struct Case {
    experiment: &'static str,
    optimizer: &'static str,
    args: &'static [&'static str],
}

/// The killed run: checkpoints every 3 steps, an `iterations.csv` row every 5.
const LM: Case = Case {
    experiment: "wikitext2-quick",
    optimizer: "homeadamw-ew",
    args: &[
        "--epochs",
        "2",
        "--max-batches",
        "12",
        "--batch-size",
        "8",
        "--checkpoint-every",
        "3",
        "--log-every",
        "5",
    ],
};

/// Plain SGD keeps no optimizer state at all; epochs are given per invocation.
const SGD: Case = Case {
    experiment: "digits-mlp",
    optimizer: "sgd",
    args: &["--max-batches", "6"],
};

/// The case of `fixtures/digits-mlp-homeadamw-ew-epoch1-state2.bin`: its checkpoint after
/// epoch 1, written before the optimizer state described its settings (candle envelope
/// version 2).
const STATE_2: Case = Case {
    experiment: "digits-mlp",
    optimizer: "homeadamw-ew",
    args: &["--max-batches", "6"],
};

fn homeadam(case: &Case, out: &Path, extra: &[&str]) -> Command {
    let bin = std::env::var_os("HOMEADAM_TEST_BIN").unwrap_or(env!("CARGO_BIN_EXE_homeadam").into());
    let mut c = Command::new(bin);
    c.args([
        "train",
        case.experiment,
        "--optimizers",
        case.optimizer,
        "--quiet",
    ])
    .args(case.args)
    .arg("--out")
    .arg(out)
    .args(extra);
    if let Some(device) = std::env::var_os("HOMEADAM_TEST_DEVICE") {
        c.arg("--device").arg(device);
    }
    c
}

fn run(case: &Case, out: &Path, extra: &[&str]) -> Output {
    homeadam(case, out, extra).output().expect("run homeadam")
}

fn checkpoint(case: &Case, out: &Path, file: &str) -> RunCheckpoint {
    RunCheckpoint::load(&out.join(case.optimizer).join(file)).expect("checkpoint")
}

/// `metrics.csv` without the `seconds` column (wall-clock time differs between runs).
fn metrics_without_time(case: &Case, out: &Path) -> Vec<String> {
    std::fs::read_to_string(out.join(case.optimizer).join("metrics.csv"))
        .expect("metrics.csv")
        .lines()
        .map(|l| {
            let mut f: Vec<&str> = l.split(',').collect();
            f.remove(5);
            f.join(",")
        })
        .collect()
}

/// Both runs ended with the same model, optimizer state, RNG and metrics.
fn assert_same_end(case: &Case, a: &Path, b: &Path) {
    assert_same_state(case, a, b);
    assert_eq!(metrics_without_time(case, a), metrics_without_time(case, b));
}

/// Both runs ended with the same model, optimizer state and RNG.
fn assert_same_state(case: &Case, a: &Path, b: &Path) {
    let (x, y) = (checkpoint(case, a, "final.bin"), checkpoint(case, b, "final.bin"));
    assert_eq!(x.meta.step, y.meta.step);
    assert_eq!(x.model.len(), y.model.len());
    for (x, y) in x.model.iter().zip(&y.model) {
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(x.name, y.name);
        assert!(
            bits(&x.values) == bits(&y.values),
            "{} differs after resuming",
            x.name
        );
    }
    assert!(
        x.optimizer == y.optimizer,
        "optimizer state differs after resuming"
    );
    assert_eq!(x.meta.rng, y.meta.rng);
}

#[test]
fn a_killed_run_resumes_to_the_same_bits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (straight, killed) = (dir.path().join("straight"), dir.path().join("killed"));

    let out = run(&LM, &straight, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let mut child = homeadam(&LM, &killed, &[]).spawn().expect("spawn");
    let ck = killed.join(LM.optimizer).join("checkpoint.bin");
    let start = Instant::now();
    while !ck.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no checkpoint appeared"
        );
        assert!(
            child.try_wait().expect("wait").is_none(),
            "the run ended before its first checkpoint"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
    assert!(
        !killed.join(LM.optimizer).join("final.bin").exists(),
        "the run finished before it was killed"
    );
    let at_kill = checkpoint(&LM, &killed, "checkpoint.bin").meta;
    assert!(at_kill.step < 24, "killed at step {}", at_kill.step);

    let out = run(&LM, &killed, &["--resume"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    assert_eq!(checkpoint(&LM, &straight, "final.bin").meta.step, 24);
    assert_same_end(&LM, &straight, &killed);
    let iterations = |d: &Path| {
        std::fs::read_to_string(d.join(LM.optimizer).join("iterations.csv")).expect("iterations.csv")
    };
    assert_eq!(iterations(&straight), iterations(&killed));
    assert_eq!(iterations(&straight).lines().count(), 1 + 24 / 5);
}

/// Plain SGD's checkpoint holds no state but the step count, and resumes: 2 epochs, then
/// `--epochs 4 --resume`, end as 4 straight epochs.
#[test]
fn plain_sgd_resumes_to_the_same_bits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (straight, resumed) = (dir.path().join("straight"), dir.path().join("resumed"));
    for (out, extra) in [
        (&straight, &["--epochs", "4"][..]),
        (&resumed, &["--epochs", "2"][..]),
        (&resumed, &["--epochs", "4", "--resume"][..]),
    ] {
        let o = run(&SGD, out, extra);
        assert!(
            o.status.success(),
            "{extra:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    assert_eq!(checkpoint(&SGD, &resumed, "final.bin").meta.epoch, 4);
    assert_same_end(&SGD, &straight, &resumed);
}

/// A checkpoint of the previous optimizer-state format resumes, to the same bits each time. (Its
/// first epoch was trained with candle's CPU ops, before the host's own, so a straight run of
/// this build no longer reaches its state; homeadam-candle's tests hold the version-2 envelope's
/// load to the values it saved.)
#[test]
fn a_checkpoint_of_the_previous_state_format_resumes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/digits-mlp-homeadamw-ew-epoch1-state2.bin");
    let resumed: Vec<_> = ["first", "second"]
        .iter()
        .map(|name| {
            let out = dir.path().join(name);
            std::fs::create_dir_all(out.join(STATE_2.optimizer)).expect("mkdir");
            std::fs::copy(&fixture, out.join(STATE_2.optimizer).join("checkpoint.bin")).expect("copy");
            let o = run(&STATE_2, &out, &["--epochs", "2", "--resume"]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            out
        })
        .collect();
    assert_eq!(checkpoint(&STATE_2, &resumed[0], "final.bin").meta.step, 12);
    assert_same_state(&STATE_2, &resumed[0], &resumed[1]);
}

#[test]
fn bad_checkpoints_are_clear_errors_never_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_dir = dir.path().join("run");

    let out = run(&LM, &out_dir, &["--resume"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--resume: no checkpoint at"), "{err}");

    let out = run(&LM, &out_dir, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ck = out_dir.join(LM.optimizer).join("checkpoint.bin");
    let good = std::fs::read(&ck).expect("read");

    let mut corrupt = good.clone();
    let mid = corrupt.len() / 2;
    corrupt[mid] ^= 1;
    std::fs::write(&ck, &corrupt).expect("write");
    let out = run(&LM, &out_dir, &["--resume"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(2) && err.contains("CRC-32 mismatch"),
        "{err}"
    );

    std::fs::write(&ck, &good).expect("write");
    let out = run(&LM, &out_dir, &["--resume", "--seed", "5"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(2) && err.contains("checkpoint belongs to"),
        "{err}"
    );
}
