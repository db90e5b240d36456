//! `homeadam bench-train` and its PyTorch peer (`host/benches/torch_train.py`) on the CPU at
//! tiny sizes: the same networks (equal parameter counts), the same batch, every phase timed,
//! and `host/benches/compare.py` pairing them into the table `scripts/gpu-check.sh` prints
//! (whose commands `--dry-run` lists here).
//!
//! The PyTorch side runs with the Python named by `HOMEADAM_TORCH_PYTHON` (`cargo xtask test`
//! sets it to a Python with PyTorch, installing one); without it that half says so and passes.

use std::path::{Path, PathBuf};
use std::process::Command;

const EXPERIMENTS: [&str; 3] = ["cifar10-vgg16", "tinyimagenet-resnet34", "wikitext2-transformer"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn ok(command: &mut Command) -> String {
    let out = command.output().expect("runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{command:?} failed:\n{text}");
    text
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).expect("written")).expect("JSON")
}

fn args<'a>(experiment: &'a str, out: &'a Path) -> Vec<&'a str> {
    let out = out.to_str().expect("utf-8 path");
    vec![
        "--experiment",
        experiment,
        "--small",
        "--batch-size",
        "2",
        "--warmup",
        "1",
        "--steps",
        "2",
        "--json",
        out,
    ]
}

#[test]
fn ours_and_pytorch_train_the_same_networks_and_compare_in_one_table() {
    let dir = tempfile::tempdir().unwrap();
    let torch = std::env::var_os("HOMEADAM_TORCH_PYTHON");
    for experiment in EXPERIMENTS {
        let ours = dir.path().join(format!("ours-{experiment}.json"));
        let text = ok(Command::new(env!("CARGO_BIN_EXE_homeadam"))
            .arg("bench-train")
            .args(args(experiment, &ours)));
        assert!(text.contains("per step: data"), "{text}");
        let ours = json(&ours);
        assert_eq!(
            ours["units_per_step"],
            if experiment.contains("transformer") { 70 } else { 2 }
        );
        let Some(python) = &torch else { continue };
        let theirs = dir.path().join(format!("torch-{experiment}.json"));
        ok(Command::new(python)
            .arg(root().join("host/benches/torch_train.py"))
            .args(args(experiment, &theirs)));
        let theirs = json(&theirs);
        for key in ["parameters", "units_per_step", "batch_size", "unit", "steps"] {
            assert_eq!(ours[key], theirs[key], "{experiment}: {key}");
        }
        for phase in ["data", "forward", "backward", "optimizer"] {
            assert!(
                theirs["phases"][phase].as_f64().unwrap() > 0.0,
                "{experiment}: {phase}"
            );
        }
    }
    let Some(python) = &torch else {
        eprintln!("torch_train.py: not run (set HOMEADAM_TORCH_PYTHON to a Python with PyTorch)");
        return;
    };
    let table = ok(Command::new(python)
        .arg(root().join("host/benches/compare.py"))
        .arg(dir.path()));
    for experiment in EXPERIMENTS {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("| {experiment} | 2 | adamw |")))
            .unwrap_or_else(|| panic!("no row for {experiment}:\n{table}"));
        let ratio: f64 = row.split('|').nth(7).unwrap().trim().parse().expect("a ratio");
        assert!(ratio > 0.0, "{row}");
    }
    let (_, host) = table
        .split_once("Host time per step")
        .unwrap_or_else(|| panic!("no host table:\n{table}"));
    for experiment in EXPERIMENTS {
        assert!(
            host.lines()
                .any(|l| l.starts_with(&format!("| {experiment} | 2 | adamw |"))),
            "no host row for {experiment}:\n{table}"
        );
    }
}

#[test]
fn bad_bench_requests_are_clear_errors() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_homeadam"))
            .arg("bench-train")
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, err) = run(&["--experiment", "digits-mlp", "--small"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("not digits-mlp"), "{err}");
    let (code, err) = run(&["--experiment", "cifar10-vgg16", "--steps", "0"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("positive"), "{err}");
}

#[test]
fn the_gpu_script_lists_every_check_in_a_dry_run() {
    let dir = tempfile::tempdir().unwrap();
    let text = ok(Command::new("bash")
        .arg(root().join("scripts/gpu-check.sh"))
        .arg("--dry-run")
        .arg(dir.path().join("no-bundle"))
        .arg(dir.path().join("out")));
    for (experiment, batch) in [
        ("cifar10-vgg16", 64),
        ("cifar10-vgg16", 128),
        ("tinyimagenet-resnet34", 64),
        ("wikitext2-transformer", 32),
    ] {
        for program in ["homeadam bench-train", "torch_train.py"] {
            assert!(
                text.lines().any(|l| l.contains(program)
                    && l.contains(&format!("--experiment {experiment} --batch-size {batch} "))),
                "{program} {experiment} {batch}:\n{text}"
            );
        }
    }
    for binary in ["cuda-gpu", "jetson-gpu", "candle-gpu", "host-gpu", "host-resume"] {
        assert!(text.contains(&format!("/{binary} ")), "{binary}:\n{text}");
    }
}
