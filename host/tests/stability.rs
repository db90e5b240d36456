//! `homeadam stability` on the CNN of the digits and the offline LM, CI-sized (a few minibatches):
//! the runs write their rows, S⁽ⁱ⁾ = S gives the same model, a list of replaced examples gives
//! the rows of separate runs, and bad input is a clear error.

use std::path::{Path, PathBuf};
use std::process::Command;

use candle_core::Device;
use homeadam_host::data::batches::EpochOrder;
use homeadam_host::report::{read_stability, StabilityRecord};
use homeadam_host::train::experiments::Experiment;
use homeadam_host::train::stability::{lockstep, stability_sets, StabilityOptions};

/// Runs `homeadam stability ARGS --quiet --out OUT`; stdout and stderr, and whether it succeeded.
fn stability(args: &[&str], out: &Path) -> (bool, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_homeadam"))
        .arg("stability")
        .args(args)
        .args(["--quiet", "--out"])
        .arg(out)
        .output()
        .expect("run homeadam");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (o.status.success(), text(&o.stdout), text(&o.stderr))
}

fn rows(path: &Path) -> Vec<StabilityRecord> {
    read_stability(path).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()))
}

/// A CNN run of 2 minibatches and an LM run of 2 windows per column (one row per minibatch),
/// their losses on a few minibatches.
const CNN: [&str; 10] = [
    "--experiment",
    "digits-cnn",
    "--optimizers",
    "adamw-srf",
    "--epochs",
    "1",
    "--max-batches",
    "2",
    "--eval-subset",
    "256",
];
const LM: [&str; 12] = [
    "--experiment",
    "wikitext2-quick",
    "--optimizers",
    "homeadamw-ew",
    "--epochs",
    "1",
    "--max-batches",
    "2",
    "--every-batches",
    "1",
    "--eval-subset",
    "1024",
];

/// Examples of S that the CNN's first two minibatches (seed 0) read: the first one's first
/// example, and one of the second's.
fn seen_by_the_cnn() -> [usize; 2] {
    let order = EpochOrder::shuffled(1_437, 0, 0);
    let order = order.indices();
    [order[0], order[40]]
}

#[test]
fn the_cnn_and_the_lm_write_their_rows_and_run_description() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The LM's example 5: column 2, window 1 (16 columns of 2 windows).
    let cnn_example = seen_by_the_cnn()[0].to_string();
    for (args, optimizer, replace, expected_rows, examples) in [
        (&CNN[..], "adamw-srf", cnn_example.as_str(), 1, 1_437),
        (&LM[..], "homeadamw-ew", "5", 2, 32),
    ] {
        let out = dir.path().join(args[1]);
        let mut all = args.to_vec();
        all.extend(["--replace", replace]);
        let (ok, stdout, stderr) = stability(&all, &out);
        assert!(ok, "{stdout}\n{stderr}");
        let found = rows(&out.join(optimizer).join("stability.csv"));
        assert_eq!(found.len(), expected_rows, "{found:?}");
        for (k, r) in found.iter().enumerate() {
            assert_eq!(r.epoch as usize, k + 1);
            assert!(r.param_distance >= 0.0 && r.param_distance.is_finite(), "{r:?}");
            assert!(r.train_loss.is_some_and(f64::is_finite), "{r:?}");
        }
        assert!(found[expected_rows - 1].param_distance > 0.0, "{found:?}");
        let meta: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join("stability.json")).expect("stability.json"),
        )
        .expect("json");
        assert_eq!(meta["examples"], examples, "{meta}");
        assert_eq!(meta["replace"].to_string(), replace, "{meta}");
        assert_eq!(meta["steps_per_epoch"], 2, "{meta}");
        assert_eq!(meta["steps_per_row"], 2 / expected_rows, "{meta}");
        assert!(
            meta["min_v_hat"][optimizer].as_f64().is_some_and(|v| v >= 0.0),
            "{meta}"
        );
        assert!(out.join("figures/stability.png").is_file());
    }
}

fn options(
    experiment: Experiment,
    optimizers: &[&str],
    replace: Vec<usize>,
    out: PathBuf,
) -> StabilityOptions {
    StabilityOptions {
        experiment,
        data_dir: None,
        small: false,
        vgg: None,
        decay_mask: None,
        preset: None,
        optimizers: optimizers.iter().map(|s| s.to_string()).collect(),
        epochs: 1,
        seed: 3,
        replace,
        max_batches: Some(2),
        every_batches: Some(1),
        eval_subset: Some(1_024),
        out_dir: out,
        progress: false,
        device: Device::Cpu,
    }
}

/// Replacing an example by itself: S⁽ⁱ⁾ = S, and the lockstep model is θ(S) bit for bit.
#[test]
fn replacing_an_example_by_itself_gives_distance_zero() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (experiment, optimizer) in [
        (Experiment::DigitsCnn, "adamw-srf"),
        (Experiment::WikiText2Quick, "homeadamw"),
    ] {
        let o = options(
            experiment,
            &[optimizer],
            vec![0],
            dir.path().join(experiment.name()),
        );
        let mut sets = stability_sets(&o).expect("sets");
        sets.on_s_i[0] = stability_sets(&o).expect("sets").on_s;
        let (runs, _) = lockstep(&o, sets).expect("lockstep");
        let found = &runs[0].summaries[0].rows;
        assert_eq!(found.len(), 2);
        for r in found {
            assert_eq!(
                (r.param_distance, r.train_loss_gap, r.test_loss_gap),
                (0.0, 0.0, 0.0),
                "{r:?}"
            );
            assert!(r.travelled.is_some_and(|t| t > 0.0), "{r:?}");
        }
    }
}

/// `--replace I,J` trains θ(S) once and writes `replaceI/` and `replaceJ/`, each the
/// `stability.csv` that `--replace I` and `--replace J` write on their own.
#[test]
fn a_list_of_replaced_examples_gives_the_rows_of_separate_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cnn = seen_by_the_cnn();
    // The LM's examples 4 and 9: column 2 window 0, column 4 window 1.
    for (args, optimizer, examples) in [(&CNN[..], "adamw-srf", cnn), (&LM[..], "homeadamw-ew", [4, 9])] {
        let base = dir.path().join(args[1]);
        let run = |replace: &str, out: &Path| {
            let mut all = args.to_vec();
            all.extend(["--replace", replace]);
            let (ok, stdout, stderr) = stability(&all, out);
            assert!(ok, "{stdout}\n{stderr}");
        };
        run(&format!("{},{}", examples[0], examples[1]), &base.join("list"));
        for i in examples {
            let single = base.join(format!("single{i}"));
            run(&i.to_string(), &single);
            let read =
                |d: &Path| std::fs::read_to_string(d.join(optimizer).join("stability.csv")).expect("csv");
            let listed = base.join("list").join(format!("replace{i}"));
            assert_eq!(read(&listed), read(&single), "{optimizer}, example {i}");
            let last = *rows(&single.join(optimizer).join("stability.csv"))
                .last()
                .expect("a row");
            assert!(last.param_distance > 0.0, "{last:?}");
        }
    }
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lm = |extra: &[&'static str]| [&LM[..], extra].concat();
    let cnn = |extra: &[&'static str]| [&CNN[..], extra].concat();
    let cases: [(Vec<&str>, &str); 6] = [
        (
            cnn(&["--replace", "0,1437"]),
            "--replace 1437: S has 1437 examples",
        ),
        (lm(&["--replace", "32"]), "--replace 32: S has 32 windows"),
        (cnn(&["--replace", "3,7,3"]), "example 3 is given twice"),
        (
            vec!["--experiment", "tinyimagenet-resnet34", "--epochs", "1"],
            "tinyimagenet-resnet34 is not supported",
        ),
        (
            vec![
                "--experiment",
                "wikitext2-quick",
                "--max-batches",
                "3",
                "--every-batches",
                "2",
            ],
            "--every-batches 2 must divide the 3 minibatches",
        ),
        (
            vec!["--experiment", "digits-cnn", "--max-batches", "0"],
            "--max-batches",
        ),
    ];
    for (k, (args, expected)) in cases.iter().enumerate() {
        let (ok, stdout, stderr) = stability(args, &dir.path().join(k.to_string()));
        assert!(!ok && stderr.contains(expected), "{args:?}: {stdout}\n{stderr}");
    }
}
