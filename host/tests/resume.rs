//! A run killed with SIGKILL and continued with `--resume` ends with the same bits as a run
//! that was never interrupted; a corrupt, foreign or missing checkpoint is a clear error.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use homeadam_host::train::checkpoint::RunCheckpoint;

const EXPERIMENT: &str = "wikitext2-quick";
const OPTIMIZER: &str = "homeadamw-ew";

fn homeadam(out: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_homeadam"));
    c.args(["train", EXPERIMENT, "--optimizers", OPTIMIZER, "--quiet"])
        .args(["--epochs", "2", "--max-batches", "12", "--batch-size", "8"])
        .args(["--checkpoint-every", "3", "--log-every", "5", "--out"])
        .arg(out)
        .args(extra);
    c
}

fn run(out: &Path, extra: &[&str]) -> Output {
    homeadam(out, extra).output().expect("run homeadam")
}

fn checkpoint(out: &Path, file: &str) -> RunCheckpoint {
    RunCheckpoint::load(&out.join(OPTIMIZER).join(file)).expect("checkpoint")
}

/// `metrics.csv` without the `seconds` column (wall-clock time differs between runs).
fn metrics_without_time(out: &Path) -> Vec<String> {
    std::fs::read_to_string(out.join(OPTIMIZER).join("metrics.csv"))
        .expect("metrics.csv")
        .lines()
        .map(|l| {
            let mut f: Vec<&str> = l.split(',').collect();
            f.remove(5);
            f.join(",")
        })
        .collect()
}

#[test]
fn a_killed_run_resumes_to_the_same_bits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (straight, killed) = (dir.path().join("straight"), dir.path().join("killed"));

    let out = run(&straight, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let mut child = homeadam(&killed, &[]).spawn().expect("spawn");
    let ck = killed.join(OPTIMIZER).join("checkpoint.bin");
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
        !killed.join(OPTIMIZER).join("final.bin").exists(),
        "the run finished before it was killed"
    );
    let at_kill = checkpoint(&killed, "checkpoint.bin").meta;
    assert!(at_kill.step < 24, "killed at step {}", at_kill.step);

    let out = run(&killed, &["--resume"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let (a, b) = (
        checkpoint(&straight, "final.bin"),
        checkpoint(&killed, "final.bin"),
    );
    assert_eq!(a.meta.step, 24);
    assert_eq!(a.model.len(), b.model.len());
    for (x, y) in a.model.iter().zip(&b.model) {
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(x.name, y.name);
        assert!(
            bits(&x.values) == bits(&y.values),
            "{} differs after resuming",
            x.name
        );
    }
    assert!(
        a.optimizer == b.optimizer,
        "optimizer state differs after resuming"
    );
    assert_eq!(a.meta.rng, b.meta.rng);
    assert_eq!(metrics_without_time(&straight), metrics_without_time(&killed));
    let iterations =
        |d: &Path| std::fs::read_to_string(d.join(OPTIMIZER).join("iterations.csv")).expect("iterations.csv");
    assert_eq!(iterations(&straight), iterations(&killed));
    assert_eq!(iterations(&straight).lines().count(), 1 + 24 / 5);
}

#[test]
fn bad_checkpoints_are_clear_errors_never_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_dir = dir.path().join("run");

    let out = run(&out_dir, &["--resume"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--resume: no checkpoint at"), "{err}");

    let out = run(&out_dir, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ck = out_dir.join(OPTIMIZER).join("checkpoint.bin");
    let good = std::fs::read(&ck).expect("read");

    let mut corrupt = good.clone();
    let mid = corrupt.len() / 2;
    corrupt[mid] ^= 1;
    std::fs::write(&ck, &corrupt).expect("write");
    let out = run(&out_dir, &["--resume"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(2) && err.contains("CRC-32 mismatch"),
        "{err}"
    );

    std::fs::write(&ck, &good).expect("write");
    let out = run(&out_dir, &["--resume", "--seed", "5"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(2) && err.contains("checkpoint belongs to"),
        "{err}"
    );
}
