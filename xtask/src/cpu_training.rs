//! The CPU training table of `cargo xtask bench`: `homeadam bench-train` and its PyTorch peer
//! (`host/benches/torch_train.py`) on the same networks and batches, one after the other on
//! the CPU, each with its default threads (rayon's pool, PyTorch's intra-op pool), and ours /
//! PyTorch's throughput against the goals of BENCHMARKS.md.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::run;

/// The rows: the experiment, whether `--small`, the timed and untimed steps, and the least
/// ours / PyTorch throughput that resolves the goal.
const ROWS: &[(&str, bool, usize, usize, f64)] = &[
    ("cifar10-vgg16", true, 20, 5, 0.6),
    ("tinyimagenet-resnet34", true, 20, 5, 0.6),
    ("wikitext2-transformer", true, 20, 5, 0.8),
    ("cifar10-vgg16", false, 4, 1, 0.6),
    ("wikitext2-transformer", false, 3, 1, 0.8),
];

/// One run's JSON (`--json`), or why there is none.
fn measure(program: &Path, args: &[&str], json: &Path) -> Result<Value, String> {
    let out = Command::new(program)
        .args(args)
        .arg("--json")
        .arg(json)
        .output()
        .map_err(|e| format!("{}: {e}", program.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(err.lines().last().unwrap_or("failed").to_string());
    }
    let text = std::fs::read_to_string(json).map_err(|e| e.to_string())?;
    serde_json::from_str(&text).map_err(|e| e.to_string())
}

/// Runs every row and returns the Markdown table.
pub(crate) fn cpu_training() -> String {
    run(
        "homeadam for bench-train",
        "cargo",
        &["build", "--release", "-p", "homeadam-host"],
    );
    let ours = crate::cache::build_root().join("release/homeadam");
    let python = crate::torch_python::python_with_torch();
    let json = crate::cache::build_root().join("bench-train.json");
    let mut table = String::from(
        "\nTraining on the CPU: `homeadam bench-train` and `host/benches/torch_train.py`, one after \
         the other, synthetic data, batch 64 (32 × 35 tokens), each side's default threads.\n\n\
         | model | ours | PyTorch | ours / PyTorch | threads (ours, PyTorch) | floor |\n\
         |---|---|---|---|---|---|\n",
    );
    for &(experiment, small, steps, warmup, floor) in ROWS {
        let (steps, warmup) = (steps.to_string(), warmup.to_string());
        let mut args = vec!["--experiment", experiment, "--steps", &steps, "--warmup", &warmup];
        if small {
            args.push("--small");
        }
        let mut bench_args = vec!["bench-train"];
        bench_args.extend(&args);
        let mine = measure(&ours, &bench_args, &json);
        let mut torch_args = vec!["host/benches/torch_train.py"];
        torch_args.extend(&args);
        let theirs = python
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|python| measure(python, &torch_args, &json));
        let model = format!("{experiment}{}", if small { " --small" } else { "" });
        let throughput = |r: &Result<Value, String>| match r {
            Ok(v) => format!(
                "{:.0} {}/s",
                v["throughput"].as_f64().unwrap_or(f64::NAN),
                v["unit"].as_str().unwrap_or("?")
            ),
            Err(e) => format!("failed: {e}"),
        };
        let (ratio, threads) = match (&mine, &theirs) {
            (Ok(a), Ok(b)) => {
                let ratio = a["throughput"].as_f64().unwrap_or(f64::NAN)
                    / b["throughput"].as_f64().unwrap_or(f64::NAN);
                let met = if ratio >= floor { "met" } else { "not met" };
                (
                    format!("{ratio:.2} ({met})"),
                    format!("{}, {}", a["threads"], b["threads"]),
                )
            }
            _ => (String::new(), String::new()),
        };
        table.push_str(&format!(
            "| {model} | {} | {} | {ratio} | {threads} | ≥ {floor} |\n",
            throughput(&mine),
            throughput(&theirs)
        ));
    }
    table
}
