//! `cargo xtask bench`: runs the criterion benches of one step over 16 M parameters (one thread,
//! and the `_t2` rows on two), then PyTorch's fused AdamW on the same sizes, and prints the
//! table of BENCHMARKS.md (also written to `target/bench-table.md`), with the speed goals as
//! ratios to PyTorch; then (without a FILTER) every rule × layout over the plain AdamW loop
//! ([`crate::matrix`]), the core's build time against candle-core's ([`crate::build_time`])
//! and the CPU training speed against PyTorch's ([`crate::cpu_training`]); then the firmware's
//! instruction counts on the Cortex-M4F in QEMU.
//!
//! PyTorch is the one [`crate::torch_python`] finds or installs (the table says so when it
//! cannot be installed).

use std::path::Path;
use std::process::Command;
use std::time::SystemTime;

use serde_json::Value;

use crate::run;
use crate::torch_python::python_with_torch;

const PARAMS: f64 = (16 << 20) as f64;

/// The speed goals: the bench row, what it measures, and the least torch time / ours.
const GOALS: &[(&str, &str, f64)] = &[
    ("adamw_f32_trust", "AdamW f32, `Trust`", 1.0),
    ("homeadamw_ew_f32_trust", "HomeAdamW-ew f32, `Trust`", 1.0),
    ("homeadamw_ew_f32", "HomeAdamW-ew f32, default `SkipStep`", 0.85),
    ("homeadamw_global_f32", "HomeAdamW global f32", 0.75),
    (
        "homeadamw_ew_bf16p_bf16s_g32",
        "HomeAdamW-ew bf16 θ + bf16 moments (f32 g)",
        1.6,
    ),
    ("adamw_bf16p_f32s_g32", "AdamW bf16 θ + f32 moments (f32 g)", 1.1),
];

/// One criterion result: its id, the bytes it moves per element, and its median time.
struct Measured {
    group: String,
    name: String,
    bytes: f64,
    ms: f64,
}

fn read_json(path: &Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// The results of `group` that criterion wrote since `since` (older ones are from earlier runs).
fn measured(group: &str, since: SystemTime) -> Vec<Measured> {
    let dir = Path::new("target/criterion").join(group);
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let new = entry.path().join("new");
        let fresh = std::fs::metadata(new.join("estimates.json"))
            .and_then(|m| m.modified())
            .is_ok_and(|t| t >= since);
        if !fresh {
            continue;
        }
        let (Some(meta), Some(est)) = (
            read_json(&new.join("benchmark.json")),
            read_json(&new.join("estimates.json")),
        ) else {
            continue;
        };
        let id = meta["value_str"]
            .as_str()
            .or(meta["function_id"].as_str())
            .unwrap_or_default()
            .to_string();
        let (name, bytes) = id.rsplit_once('/').unwrap_or((&id, "0B"));
        out.push(Measured {
            group: group.to_string(),
            name: name.to_string(),
            bytes: bytes.trim_end_matches('B').parse().unwrap_or(0.0),
            ms: est["median"]["point_estimate"].as_f64().unwrap_or(f64::NAN) / 1e6,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The speed goals on the Cortex-M4F: the start of a `cost` line and the most instructions per
/// parameter per step.
const MCU_GOALS: &[(&str, f64)] = &[
    ("homeadamw-ew state f32 (Trust)", 30.0),
    ("homeadamw-ew state f32 (SkipStep)", 36.0),
    ("homeadamw-ew state bf16 (SkipStep)", 50.0),
];

/// The M4F's `cost` lines as a table, with the speed goals where it has one.
fn mcu_table(lines: &[String]) -> String {
    let mut table = String::from(
        "\nCortex-M4F (QEMU netduinoplus2, `cost`): instructions per parameter per step.\n\n\
         | rule, state (finite check) | instructions | goal |\n|---|---|---|\n",
    );
    for line in lines {
        let Some((what, rest)) = line.split_once(": ") else {
            continue;
        };
        let count = rest.split(' ').next().unwrap_or("?");
        let goal = MCU_GOALS
            .iter()
            .find(|(name, _)| *name == what)
            .map(|&(_, most)| {
                let met = count.parse::<f64>().is_ok_and(|n| n <= most);
                format!("≤ {most} ({})", if met { "met" } else { "not met" })
            })
            .unwrap_or_default();
        table.push_str(&format!("| {what} | {count} | {goal} |\n"));
    }
    table
}

fn torch_ms() -> Result<(f64, String), String> {
    let python = python_with_torch()?;
    let out = Command::new(python)
        .arg("core/benches/torch_adamw.py")
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr)
            .lines()
            .last()
            .unwrap_or("failed")
            .to_string());
    }
    let v: Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    Ok((
        v["median_ms"].as_f64().unwrap_or(f64::NAN),
        v["torch"].as_str().unwrap_or("?").to_string(),
    ))
}

/// Runs the benches (those matching `filter` only, if given) and prints the tables.
pub(crate) fn bench(filter: Option<&str>) {
    let start = SystemTime::now();
    let mut args = vec!["bench", "-p", "homeadam-core", "--bench", "step"];
    if let Some(filter) = filter {
        args.extend(["--", filter]);
    }
    run("benches", "cargo", &args);
    let torch = torch_ms();
    let bandwidth = measured("bandwidth16M", start);
    let steps = measured("step16M", start);
    let gbs = |m: &Measured| m.bytes * PARAMS / (m.ms * 1e6);
    let copy = bandwidth
        .iter()
        .find(|m| m.name == "copy")
        .map(gbs)
        .unwrap_or(f64::NAN);
    let mut table = String::new();
    table.push_str(&format!(
        "One step over 16 M parameters (8 tensors of 2 M), one thread, median of criterion samples.\n\
         Copy bandwidth (8 B per element counted): {copy:.1} GB/s.\n\n"
    ));
    match &torch {
        Ok((ms, version)) => table.push_str(&format!(
            "PyTorch {version} `AdamW(fused=True)`, f32, 28 B/param: {ms:.2} ms = {:.1} GB/s.\n\n",
            28.0 * PARAMS / (ms * 1e6)
        )),
        Err(e) => table.push_str(&format!("PyTorch not measured: {e}.\n\n")),
    }
    table.push_str(
        "| bench | B/param | ms | GB/s | × copy bandwidth | torch time / ours |\n|---|---|---|---|---|---|\n",
    );
    for m in bandwidth.iter().chain(&steps) {
        let vs_torch = torch
            .as_ref()
            .map(|(t, _)| format!("{:.2}", t / m.ms))
            .unwrap_or_default();
        let vs_torch = if m.group == "step16M" {
            vs_torch
        } else {
            String::new()
        };
        table.push_str(&format!(
            "| {}/{} | {} | {:.2} | {:.1} | {:.2} | {} |\n",
            m.group,
            m.name,
            m.bytes,
            m.ms,
            gbs(m),
            gbs(m) / copy,
            vs_torch
        ));
    }
    let find = |name: &str| steps.iter().find(|m| m.name == name).map(|m| m.ms);
    if let Ok((torch, _)) = &torch {
        table.push_str("\n| path | torch time / ours | goal |\n|---|---|---|\n");
        for &(name, what, goal) in GOALS {
            let Some(ours) = find(name) else { continue };
            let ratio = torch / ours;
            let met = if ratio >= goal { "met" } else { "not met" };
            table.push_str(&format!("| {what} | {ratio:.2} | ≥ {goal} ({met}) |\n"));
        }
    }
    if let (Some(global), Some(ew)) = (find("homeadamw_global_f32"), find("homeadamw_ew_f32")) {
        table.push_str(&format!(
            "\nGlobal / element-wise HomeAdamW time: {:.2}\n",
            global / ew
        ));
    }
    let q8: Vec<String> = [
        ("adamw_q8s", "adamw_f32"),
        ("homeadamw_ew_q8s", "homeadamw_ew_f32"),
    ]
    .iter()
    .filter_map(|&(q8, f32)| Some(format!("{q8} {:.2}×", find(q8)? / find(f32)?)))
    .collect();
    if !q8.is_empty() {
        table.push_str(&format!("\nq8 state / f32 state step time: {}\n", q8.join(", ")));
    }
    let parallel: Vec<String> = steps
        .iter()
        .filter_map(|t2| {
            let one = find(t2.name.strip_suffix("_t2")?)?;
            Some(format!("{} {:.2}×", t2.name, one / t2.ms))
        })
        .collect();
    if !parallel.is_empty() {
        table.push_str(&format!(
            "\nParallel step, 2 threads vs 1 (`Step::with_threads`): {}\n",
            parallel.join(", ")
        ));
    }
    if filter.is_none() {
        table.push_str(&crate::matrix::matrix());
        table.push_str(&crate::build_time::build_times());
        table.push_str(&crate::cpu_training::cpu_training());
    }
    table.push_str(&mcu_table(&crate::firmware::m4f_cost()));
    println!("\n{table}");
    if let Err(e) = std::fs::write("target/bench-table.md", &table) {
        eprintln!("xtask: cannot write target/bench-table.md: {e}");
    }
}
