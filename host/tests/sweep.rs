//! `homeadam sweep` on a tiny budget of the shipped digits: the chosen configuration is the
//! best on validation, the summary's interval is the hand-computed Student-t one, running the
//! same command again writes the same `sweep.csv`, the validation split is not the test
//! split, and bad input is a clear error.

use std::path::Path;
use std::process::Command;

use candle_core::Device;
use homeadam_host::preset::Preset;
use homeadam_host::report::read_metrics;
use homeadam_host::sweep::{run_sweep, SweepOptions};
use homeadam_host::train::experiments::{BuildOptions, EvalSplit, Experiment};

fn options(out: &Path) -> SweepOptions {
    SweepOptions {
        experiment: Experiment::DigitsMlp,
        optimizers: vec!["sgdm".into(), "homeadamw-ew".into()],
        budget: 3,
        budget_per_knob: None,
        widen: 0,
        seeds: 3,
        seed: 0,
        epochs: 1,
        max_batches: Some(8),
        validation_fraction: 0.2,
        ranges: Vec::new(),
        jobs: 2,
        out_dir: out.to_path_buf(),
        progress: false,
        build: BuildOptions::small_on(Device::Cpu),
    }
}

/// `sweep.csv`'s rows as (optimizer, trial, lr, validation loss, validation accuracy, chosen).
fn rows(csv: &str) -> Vec<(String, usize, f64, f64, f64, bool)> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (lr, loss, acc, chosen) = (
        col("lr"),
        col("validation_loss"),
        col("validation_acc"),
        col("chosen"),
    );
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (
                f[0].to_string(),
                f[1].parse().unwrap(),
                f[lr].parse().unwrap(),
                f[loss].parse().unwrap(),
                f[acc].parse().unwrap(),
                f[chosen] == "1",
            )
        })
        .collect()
}

#[test]
fn a_tiny_sweep_chooses_the_best_on_validation_and_runs_again_to_the_same_files() {
    let dir = tempfile::tempdir().unwrap();
    let o = options(dir.path());
    run_sweep(&o).unwrap();
    let csv = std::fs::read_to_string(dir.path().join("sweep.csv")).unwrap();
    let rows = rows(&csv);
    assert_eq!(rows.len(), 6);
    let best = Preset::from_json(&std::fs::read_to_string(dir.path().join("best.json")).unwrap()).unwrap();
    let summary = std::fs::read_to_string(dir.path().join("summary.md")).unwrap();
    for name in &o.optimizers {
        let mine: Vec<_> = rows.iter().filter(|r| &r.0 == name).collect();
        assert_eq!(mine.iter().map(|r| r.1).collect::<Vec<_>>(), [0, 1, 2]);
        // The highest validation accuracy, then the lowest loss, then the first.
        let top = mine
            .iter()
            .copied()
            .reduce(|a, b| {
                if b.4 > a.4 || (b.4 == a.4 && b.3 < a.3) {
                    b
                } else {
                    a
                }
            })
            .unwrap();
        let chosen: Vec<_> = mine.iter().filter(|r| r.5).collect();
        assert_eq!(chosen.len(), 1, "{name}");
        assert_eq!(chosen[0].1, top.1, "{name}: {csv}");
        assert_eq!(best.config(name, 36).unwrap().lr, top.2, "{name}");

        // The test accuracies of the three seeds, and their t interval by hand (2 degrees of
        // freedom: t = 4.302652730).
        let acc: Vec<f64> = (0..3)
            .map(|s| {
                let path = dir.path().join(format!("final/{name}/seed-{s}/metrics.csv"));
                read_metrics(&path).unwrap().1.last().unwrap().test_quality
            })
            .collect();
        let mean = acc.iter().sum::<f64>() / 3.0;
        let sd = (acc.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
        let half = 4.302652730 * sd / 3f64.sqrt();
        let row = summary
            .lines()
            .find(|l| l.starts_with(&format!("| {name} |")))
            .unwrap();
        let expected = format!(
            "{mean:.4} ± {sd:.4} | [{:.4}, {:.4}] | 3 |",
            mean - half,
            mean + half
        );
        assert!(row.ends_with(&expected), "{row}\nexpected …{expected}");
    }
    assert!(dir.path().join("sweep.png").exists());

    // A trial and a test run lost (as if killed): the same command runs them again and
    // writes the same files.
    std::fs::remove_file(dir.path().join("trials/trial-1/sgdm/final.bin")).unwrap();
    std::fs::remove_dir_all(dir.path().join("final/homeadamw-ew/seed-2")).unwrap();
    let finished = dir.path().join("trials/trial-0/sgdm/metrics.csv");
    let before = std::fs::metadata(&finished).unwrap().modified().unwrap();
    run_sweep(&o).unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("sweep.csv")).unwrap(),
        csv
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("summary.md")).unwrap(),
        summary
    );
    assert_eq!(std::fs::metadata(&finished).unwrap().modified().unwrap(), before);

    // `train --preset best.json` trains with the chosen configuration; another experiment's
    // preset is refused.
    let bin = std::env::var_os("HOMEADAM_TEST_BIN").unwrap_or(env!("CARGO_BIN_EXE_homeadam").into());
    let best_json = dir.path().join("best.json");
    let train = |experiment: &str| {
        Command::new(&bin)
            .args([
                "train",
                experiment,
                "--optimizers",
                "sgdm",
                "--epochs",
                "1",
                "--max-batches",
                "2",
            ])
            .args(["--quiet", "--preset", best_json.to_str().unwrap(), "--out"])
            .arg(dir.path().join("train"))
            .output()
            .unwrap()
    };
    let ok = train("digits-mlp");
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let refused = train("wikitext2-quick");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("digits_quick's"),
        "{stderr}"
    );

    // Another command in the same directory is refused.
    let err = run_sweep(&SweepOptions { budget: 4, ..o }).unwrap_err();
    assert!(err.to_string().contains("sweep.json"), "{err:#}");
}

#[test]
fn a_budget_per_knob_gives_a_many_knob_rule_more_trials_and_reports_the_equal_budgets_choice() {
    let dir = tempfile::tempdir().unwrap();
    let o = SweepOptions {
        budget: 2,
        budget_per_knob: Some(1),
        seeds: 2,
        ..options(dir.path())
    };
    let outcome = run_sweep(&o).unwrap();
    // SGDM reads η alone: the equal budget; HomeAdamW-ew reads five knobs: five trials.
    let [sgdm, ew] = &outcome.optimizers[..] else {
        panic!("two optimizers")
    };
    assert_eq!((sgdm.trials.len(), sgdm.equal_best), (2, None));
    assert_eq!(ew.trials.len(), 5);
    let equal = ew.equal_best.unwrap();
    assert!(equal < 2);
    let summary = std::fs::read_to_string(dir.path().join("summary.md")).unwrap();
    assert!(
        summary.contains(&format!("- homeadamw-ew: of its first 2 trials, #{equal}")),
        "{summary}"
    );
    assert!(!summary.contains("- sgdm: of its first"));
}

#[test]
fn a_best_trial_on_the_edge_of_its_range_widens_the_range_and_draws_as_many_trials_again() {
    let dir = tempfile::tempdir().unwrap();
    // Every draw from a range this narrow rounds to its low end (three digits): an edge.
    let narrow = homeadam_host::sweep::space::Range::Between {
        low: 1e-6,
        high: 1.001e-6,
    };
    let o = SweepOptions {
        optimizers: vec!["sgdm".into()],
        budget: 2,
        widen: 3,
        seeds: 1,
        ranges: vec![(homeadam_host::sweep::space::Axis::Lr, narrow)],
        ..options(dir.path())
    };
    let outcome = run_sweep(&o).unwrap();
    let sgdm = &outcome.optimizers[0];
    // One round widened the low end by half the log width (to three digits, outward); 1e-6
    // then lies inside, so no more.
    assert_eq!(sgdm.trials.len(), 4);
    assert_eq!(sgdm.widened.len(), 1);
    let w = &sgdm.widened[0];
    assert_eq!((w.round, w.from), (1, (1e-6, 1.001e-6)));
    assert_eq!(w.to, (9.99e-7, 1.001e-6));
    assert!(sgdm.edges.is_empty());
    let summary = std::fs::read_to_string(dir.path().join("summary.md")).unwrap();
    assert!(
        summary.contains("- sgdm: lr from 1e-6..1.001e-6 to 9.99e-7..1.001e-6"),
        "{summary}"
    );
    assert!(summary.contains("for trials #2–#3"), "{summary}");
    // Another number of rounds continues the same directory with the same trials.
    let again = run_sweep(&SweepOptions {
        widen: 1,
        ..o.clone()
    })
    .unwrap();
    assert_eq!(again.optimizers[0].trials, sgdm.trials);
    // Final runs of another trial than the one chosen now are run again.
    let chosen = dir.path().join("final").join("sgdm").join("chosen.json");
    let text = std::fs::read_to_string(&chosen).unwrap();
    assert!(
        text.contains(&format!("\"index\": {}", sgdm.chosen().trial.index)),
        "{text}"
    );
    std::fs::write(&chosen, "{\"index\": 99, \"knobs\": {}}\n").unwrap();
    let metrics = dir.path().join("final/sgdm/seed-0/metrics.csv");
    std::fs::write(&metrics, "stale").unwrap();
    let rerun = run_sweep(&o).unwrap();
    assert_eq!(rerun.optimizers[0].finals, sgdm.finals);
    assert_eq!(std::fs::read_to_string(&chosen).unwrap(), text);
}

#[test]
fn trials_validate_on_a_part_of_the_training_split_and_never_on_the_test_split() {
    let build = options(Path::new(".")).build;
    let digits = Experiment::DigitsMlp;
    let test = digits.build(&build).unwrap();
    let validation = digits.build_for(&build, EvalSplit::Validation(0.2)).unwrap();
    // 359 test images; 287 of the 1,438 training images held out (per class, rounded), 1,151
    // left to train on.
    assert_eq!(test.data.test_batches(), 359usize.div_ceil(32));
    assert_eq!(test.data.train_batches(), 1438usize.div_ceil(32));
    assert_eq!(validation.data.test_batches(), 287usize.div_ceil(32));
    assert_eq!(validation.data.train_batches(), 1151usize.div_ceil(32));
    // The CNN reads the same splits, as images of one channel.
    let cnn = Experiment::DigitsCnn
        .build_for(&build, EvalSplit::Validation(0.2))
        .unwrap();
    assert_eq!(cnn.data.test_batches(), validation.data.test_batches());
    assert_eq!(cnn.data.train_batches(), validation.data.train_batches());
    let batch = cnn.data.test_batch(0).unwrap();
    assert_eq!(batch.input.dims(), &[32, 1, 8, 8]);
    let logits = (cnn.new_model)(0).unwrap().forward(&batch.input, false).unwrap();
    assert_eq!(logits.dims(), &[32, 10]);
    let err = Experiment::Cifar10Vgg16
        .build_for(&build, EvalSplit::Validation(0.2))
        .err()
        .unwrap();
    assert!(err.to_string().contains("validation split"), "{err:#}");
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let run = |args: &[&str]| {
        let bin = std::env::var_os("HOMEADAM_TEST_BIN").unwrap_or(env!("CARGO_BIN_EXE_homeadam").into());
        let o = Command::new(bin)
            .args(["sweep", "digits-mlp", "--out", out, "--quiet"])
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(
            !o.status.success() && !stderr.contains("panicked"),
            "{args:?}: {stderr}"
        );
        stderr
    };
    for (args, needle) in [
        (
            &["--optimizers", "adamx", "--budget", "2"][..],
            "unknown optimizer \"adamx\"",
        ),
        (
            &["--optimizers", "adamw", "--budget", "0"],
            "--budget must be at least 1",
        ),
        (
            &["--optimizers", "adamw", "--budget", "2", "--budget-per-knob", "0"],
            "--budget-per-knob must be at least 1",
        ),
        (
            &["--optimizers", "adamw", "--budget", "2", "--seeds", "0"],
            "--seeds must be at least 1",
        ),
        (
            &["--optimizers", "adamw", "--budget", "2", "--range", "lr=1:0.1"],
            "0 < low < high",
        ),
        (
            &["--optimizers", "adamw", "--budget", "2", "--range", "lr=x0.5"],
            "above 1",
        ),
        (
            &["--optimizers", "adamw", "--budget", "2", "--range", "beta=1:2"],
            "unknown knob",
        ),
        (
            &["--optimizers", "adamw", "--budget", "2", "--range", "lr"],
            "KNOB=LOW:HIGH",
        ),
        (
            &[
                "--optimizers",
                "adamw",
                "--budget",
                "2",
                "--validation-fraction",
                "1",
            ],
            "strictly between 0 and 1",
        ),
    ] {
        let stderr = run(args);
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
    assert!(!dir.path().join("sweep.json").exists());
}
