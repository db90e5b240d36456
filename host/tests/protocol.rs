//! The protocol options of `homeadam train` on CPU-sized runs: the README's departures are the
//! presets', `--eval-every` and `--eval-train` record without changing the training, `--seeds`
//! runs per-seed folders that resume and aggregate, `--decay-mask` switches the decayed
//! parameters (and a checkpoint refuses the other mask), `--vgg` belongs to VGG.

use std::path::Path;
use std::process::{Command, Output};

use homeadam_host::preset::departures_markdown;
use homeadam_host::report::metrics::{read_iterations, read_metrics, Task};
use homeadam_host::train::checkpoint::RunCheckpoint;

fn homeadam(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_homeadam"))
        .args(args)
        .output()
        .expect("run homeadam")
}

/// `homeadam train digits-mlp --quiet ARGS --out OUT`, which must succeed.
fn digits(out: &Path, args: &[&str]) -> String {
    let mut all = vec![
        "train",
        "digits-mlp",
        "--quiet",
        "--out",
        out.to_str().expect("utf-8"),
    ];
    all.extend(args);
    let o = homeadam(&all);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A CSV's lines without the column `drop` (wall-clock seconds differ between runs).
fn without_column(path: &Path, drop: usize) -> Vec<String> {
    text(path)
        .lines()
        .map(|l| {
            let mut f: Vec<&str> = l.split(',').collect();
            f.remove(drop);
            f.join(",")
        })
        .collect()
}

fn model_bits(path: &Path) -> Vec<(String, Vec<u32>)> {
    RunCheckpoint::load(path)
        .expect("checkpoint")
        .model
        .into_iter()
        .map(|v| (v.name, v.values.iter().map(|x| x.to_bits()).collect()))
        .collect()
}

#[test]
fn readme_departures_are_the_presets_ours_choices() {
    let readme = text(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"));
    let (begin, end) = ("<!-- departures:begin -->\n", "<!-- departures:end -->");
    let start = readme.find(begin).expect("README: departures:begin marker") + begin.len();
    let stop = readme.find(end).expect("README: departures:end marker");
    let generated = departures_markdown().expect("presets");
    assert!(
        readme[start..stop] == generated,
        "README's departures differ from the presets: paste `homeadam presets --departures`"
    );
    let o = homeadam(&["presets", "--departures"]);
    assert!(o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stdout), generated);
    let o = homeadam(&["presets"]);
    let listing = String::from_utf8_lossy(&o.stdout);
    assert!(
        listing.contains("decay_mask = all") && listing.contains("paper, homeadam.tex:308"),
        "{listing}"
    );
}

#[test]
fn evaluations_record_without_changing_the_training() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (plain, evaluated) = (dir.path().join("plain"), dir.path().join("evaluated"));
    let base = ["--optimizers", "adamw", "--epochs", "2", "--max-batches", "6"];
    digits(&plain, &base);
    let mut args = base.to_vec();
    args.extend([
        "--log-every",
        "2",
        "--eval-every",
        "4",
        "--eval-subset",
        "100",
        "--eval-train",
    ]);
    digits(&evaluated, &args);

    let final_bin = |d: &Path| d.join("adamw/final.bin");
    assert_eq!(model_bits(&final_bin(&plain)), model_bits(&final_bin(&evaluated)));
    let metrics = |d: &Path| d.join("adamw/metrics.csv");
    let a = without_column(&metrics(&plain), 5);
    let b = without_column(&metrics(&evaluated), 5);
    for (x, y) in a.iter().zip(&b).skip(1) {
        assert!(y.starts_with(&format!("{x},")), "{x} / {y}");
    }
    assert!(b[0].ends_with(",clean_train_loss,clean_train_acc"), "{}", b[0]);
    let (task, rows) = read_metrics(&metrics(&evaluated)).expect("metrics");
    assert_eq!(task, Task::Classification);
    for r in &rows {
        let (loss, acc) = (
            r.clean_train_loss.expect("loss"),
            r.clean_train_quality.expect("acc"),
        );
        assert!(loss.is_finite() && (0.0..=1.0).contains(&acc), "{r:?}");
    }

    let (columns, rows) = read_iterations(&evaluated.join("adamw/iterations.csv")).expect("iterations");
    assert_eq!(columns, Some(Task::Classification));
    let steps: Vec<u64> = rows.iter().map(|r| r.step).collect();
    assert_eq!(steps, [2, 4, 6, 8, 10, 12]);
    for r in &rows {
        assert_eq!(r.test_loss.is_some(), r.step % 4 == 0, "{r:?}");
        assert_eq!(r.test_quality.is_some(), r.step % 4 == 0, "{r:?}");
    }

    // The language model: test perplexity per iteration on a 512-token subset.
    let lm = dir.path().join("lm");
    let o = homeadam(&[
        "train",
        "wikitext2-quick",
        "--quiet",
        "--optimizers",
        "homeadamw-ew",
        "--epochs",
        "1",
        "--max-batches",
        "4",
        "--batch-size",
        "8",
        "--eval-every",
        "2",
        "--eval-subset",
        "512",
        "--out",
        lm.to_str().expect("utf-8"),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let path = lm.join("homeadamw-ew/iterations.csv");
    assert!(text(&path).starts_with("step,train_loss,home_share,rho,rho_active,tau,test_loss,test_ppl\n"));
    let (_, rows) = read_iterations(&path).expect("iterations");
    assert_eq!(rows.len(), 2);
    for r in rows {
        let (loss, ppl) = (r.test_loss.expect("loss"), r.test_quality.expect("ppl"));
        assert!((ppl - loss.exp()).abs() < 1e-9 * ppl, "{loss} {ppl}");
    }
    assert!(lm.join("figures/iterations.png").is_file());
}

#[test]
fn seeds_run_in_their_folders_resume_and_aggregate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (straight, resumed) = (dir.path().join("straight"), dir.path().join("resumed"));
    let common = ["--max-batches", "4", "--seed", "3"];
    let args = [&common[..], &["--optimizers", "adamw,sgd", "--seeds", "2"]].concat();
    let stdout = digits(&straight, &[&args[..], &["--epochs", "2"]].concat());
    assert!(stdout.contains("seeds") && stdout.contains(" ± "), "{stdout}");
    let metrics = |d: &Path, s: u64| d.join(format!("adamw/seed-{s}/metrics.csv"));
    assert_ne!(
        without_column(&metrics(&straight, 3), 5),
        without_column(&metrics(&straight, 4), 5),
        "two seeds, two runs"
    );
    assert!(!straight.join("adamw/metrics.csv").exists());
    assert!(text(&straight.join("summary.md")).contains(" ± "));
    assert!(straight.join("figures/curves.png").is_file());

    // Killed after the first seed of adamw: sgd and adamw's second seed have no checkpoint and
    // start from scratch under --resume; adamw's first seed continues.
    digits(
        &resumed,
        &[&common[..], &["--epochs", "1", "--optimizers", "adamw"]].concat(),
    );
    std::fs::create_dir_all(resumed.join("adamw/seed-3")).expect("mkdir");
    for f in ["metrics.csv", "checkpoint.bin"] {
        std::fs::rename(
            resumed.join("adamw").join(f),
            resumed.join("adamw/seed-3").join(f),
        )
        .expect("move");
    }
    std::fs::remove_file(resumed.join("adamw/final.bin")).expect("rm");
    digits(&resumed, &[&args[..], &["--epochs", "2", "--resume"]].concat());
    for (optimizer, seed) in [("adamw", 3), ("adamw", 4), ("sgd", 3), ("sgd", 4)] {
        let m = |d: &Path| d.join(format!("{optimizer}/seed-{seed}/metrics.csv"));
        assert_eq!(without_column(&m(&straight), 5), without_column(&m(&resumed), 5));
        let f = |d: &Path| d.join(format!("{optimizer}/seed-{seed}/final.bin"));
        assert_eq!(model_bits(&f(&straight)), model_bits(&f(&resumed)));
    }
}

#[test]
fn decay_mask_switches_and_a_checkpoint_keeps_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = ["--optimizers", "adamw", "--epochs", "1", "--max-batches", "3"];
    let run = |name: &str, extra: &[&str]| {
        let out = dir.path().join(name);
        digits(&out, &[&base[..], extra].concat());
        model_bits(&out.join("adamw/final.bin"))
    };
    let preset = run("preset", &[]);
    assert_eq!(preset, run("library", &["--decay-mask", "no-bias-norm"]));
    let all = run("all", &["--decay-mask", "all"]);
    for ((name, x), (_, y)) in preset.iter().zip(&all) {
        // The digits' AdamW has λ = 0.01: decaying the biases moves them.
        if name.ends_with("bias") {
            assert_ne!(x, y, "{name} is decayed under --decay-mask all only");
        }
    }
    let out = dir.path().join("all");
    let o = homeadam(&[
        "train",
        "digits-mlp",
        "--quiet",
        "--optimizers",
        "adamw",
        "--epochs",
        "2",
        "--max-batches",
        "3",
        "--resume",
        "--out",
        out.to_str().expect("utf-8"),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.code() == Some(2) && err.contains("decay"), "{err}");

    let o = homeadam(&["train", "digits-mlp", "--vgg", "plain", "--out", "/nonexistent/x"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(2) && err.contains("--vgg applies to cifar10-vgg16"),
        "{err}"
    );
}
