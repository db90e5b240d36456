//! Every experiment end to end on the CPU, CI-sized: the commands a user runs, on small real
//! data (the shipped digits and WikiText-2 splits) or synthetic files in the datasets' exact
//! on-disk formats (CIFAR-10 binary, the Tiny-ImageNet tree), with CPU-sized models. Every run
//! must report finite losses; on real data with our presets, training must work: the loss
//! falls, and AdamW and HomeAdamW-ew classify the digits' test split above 90 %.

use std::path::Path;
use std::process::Command;

use homeadam_host::report::metrics::{read_metrics, EpochRecord, Task};
use homeadam_host::report::read_stability;

fn homeadam(args: &[&str], out: &Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_homeadam"))
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .expect("run homeadam");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "homeadam {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn assert_png(path: &Path) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let img = image::load_from_memory(&bytes).expect("a PNG");
    assert!(img.width() > 500 && img.height() > 300, "{}", path.display());
}

/// The rows of one optimizer's `metrics.csv`, read by the runner's own reader (which checks
/// the header, the order of epochs and the ranges), after checking: the task, one row per
/// epoch, and finite losses.
fn metrics(out: &Path, optimizer: &str, task: Task, epochs: usize) -> Vec<EpochRecord> {
    let path = out.join(optimizer).join("metrics.csv");
    let (found, rows) = read_metrics(&path).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
    assert_eq!(found, task, "{}", path.display());
    assert_eq!(rows.len(), epochs, "{rows:?}");
    for r in &rows {
        assert!(
            r.train_loss.is_finite() && r.test_loss.is_finite(),
            "{optimizer}: {r:?}"
        );
    }
    rows
}

/// Checks one optimizer's `stability.csv`: one row per epoch, every value finite, and the two
/// models apart (S and S⁽ⁱ⁾ differ in one example).
fn assert_stability(out: &Path, optimizer: &str, epochs: usize) {
    let path = out.join(optimizer).join("stability.csv");
    let rows = read_stability(&path).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
    assert_eq!(rows.len(), epochs, "{rows:?}");
    for r in &rows {
        let values = [
            r.param_distance,
            r.train_loss_gap,
            r.test_loss_gap,
            r.generalization_gap,
        ];
        assert!(values.iter().all(|v| v.is_finite()), "{optimizer}: {r:?}");
        assert!(
            r.param_distance > 0.0,
            "{optimizer}: the models must differ: {r:?}"
        );
    }
}

/// Training works: the training and test losses of the last epoch are below the first's.
fn assert_learns(optimizer: &str, rows: &[EpochRecord]) {
    let (first, last) = (rows[0], rows[rows.len() - 1]);
    assert!(
        last.train_loss < first.train_loss && last.test_loss < first.test_loss,
        "{optimizer} does not learn: {rows:?}"
    );
}

/// `homeadam quick`, cut to two optimizers on the digits (10 epochs) and a 2-epoch, 3-batch
/// language model (its time mostly the evaluation).
#[test]
fn quick_trains_and_writes_tables_csvs_and_figures() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("quick");
    let stdout = homeadam(
        &[
            "quick",
            "--epochs",
            "10",
            "--optimizers",
            "adamw,homeadamw-ew",
            "--lm-optimizers",
            "homeadamw-ew",
            "--lm-epochs",
            "2",
            "--lm-batches",
            "3",
        ],
        &out,
    );
    assert!(
        stdout.contains("homeadamw-ew") && stdout.contains("test ppl"),
        "{stdout}"
    );
    // Seeds 0–3 reach 93.9–95.3 % (AdamW) and 95.8–96.7 % (HomeAdamW-ew) after 10 epochs.
    for optimizer in ["adamw", "homeadamw-ew"] {
        let rows = metrics(&out.join("digits-mlp"), optimizer, Task::Classification, 10);
        assert_learns(optimizer, &rows);
        let accuracy = rows[9].test_quality;
        assert!(accuracy > 0.9, "{optimizer}: test accuracy {accuracy}");
    }
    let lm = metrics(
        &out.join("wikitext2-quick"),
        "homeadamw-ew",
        Task::LanguageModel,
        2,
    );
    assert_learns("homeadamw-ew (language model)", &lm);
    for f in [
        "digits-mlp/figures/curves.png",
        "digits-mlp/figures/home.png",
        "wikitext2-quick/figures/curves.png",
    ] {
        assert_png(&out.join(f));
    }
}

/// `homeadam train digits-cnn`: the CNN on the shipped digits learns with AdamW and
/// HomeAdamW-ew under the digits preset (3 epochs, about a second each in release).
#[test]
fn digits_cnn_trains_on_the_shipped_digits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("cnn");
    homeadam(
        &[
            "train",
            "digits-cnn",
            "--optimizers",
            "adamw,homeadamw-ew",
            "--epochs",
            "3",
            "--quiet",
        ],
        &out,
    );
    for optimizer in ["adamw", "homeadamw-ew"] {
        let rows = metrics(&out, optimizer, Task::Classification, 3);
        assert_learns(optimizer, &rows);
        let accuracy = rows[2].test_quality;
        assert!(accuracy > 0.8, "{optimizer}: test accuracy {accuracy}");
    }
    assert_png(&out.join("figures/curves.png"));
}

#[test]
fn wikitext2_transformer_runs_on_real_text() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("wikitext-2");
    std::fs::create_dir(&data).expect("mkdir");
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/wikitext-2");
    let head = |name: &str, lines: usize| -> String {
        let text = std::fs::read_to_string(shipped.join(name)).expect("shipped split");
        text.lines().take(lines).map(|l| format!("{l}\n")).collect()
    };
    // The shipped validation split stands in for the training split (same format).
    std::fs::write(data.join("train.txt"), head("valid.txt", 300)).expect("write");
    std::fs::write(data.join("test.txt"), head("test.txt", 40)).expect("write");
    let out = dir.path().join("run");
    let data_dir = data.to_str().expect("utf-8 path");
    homeadam(
        &[
            "train",
            "wikitext2-transformer",
            "--small",
            "--data-dir",
            data_dir,
            "--optimizers",
            "adamw,homeadamw",
            "--epochs",
            "2",
            "--max-batches",
            "3",
            "--batch-size",
            "4",
            "--log-every",
            "2",
            "--quiet",
        ],
        &out,
    );
    for optimizer in ["adamw", "homeadamw"] {
        metrics(&out, optimizer, Task::LanguageModel, 2);
    }
    assert_png(&out.join("figures/curves.png"));
    assert_png(&out.join("figures/iterations.png"));
}

/// Writes `count` random 64×64 JPEGs.
fn jpegs(dir: &Path, prefix: &str, count: usize, seed: u8) {
    std::fs::create_dir_all(dir).expect("mkdir");
    for k in 0..count {
        let img = image::RgbImage::from_fn(64, 64, |x, y| {
            image::Rgb([
                (x as u8).wrapping_mul(seed),
                (y as u8).wrapping_add(k as u8 * 40),
                seed.wrapping_mul(k as u8 + 1),
            ])
        });
        img.save(dir.join(format!("{prefix}_{k}.JPEG")))
            .expect("save jpeg");
    }
}

#[test]
fn tinyimagenet_resnet34_runs_on_a_synthetic_tree() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("tiny-imagenet-200");
    let wnids = ["n01443537", "n01629819", "n01641577"];
    std::fs::create_dir_all(&root).expect("mkdir");
    std::fs::write(root.join("wnids.txt"), wnids.join("\n") + "\n").expect("write");
    let mut annotations = String::new();
    for (c, w) in wnids.iter().enumerate() {
        jpegs(&root.join("train").join(w).join("images"), w, 4, 3 + c as u8 * 50);
        jpegs(&root.join("val/images"), &format!("val_{c}"), 1, 7 + c as u8 * 50);
        annotations.push_str(&format!("val_{c}_0.JPEG\t{w}\t0\t0\t63\t63\n"));
    }
    std::fs::write(root.join("val/val_annotations.txt"), annotations).expect("write");
    let out = dir.path().join("run");
    homeadam(
        &[
            "train",
            "tinyimagenet-resnet34",
            "--small",
            "--data-dir",
            dir.path().to_str().expect("utf-8 path"),
            "--optimizers",
            "homeadamw",
            "--epochs",
            "1",
            "--batch-size",
            "6",
            "--quiet",
        ],
        &out,
    );
    metrics(&out, "homeadamw", Task::Classification, 1);
    assert_png(&out.join("figures/curves.png"));
}

/// Writes CIFAR-10's six binary batch files (4 records each) into `dir/cifar-10-batches-bin`.
fn write_cifar(dir: &Path) {
    let data = dir.join("cifar-10-batches-bin");
    std::fs::create_dir(&data).expect("mkdir");
    let batch = |seed: u8| -> Vec<u8> {
        (0..4u8)
            .flat_map(|r| {
                std::iter::once(r % 10)
                    .chain((0..3072u32).map(move |i| (i as u8).wrapping_mul(seed).wrapping_add(r)))
            })
            .collect()
    };
    for k in 1..=5u8 {
        std::fs::write(data.join(format!("data_batch_{k}.bin")), batch(k)).expect("write");
    }
    std::fs::write(data.join("test_batch.bin"), batch(9)).expect("write");
}

#[test]
fn cifar10_vgg16_runs_on_synthetic_binary_batches() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_cifar(dir.path());
    let out = dir.path().join("run");
    homeadam(
        &[
            "train",
            "cifar10-vgg16",
            "--small",
            "--data-dir",
            dir.path().to_str().expect("utf-8 path"),
            "--optimizers",
            "adamw-srf,homeadamw-ew",
            "--epochs",
            "1",
            "--batch-size",
            "5",
            "--quiet",
        ],
        &out,
    );
    for optimizer in ["adamw-srf", "homeadamw-ew"] {
        metrics(&out, optimizer, Task::Classification, 1);
    }
    assert_png(&out.join("figures/curves.png"));
}

#[test]
fn stability_writes_its_csv_and_figure_on_digits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("stability");
    let stdout = homeadam(
        &[
            "stability",
            "--optimizers",
            "adamw,homeadamw",
            "--epochs",
            "2",
            "--quiet",
        ],
        &out,
    );
    assert!(stdout.contains("homeadamw"), "{stdout}");
    for optimizer in ["adamw", "homeadamw"] {
        assert_stability(&out, optimizer, 2);
    }
    assert_png(&out.join("figures/stability.png"));
}

/// `stability --preset FILE` measures the rows of the file (a sweep's `best.json`): the
/// experiment's own preset written to a file gives the same table, a row changed in the file
/// a different one, and another experiment's preset is refused.
#[test]
fn stability_reads_the_rows_of_a_preset_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let own = homeadam_host::preset::Preset::json("digits_quick").expect("digits preset");
    let mut changed: serde_json::Value = serde_json::from_str(own).expect("json");
    let lr = changed["optimizers"]["sgdm"]["lr"].as_f64().expect("sgdm's lr");
    changed["optimizers"]["sgdm"]["lr"] = serde_json::json!(lr / 10.0);
    let files = [
        ("own.json", own.to_string()),
        ("changed.json", changed.to_string()),
        (
            "lm.json",
            homeadam_host::preset::Preset::json("wikitext2_quick")
                .expect("LM preset")
                .to_string(),
        ),
    ];
    for (name, text) in &files {
        std::fs::write(dir.path().join(name), text).expect("write preset");
    }
    let args = ["stability", "--optimizers", "sgdm", "--epochs", "1", "--quiet"];
    let table = |preset: Option<&str>| {
        let out = dir.path().join(format!("run-{}", preset.unwrap_or("default")));
        let file = preset.map(|p| dir.path().join(p));
        let mut all: Vec<&str> = args.to_vec();
        if let Some(f) = &file {
            all.extend(["--preset", f.to_str().expect("utf-8 path")]);
        }
        homeadam(&all, &out);
        assert_stability(&out, "sgdm", 1);
        std::fs::read_to_string(out.join("sgdm/stability.csv")).expect("stability.csv")
    };
    let default = table(None);
    assert_eq!(table(Some("own.json")), default);
    assert_ne!(table(Some("changed.json")), default);

    let refused = Command::new(env!("CARGO_BIN_EXE_homeadam"))
        .args(args)
        .arg("--preset")
        .arg(dir.path().join("lm.json"))
        .arg("--out")
        .arg(dir.path().join("lm"))
        .output()
        .expect("run homeadam");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("not digits-mlp's"),
        "{stderr}"
    );
}

#[test]
fn stability_runs_on_cifar10_batches() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_cifar(dir.path());
    let out = dir.path().join("stability");
    let data_dir = dir.path().to_str().expect("utf-8 path");
    let args = [
        "stability",
        "--experiment",
        "cifar10-vgg16",
        "--small",
        "--data-dir",
        data_dir,
        "--optimizers",
        "homeadamw",
        "--epochs",
        "2",
        "--replace",
        "3",
        "--vgg",
        "bn",
        "--quiet",
    ];
    homeadam(&args, &out);
    assert_stability(&out, "homeadamw", 2);
}

#[test]
fn unknown_names_and_missing_data_are_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_homeadam"))
            .args(args)
            .output()
            .expect("run homeadam");
        (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (code, err) = run(&["train", "mnist"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("unknown experiment \"mnist\"") && err.contains("cifar10-vgg16"),
        "{err}"
    );
    let (code, err) = run(&[
        "train",
        "digits-mlp",
        "--optimizers",
        "adamax",
        "--out",
        "/nonexistent/x",
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("unknown optimizer \"adamax\""), "{err}");
    let empty = dir.path().to_str().expect("utf-8 path");
    let (code, err) = run(&["train", "cifar10-vgg16", "--data-dir", empty]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("data_batch_1.bin") || err.contains("cifar-10"),
        "{err}"
    );
    let (code, err) = run(&["train", "digits-mlp", "--device", "cuda"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("CPU only"), "{err}");
}
