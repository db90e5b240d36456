//! Tests of the report: CSV round trips, resuming, malformed files, figures and the table.

use std::fs;
use std::path::{Path, PathBuf};

use super::*;

fn record(epoch: u32, loss: f64, acc: f64) -> EpochRecord {
    EpochRecord {
        epoch,
        train_loss: loss,
        train_quality: acc,
        test_loss: loss * 1.1,
        test_quality: acc * 0.95,
        seconds: 12.5,
        home_share: None,
        rho: Some(1e-9 / f64::from(epoch)),
        rho_active: None,
        tau: None,
        clean_train_loss: None,
        clean_train_quality: None,
    }
}

/// The columns of a `metrics.csv` of `task` without the clean training evaluation.
fn cols(task: Task) -> MetricsColumns {
    MetricsColumns::new(task, false)
}

fn write_metrics(dir: &Path, optimizer: &str, task: Task, rows: &[EpochRecord]) -> PathBuf {
    let path = optimizer_file(dir, optimizer, run::METRICS_FILE);
    let mut w = MetricsWriter::create(&path, cols(task)).unwrap();
    for r in rows {
        w.append(r).unwrap();
    }
    path
}

fn err_of<T: std::fmt::Debug>(r: anyhow::Result<T>) -> String {
    format!("{:#}", r.unwrap_err())
}

#[test]
fn metrics_round_trip_keeps_every_value() {
    let dir = tempfile::tempdir().unwrap();
    let mut rows: Vec<EpochRecord> = (1..=3).map(|e| record(e, 2.0 / f64::from(e), 0.3)).collect();
    rows[1].home_share = Some(0.25);
    rows[1].rho_active = Some(3e-9);
    rows[1].tau = Some(2f64.powi(-30));
    rows[2].rho = None;
    rows[2].train_loss = 0.1 + 0.2; // not exactly representable in short decimal
    let path = write_metrics(dir.path(), "Adam", Task::Classification, &rows);
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.starts_with(
        "epoch,train_loss,train_acc,test_loss,test_acc,seconds,home_share,rho,rho_active,tau\n"
    ));
    assert_eq!(read_metrics(&path).unwrap(), (Task::Classification, rows));
}

#[test]
fn language_model_header_and_non_finite_values() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = record(1, 7.0, 1100.0);
    r.train_loss = f64::NAN;
    r.test_quality = f64::INFINITY;
    r.rho = Some(f64::NEG_INFINITY);
    let path = write_metrics(dir.path(), "SGD", Task::LanguageModel, &[r]);
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("epoch,train_loss,train_ppl,test_loss,test_ppl,"));
    assert!(text.contains("NaN") && text.contains(",inf,") && text.contains("-inf"));
    let (task, back) = read_metrics(&path).unwrap();
    assert_eq!(task, Task::LanguageModel);
    assert!(back[0].train_loss.is_nan());
    assert_eq!(back[0].test_quality, f64::INFINITY);
    assert_eq!(back[0].rho, Some(f64::NEG_INFINITY));
}

#[test]
fn resume_cuts_rows_after_the_resumed_epoch_and_a_torn_line() {
    let dir = tempfile::tempdir().unwrap();
    let rows: Vec<EpochRecord> = (1..=5).map(|e| record(e, 1.0, 0.5)).collect();
    let path = write_metrics(dir.path(), "AdamW", Task::Classification, &rows);
    // A run killed while writing epoch 6.
    let mut text = fs::read_to_string(&path).unwrap();
    text.push_str("6,0.4,0.");
    fs::write(&path, &text).unwrap();

    let mut w = MetricsWriter::resume(&path, cols(Task::Classification), 10).unwrap();
    assert_eq!(w.last_key(), Some(5));
    w.append(&record(6, 0.5, 0.6)).unwrap();
    let (_, back) = read_metrics(&path).unwrap();
    assert_eq!(
        back.iter().map(|r| r.epoch).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6]
    );

    // Resumed from the checkpoint of epoch 3: epochs 4.. are recomputed, not duplicated.
    let mut w = MetricsWriter::resume(&path, cols(Task::Classification), 3).unwrap();
    assert!(
        w.append(&record(3, 0.1, 0.9)).is_err(),
        "epoch 3 is already there"
    );
    w.append(&record(4, 0.1, 0.9)).unwrap();
    let (_, back) = read_metrics(&path).unwrap();
    assert_eq!(back.len(), 4);
    assert_eq!(back[3], record(4, 0.1, 0.9));

    // Resuming a missing file creates it; resuming as another task is refused.
    let fresh = dir.path().join("new/metrics.csv");
    MetricsWriter::resume(&fresh, cols(Task::LanguageModel), 7).unwrap();
    assert_eq!(read_metrics(&fresh).unwrap(), (Task::LanguageModel, vec![]));
    let e = err_of(MetricsWriter::resume(&path, cols(Task::LanguageModel), 3));
    assert!(e.contains("Classification"), "{e}");
}

#[test]
fn writer_rejects_bad_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.csv");
    let mut w = MetricsWriter::create(&path, cols(Task::Classification)).unwrap();
    w.append(&record(2, 1.0, 0.5)).unwrap();
    assert!(err_of(w.append(&record(2, 1.0, 0.5))).contains("does not come after"));
    assert!(err_of(w.append(&record(3, 1.0, 87.5))).contains("percentage"));
    let mut bad = record(3, 1.0, 0.5);
    bad.home_share = Some(1.5);
    assert!(err_of(w.append(&bad)).contains("home_share"));
    assert_eq!(read_metrics(&path).unwrap().1.len(), 1);
}

#[test]
fn malformed_files_name_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("metrics.csv");
    let header = "epoch,train_loss,train_acc,test_loss,test_acc,seconds,home_share,rho,rho_active,tau\n";
    let cases = [
        ("", "line 1"),
        ("epoch,loss\n1,2\n", "line 1"),
        ("1,0.5,0.5,0.5,0.5,1,,,,\n2,0.4,abc,0.5,0.5,1,,,,\n", "line 3"),
        ("1,0.5,0.5,0.5,0.5,1,,,,\n\n2,0.4,0.5,0.5\n", "line 4"),
        ("1,0.5,0.5,0.5,0.5,1,,,,\n1,0.4,0.5,0.5,0.5,1,,,,\n", "line 3"),
        ("x,0.5,0.5,0.5,0.5,1,,,,\n", "line 2"),
        ("1,0.5,50,0.5,0.5,1,,,,\n", "line 2"),
        ("1,0.5,0.5,0.5,0.5,1,,,x,\n", "line 2"),
        ("1,0.5,0.5,0.5,0.5,1,,,\n", "line 2"),
    ];
    for (i, (body, want)) in cases.iter().enumerate() {
        let text = if i < 2 {
            body.to_string()
        } else {
            format!("{header}{body}")
        };
        fs::write(&path, text).unwrap();
        let e = err_of(read_metrics(&path));
        assert!(e.contains(want), "case {i}: {e}");
        assert!(e.contains("metrics.csv"), "case {i}: {e}");
    }
    fs::write(&path, [0xff, 0xfe]).unwrap();
    assert!(err_of(read_metrics(&path)).contains("UTF-8"));
    assert!(read_metrics(&dir.path().join("missing.csv")).is_err());
}

#[test]
fn iterations_and_stability_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("iterations.csv");
    let rows: Vec<IterationRecord> = (1..=4)
        .map(|i| IterationRecord {
            step: 100 * i,
            train_loss: 5.0 / i as f64,
            home_share: (i % 2 == 0).then_some(0.5),
            rho: Some(1e-12),
            rho_active: None,
            tau: None,
            test_loss: None,
            test_quality: None,
        })
        .collect();
    let columns = IterationColumns::new(None);
    let mut w = IterationWriter::create(&path, columns).unwrap();
    for r in &rows {
        w.append(r).unwrap();
    }
    assert_eq!(read_iterations(&path).unwrap(), (None, rows.clone()));
    let mut w = IterationWriter::resume(&path, columns, 250).unwrap();
    w.append(&rows[2]).unwrap();
    assert_eq!(read_iterations(&path).unwrap(), (None, rows[..3].to_vec()));

    let path = dir.path().join("stability.csv");
    let rows: Vec<StabilityRecord> = (1..=3)
        .map(|e| StabilityRecord {
            epoch: e,
            param_distance: 0.01 * f64::from(e),
            train_loss_gap: 0.001,
            test_loss_gap: 0.002,
            generalization_gap: -0.05,
            travelled: Some(0.5 * f64::from(e)),
            train_loss: Some(1.0 / f64::from(e)),
        })
        .collect();
    let mut w = StabilityWriter::create(&path, true).unwrap();
    for r in &rows {
        w.append(r).unwrap();
    }
    assert_eq!(read_stability(&path).unwrap(), rows);
    assert_eq!(rows[1].relative_distance(), Some(0.02));
    // The first layout, without the distance travelled and the training loss, still reads.
    fs::write(
        &path,
        "epoch,param_distance,train_loss_gap,test_loss_gap,generalization_gap\n1,0.5,0,0,0\n",
    )
    .unwrap();
    let old = read_stability(&path).unwrap();
    assert_eq!(
        (old[0].travelled, old[0].train_loss, old[0].relative_distance()),
        (None, None, None)
    );
    fs::write(
        &path,
        "epoch,param_distance,train_loss_gap,test_loss_gap,generalization_gap\n1,-1,0,0,0\n",
    )
    .unwrap();
    assert!(err_of(read_stability(&path)).contains("line 2"));
}

/// Draws the figures of the run in `dir`, each a readable figure ([`assert_figure`]), and
/// returns their file names.
fn draw_readable_figures(dir: &Path) -> Vec<String> {
    let written = draw_figures(dir).unwrap();
    let run = load_run(dir).unwrap();
    let colours: Vec<[u8; 3]> = run
        .optimizers
        .iter()
        .map(|o| {
            let c = style::style_of(&o.name).colour;
            [c.0, c.1, c.2]
        })
        .collect();
    for path in &written {
        assert!(path.starts_with(dir.join("figures")));
        assert_figure(path, &colours);
    }
    written
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

/// Draws the figures of the run in `dir`, which must be `curves.png`, `home.png` and
/// `iterations.png`, each a readable figure.
fn draw_curves_home_and_iterations(dir: &Path) {
    assert_eq!(
        draw_readable_figures(dir),
        ["curves.png", "home.png", "iterations.png"]
    );
}

/// Checks that `path` is a decodable PNG of a real figure: large, with plenty of non-white pixels
/// and some pixels of the optimizers' `colours`.
fn assert_figure(path: &Path, colours: &[[u8; 3]]) {
    let bytes = fs::metadata(path).unwrap().len();
    assert!(bytes > 20_000, "{}: only {bytes} bytes", path.display());
    let image = image::open(path).unwrap().to_rgb8();
    assert!(image.width() >= 700 && image.height() >= 500);
    let pixels = image.pixels().count();
    let inked = image.pixels().filter(|p| p.0 != [255, 255, 255]).count();
    assert!(inked * 50 > pixels, "{}: almost blank", path.display());
    let lines = image.pixels().filter(|p| colours.contains(&p.0)).count();
    assert!(lines > 100, "{}: no optimizer's line", path.display());
}

/// A CIFAR-like run: three optimizers, one of them diverging (NaN, then inf).
fn classification_run(dir: &Path) {
    let epochs = 30;
    for (k, name) in ["AdamW", "AdamW-srf", "HomeAdamW"].iter().enumerate() {
        let rows: Vec<EpochRecord> = (1..=epochs)
            .map(|e| {
                let t = f64::from(e);
                let loss = 2.3 * (-(t / (8.0 + 3.0 * k as f64))).exp() + 0.05;
                let mut r = EpochRecord {
                    epoch: e,
                    train_loss: loss,
                    train_quality: 1.0 - loss / 2.5,
                    test_loss: loss + 0.3,
                    test_quality: 0.9 - loss / 3.0,
                    seconds: 40.0,
                    home_share: (*name == "HomeAdamW").then_some(0.2 + 0.02 * t.sin()),
                    rho: (*name != "AdamW").then_some(1e-8 * (-t / 3.0).exp()),
                    rho_active: None,
                    tau: (*name == "HomeAdamW").then_some(1e-9),
                    clean_train_loss: None,
                    clean_train_quality: None,
                };
                if *name == "AdamW-srf" && e > 20 {
                    r.train_loss = if e > 25 { f64::INFINITY } else { f64::NAN };
                    r.test_loss = f64::NAN;
                    r.train_quality = f64::NAN;
                    r.test_quality = f64::NAN;
                }
                r
            })
            .collect();
        write_metrics(dir, name, Task::Classification, &rows);
        let mut w = StabilityWriter::create(&optimizer_file(dir, name, run::STABILITY_FILE), true).unwrap();
        for e in 1..=epochs {
            let t = f64::from(e);
            w.append(&StabilityRecord {
                epoch: e,
                param_distance: 1e-3 * (t * (0.1 + 0.1 * k as f64)).exp(),
                train_loss_gap: 1e-4 * t * (k + 1) as f64,
                test_loss_gap: 2e-4 * t * (k + 1) as f64,
                generalization_gap: 0.01 * t * (k + 1) as f64,
                travelled: Some(0.1 * t * (k + 1) as f64),
                train_loss: Some(2.0 / (t + k as f64)),
            })
            .unwrap();
        }
    }
}

#[test]
fn figures_of_a_classification_run() {
    let dir = tempfile::tempdir().unwrap();
    classification_run(dir.path());
    let names = draw_readable_figures(dir.path());
    assert_eq!(names, ["curves.png", "home.png", "stability.png"]);
    // Drawing again (after another epoch) replaces the figures.
    assert_eq!(draw_readable_figures(dir.path()), names);
}

#[test]
fn figures_of_a_single_epoch_language_model_run() {
    let dir = tempfile::tempdir().unwrap();
    for (k, name) in ["HomeAdam", "SGDM"].iter().enumerate() {
        let mut r = record(1, 6.0 + k as f64, 400.0 + 100.0 * k as f64);
        r.home_share = (k == 0).then_some(0.01);
        write_metrics(dir.path(), name, Task::LanguageModel, &[r]);
        let path = optimizer_file(dir.path(), name, run::ITERATIONS_FILE);
        let mut w = IterationWriter::create(&path, IterationColumns::new(None)).unwrap();
        w.append(&IterationRecord {
            step: 200,
            train_loss: 6.5,
            home_share: None,
            rho: None,
            rho_active: None,
            tau: None,
            test_loss: None,
            test_quality: None,
        })
        .unwrap();
    }
    let names = draw_readable_figures(dir.path());
    assert_eq!(names.len(), 3, "{names:?}");
}

#[test]
fn figures_of_a_language_model_run_use_log_scales() {
    let dir = tempfile::tempdir().unwrap();
    for (k, name) in ["Adam", "HomeAdam", "SGDM"].iter().enumerate() {
        let rows: Vec<EpochRecord> = (1..=40)
            .map(|e| {
                let loss = 8.0 * (-f64::from(e) / (6.0 + 2.0 * k as f64)).exp() + 4.5;
                EpochRecord {
                    epoch: e,
                    train_loss: loss,
                    train_quality: loss.exp(),
                    test_loss: loss + 0.2,
                    test_quality: (loss + 0.2).exp(),
                    seconds: 100.0,
                    home_share: (*name == "HomeAdam").then_some(0.9 / f64::from(e)),
                    rho: (*name != "SGDM").then_some(1e-6 * (-f64::from(e) / 4.0).exp()),
                    rho_active: None,
                    tau: None,
                    clean_train_loss: None,
                    clean_train_quality: None,
                }
            })
            .collect();
        write_metrics(dir.path(), name, Task::LanguageModel, &rows);
        let path = optimizer_file(dir.path(), name, run::ITERATIONS_FILE);
        let mut w = IterationWriter::create(&path, IterationColumns::new(Some(Task::LanguageModel))).unwrap();
        for i in 1..=200u64 {
            let t = i as f64;
            let test = (i % 4 == 0).then_some(8.0 * (-t / 40.0).exp() + 4.7);
            w.append(&IterationRecord {
                step: 500 * i,
                train_loss: 8.0 * (-t / (30.0 + 10.0 * k as f64)).exp() + 4.5 + 0.1 * (t * 0.7).sin(),
                home_share: (*name == "HomeAdam").then_some((1.0 / t).min(1.0)),
                rho: (*name != "SGDM").then_some(1e-6 * (-t / 20.0).exp()),
                rho_active: None,
                tau: None,
                test_loss: test,
                test_quality: test.map(f64::exp),
            })
            .unwrap();
        }
    }
    let names = draw_readable_figures(dir.path());
    assert_eq!(names.len(), 3, "{names:?}");
}

#[test]
fn figures_never_panic_on_degenerate_runs() {
    let dir = tempfile::tempdir().unwrap();
    // Everything non-finite, a constant line, negative values on a log axis, and a run that has
    // not finished an epoch yet.
    let mut bad = record(1, f64::NAN, f64::NAN);
    bad.rho = Some(-1.0);
    bad.test_loss = f64::NEG_INFINITY;
    write_metrics(dir.path(), "Diverged", Task::LanguageModel, &[bad]);
    let flat: Vec<EpochRecord> = (1..=3).map(|e| record(e, 1.0, 1.0)).collect();
    write_metrics(dir.path(), "Flat", Task::LanguageModel, &flat);
    write_metrics(dir.path(), "Started", Task::LanguageModel, &[]);
    let written = draw_figures(dir.path()).unwrap();
    assert!(!written.is_empty());
    for path in &written {
        image::open(path).unwrap();
    }

    let empty = tempfile::tempdir().unwrap();
    write_metrics(empty.path(), "Started", Task::Classification, &[]);
    assert_eq!(draw_figures(empty.path()).unwrap(), Vec::<PathBuf>::new());
}

#[test]
fn loading_refuses_mixed_tasks_and_empty_dirs() {
    let dir = tempfile::tempdir().unwrap();
    assert!(err_of(load_run(dir.path())).contains("no <optimizer>"));
    write_metrics(dir.path(), "a", Task::Classification, &[record(1, 1.0, 0.5)]);
    write_metrics(dir.path(), "b", Task::LanguageModel, &[record(1, 1.0, 5.0)]);
    assert!(err_of(load_run(dir.path())).contains("LanguageModel"));
    fs::write(
        optimizer_file(dir.path(), "b", run::METRICS_FILE),
        "epoch,train_loss,train_acc,test_loss,test_acc,seconds,home_share,rho,rho_active,tau\n1,2\n",
    )
    .unwrap();
    let e = err_of(draw_figures(dir.path()));
    assert!(e.contains("line 2") && e.contains("metrics.csv"), "{e}");
}

#[test]
fn summary_table_text_and_markdown() {
    let dir = tempfile::tempdir().unwrap();
    let mut home = record(2, 0.123456, 0.9);
    home.home_share = Some(0.5);
    home.tau = Some(2f64.powi(-30));
    let mut first = home;
    first.epoch = 1;
    first.home_share = Some(0.25);
    write_metrics(dir.path(), "HomeAdamW", Task::Classification, &[first, home]);
    let mut diverged = record(1, f64::NAN, 0.1);
    diverged.test_loss = f64::INFINITY;
    write_metrics(dir.path(), "Adam", Task::Classification, &[diverged]);
    write_metrics(dir.path(), "SGD", Task::Classification, &[]);
    let table = SummaryTable::from_run(&load_run(dir.path()).unwrap());

    let text = table.to_text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert!(lines[0].starts_with("optimizer"), "{text}");
    assert!(lines[1].starts_with("---------"), "{text}");
    let width = lines[1].len();
    assert!(lines.iter().all(|l| l.chars().count() == width), "{text}");
    assert!(lines[2].starts_with("Adam ") && lines[2].contains("NaN") && lines[2].contains("inf"));
    let home_line = lines[3];
    assert!(
        home_line.contains("0.1235") && home_line.contains("90.00"),
        "{text}"
    );
    assert!(
        home_line.contains("85.50") && home_line.contains("37.5"),
        "{text}"
    );
    assert!(home_line.contains(" 9.31e-10 "), "{text}");
    assert!(home_line.trim_end().ends_with("25.0"), "{text}");
    assert_eq!(table.headers[6..], ["home steps (%)", "final τ", "time (s)"]);
    assert!(lines[4].starts_with("SGD") && lines[4].contains(" - "), "{text}");

    let md = table.to_markdown();
    let md_lines: Vec<&str> = md.lines().collect();
    assert_eq!(md_lines.len(), 5);
    assert!(md_lines[0].starts_with("| optimizer"));
    assert!(md_lines[1].starts_with("| :--") && md_lines[1].ends_with(": |"));
    assert!(md_lines.iter().all(|l| l.starts_with('|') && l.ends_with('|')));
}

#[test]
fn clean_training_and_test_subset_columns_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("metrics.csv");
    let columns = MetricsColumns::new(Task::Classification, true);
    let mut r = record(1, 0.5, 0.8);
    (r.clean_train_loss, r.clean_train_quality) = (Some(0.4), Some(0.85));
    MetricsWriter::create(&path, columns).unwrap().append(&r).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.starts_with(
        "epoch,train_loss,train_acc,test_loss,test_acc,seconds,home_share,rho,rho_active,tau,\
         clean_train_loss,clean_train_acc\n"
    ));
    assert_eq!(read_metrics(&path).unwrap(), (Task::Classification, vec![r]));
    let mut bad = record(2, 0.5, 0.8);
    bad.clean_train_quality = Some(85.0);
    let mut w = MetricsWriter::resume(&path, columns, 1).unwrap();
    assert!(err_of(w.append(&bad)).contains("clean_train_acc"));
    // A run without --eval-train resumed with it is refused, not mixed.
    assert!(MetricsWriter::resume(&path, cols(Task::Classification), 1).is_err());

    let path = dir.path().join("iterations.csv");
    let row = |step, test: Option<f64>| IterationRecord {
        step,
        train_loss: 1.0,
        home_share: None,
        rho: None,
        rho_active: None,
        tau: None,
        test_loss: test,
        test_quality: test.map(|t| t / 10.0),
    };
    let mut w = IterationWriter::create(&path, IterationColumns::new(Some(Task::Classification))).unwrap();
    w.append(&row(10, None)).unwrap();
    w.append(&row(20, Some(2.0))).unwrap();
    assert!(err_of(w.append(&row(30, Some(20.0)))).contains("test_acc"));
    let text = fs::read_to_string(&path).unwrap();
    assert_eq!(
        text,
        "step,train_loss,home_share,rho,rho_active,tau,test_loss,test_acc\n10,1,,,,,,\n20,1,,,,,2,0.2\n"
    );
    let (columns, rows) = read_iterations(&path).unwrap();
    assert_eq!(
        (columns, rows),
        (
            Some(Task::Classification),
            vec![row(10, None), row(20, Some(2.0))]
        )
    );
}

/// Writes `seeds` runs of `name` under `dir/name/seed-<s>/`, seed s shifted by `0.1 · s`.
fn seed_runs(dir: &Path, name: &str, seeds: u64, epochs: u32) {
    for s in 0..seeds {
        let rows: Vec<EpochRecord> = (1..=epochs)
            .map(|e| record(e, 2.0 / f64::from(e) + 0.1 * s as f64, 0.5 + 0.01 * s as f64))
            .collect();
        let path = dir.join(name).join(format!("seed-{s}")).join(run::METRICS_FILE);
        let mut w = MetricsWriter::create(&path, cols(Task::Classification)).unwrap();
        rows.iter().for_each(|r| w.append(r).unwrap());
        let mut w = IterationWriter::create(
            &path.with_file_name(run::ITERATIONS_FILE),
            IterationColumns::new(Some(Task::Classification)),
        )
        .unwrap();
        for i in 1..=20u64 {
            let test = Some(1.0 / i as f64 + 0.05 * s as f64);
            w.append(&IterationRecord {
                step: 10 * i,
                train_loss: 1.0 / i as f64 + 0.1 * s as f64,
                home_share: None,
                rho: None,
                rho_active: None,
                tau: None,
                test_loss: test,
                test_quality: Some(0.5),
            })
            .unwrap();
        }
    }
}

#[test]
fn seeds_load_as_one_optimizer_with_mean_and_spread() {
    let dir = tempfile::tempdir().unwrap();
    seed_runs(dir.path(), "adamw", 3, 5);
    seed_runs(dir.path(), "homeadamw", 2, 4);
    let run = load_run(dir.path()).unwrap();
    assert_eq!(run.task, Some(Task::Classification));
    let seeds: Vec<Option<u64>> = run.optimizers[0].seeds.iter().map(|s| s.seed).collect();
    assert_eq!(seeds, [Some(0), Some(1), Some(2)]);

    let table = SummaryTable::from_run(&run);
    assert_eq!(table.headers[..3], ["optimizer", "seeds", "epochs"]);
    // adamw's last train loss: 0.4, 0.5, 0.6: mean 0.5, sample std 0.1.
    assert_eq!(table.rows[0][..4], ["adamw", "3", "5", "0.5000 ± 0.1000"]);
    assert_eq!(table.rows[1][..3], ["homeadamw", "2", "4"]);

    draw_curves_home_and_iterations(dir.path());
    // The band: pixels of the first optimizer's colour at 15 % over white.
    let image = image::open(dir.path().join("figures/curves.png"))
        .unwrap()
        .to_rgb8();
    let c = style::style_of("adamw").colour;
    let band_colour = [c.0, c.1, c.2].map(|v| (0.15 * f64::from(v) + 0.85 * 255.0).round() as u8);
    let near = |p: &image::Rgb<u8>| p.0.iter().zip(band_colour).all(|(&a, b)| a.abs_diff(b) <= 2);
    let band = image.pixels().filter(|p| near(p)).count();
    assert!(band > 1000, "no band drawn ({band} pixels)");

    // A single run's files next to seed folders are refused.
    write_metrics(dir.path(), "adamw", Task::Classification, &[record(1, 1.0, 0.5)]);
    assert!(err_of(load_run(dir.path())).contains("seed-<s>"));
}

#[test]
fn rho_active_and_tau_round_trip_and_older_files_keep_their_layout() {
    let dir = tempfile::tempdir().unwrap();
    let mut rows: Vec<EpochRecord> = (1..=3).map(|e| record(e, 1.0, 0.5)).collect();
    for (r, tau) in rows.iter_mut().zip([-20, -24, -24]) {
        r.home_share = Some(1.0);
        r.rho = Some(0.0);
        r.rho_active = Some(1e-7 / f64::from(r.epoch));
        r.tau = Some(2f64.powi(tau));
    }
    rows[2].rho_active = Some(0.0);
    let path = write_metrics(dir.path(), "homeadamw-calibrated", Task::LanguageModel, &rows);
    let text = fs::read_to_string(&path).unwrap();
    assert_eq!(
        text.lines().nth(3),
        Some("3,1,0.5,1.1,0.475,12.5,1,0,0,0.00000005960464477539063")
    );
    assert_eq!(read_metrics(&path).unwrap(), (Task::LanguageModel, rows.clone()));

    let path = dir.path().join("iterations.csv");
    let columns = IterationColumns::new(Some(Task::LanguageModel));
    let row = |step: u64| IterationRecord {
        step,
        train_loss: 6.0,
        home_share: Some(0.0),
        rho: Some(0.0),
        rho_active: Some(2.5e-9),
        tau: Some(0.5),
        test_loss: None,
        test_quality: None,
    };
    let mut w = IterationWriter::create(&path, columns).unwrap();
    w.append(&row(1)).unwrap();
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        "step,train_loss,home_share,rho,rho_active,tau,test_loss,test_ppl\n1,6,0,0,0.0000000025,0.5,,\n"
    );
    assert_eq!(
        read_iterations(&path).unwrap(),
        (Some(Task::LanguageModel), vec![row(1)])
    );

    // A file written before the columns existed reads (without them) and, resumed, keeps its
    // layout; a resumed run of another task is still refused.
    let old = dir.path().join("old/metrics.csv");
    fs::create_dir_all(old.parent().unwrap()).unwrap();
    fs::write(
        &old,
        "epoch,train_loss,train_ppl,test_loss,test_ppl,seconds,home_share,rho\n\
         1,7,1100,7.7,1045,12.5,0.5,1e-9\n",
    )
    .unwrap();
    let (_, back) = read_metrics(&old).unwrap();
    assert_eq!(
        (back[0].rho, back[0].rho_active, back[0].tau),
        (Some(1e-9), None, None)
    );
    let mut w = MetricsWriter::resume(&old, cols(Task::LanguageModel), 1).unwrap();
    w.append(&rows[1]).unwrap();
    let text = fs::read_to_string(&old).unwrap();
    assert!(text.ends_with("\n2,1,0.5,1.1,0.475,12.5,1,0\n"), "{text}");
    assert!(MetricsWriter::resume(&old, cols(Task::Classification), 1).is_err());
    let old = dir.path().join("old/iterations.csv");
    fs::write(&old, "step,train_loss,home_share,rho\n5,6,,\n").unwrap();
    let mut w = IterationWriter::resume(&old, IterationColumns::new(None), 5).unwrap();
    w.append(&row(6)).unwrap();
    assert_eq!(
        fs::read_to_string(&old).unwrap(),
        "step,train_loss,home_share,rho\n5,6,,\n6,6,0,0\n"
    );
    assert!(IterationWriter::resume(&old, columns, 5).is_err());
}

/// The global rule whose ρ over all elements is 0 at every step (some element never had a
/// gradient), beside the same rule deciding with ρ over the active elements and a calibrated τ,
/// and Adam-W whose ρ is positive over decades: the zeros go on the ρ panels' floor line.
#[test]
fn figures_draw_a_rho_of_zero_on_a_log_axis() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["adamw", "homeadamw", "homeadamw-calibrated"] {
        let home = name != "adamw";
        let rows: Vec<EpochRecord> = (1..=12)
            .map(|e| {
                let t = f64::from(e);
                EpochRecord {
                    home_share: home.then_some(if name == "homeadamw" { 1.0 } else { 0.2 }),
                    rho: Some(if home { 0.0 } else { 1e-6 * (-t).exp() }),
                    rho_active: home.then_some(1e-6 * (-t / 2.0).exp()),
                    tau: home.then_some(if name == "homeadamw" {
                        1e-8
                    } else {
                        2f64.powi(-20 - e as i32)
                    }),
                    ..record(e, 2.0 / t, 0.5)
                }
            })
            .collect();
        write_metrics(dir.path(), name, Task::Classification, &rows);
        let path = optimizer_file(dir.path(), name, run::ITERATIONS_FILE);
        let mut w = IterationWriter::create(&path, IterationColumns::new(None)).unwrap();
        for step in 1..=60u64 {
            let t = step as f64;
            w.append(&IterationRecord {
                step,
                train_loss: 2.0 / t,
                home_share: home.then_some(if name == "homeadamw" { 1.0 } else { 0.0 }),
                // adamw's ρ touches 0 once: a hollow marker among its values.
                rho: Some(if home || step == 30 {
                    0.0
                } else {
                    1e-6 * (-t / 5.0).exp()
                }),
                rho_active: home.then_some(1e-6 * (-t / 10.0).exp()),
                tau: home.then_some(2f64.powi(-20 - (step / 10) as i32)),
                test_loss: None,
                test_quality: None,
            })
            .unwrap();
        }
    }
    draw_curves_home_and_iterations(dir.path());
}
