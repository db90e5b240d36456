//! `homeadam replay` as a user runs it: telemetry lines, the output file, and clear errors with
//! exit code 2 and no output for bad input.

use std::path::{Path, PathBuf};
use std::process::Command;

use safetensors::tensor::TensorView;
use safetensors::Dtype;

fn homeadam() -> Command {
    Command::new(env!("CARGO_BIN_EXE_homeadam"))
}

fn golden(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/golden/cases")
        .join(case)
}

fn write_tensors(path: &Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) {
    let views: Vec<_> = tensors
        .iter()
        .map(|(n, d, s, b)| (*n, TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    std::fs::write(path, safetensors::serialize(views, &None).unwrap()).unwrap();
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Replays a golden case's input under `config`; returns the telemetry lines and the names of
/// the output tensors.
fn replay(config: &Path, case: &str) -> (Vec<serde_json::Value>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.safetensors");
    let run = homeadam()
        .args(["replay", "--config"])
        .arg(config)
        .arg("--input")
        .arg(golden(case).join("input.safetensors"))
        .arg("--output")
        .arg(&out)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let stdout = String::from_utf8(run.stdout).unwrap();
    let lines = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let names = homeadam_replay::read_f32_tensors(&std::fs::read(&out).unwrap())
        .unwrap()
        .into_iter()
        .map(|t| t.0)
        .collect();
    (lines, names)
}

#[test]
fn replays_a_golden_case() {
    let (lines, names) = replay(
        &golden("homeadamw_ew_f32").join("config.json"),
        "homeadamw_ew_f32",
    );
    assert_eq!(lines.len(), 100);
    assert_eq!(lines[0]["step"], 1);
    assert!(lines
        .iter()
        .all(|l| l["rho"].is_number() && l["home_elements"].is_number() && l["skipped"] == false));
    for k in ["layer0.bias", "layer0.weight", "layer1.weight"] {
        for prefix in ["param", "m", "v"] {
            assert!(
                names.contains(&format!("{prefix}.{k}")),
                "{prefix}.{k} missing from {names:?}"
            );
        }
    }
}

#[test]
fn a_skipped_row_keeps_the_step_counter() {
    let (lines, _) = replay(&golden("adamw_nonfinite").join("config.json"), "adamw_nonfinite");
    let skipped: Vec<_> = lines.iter().filter(|l| l["skipped"] == true).collect();
    assert_eq!(skipped.len(), 2);
    let steps: Vec<_> = skipped.iter().map(|l| l["step"].as_u64()).collect();
    assert_eq!(
        steps,
        [Some(36), Some(59)],
        "a skipped row reports the last step taken"
    );
    assert!(skipped.iter().all(|l| l["rho"].is_null()));
    assert_eq!(lines[99]["step"], 98);
}

#[test]
fn sgdm_is_a_config_name() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sgdm.json");
    std::fs::write(&config, r#"{"rule": "sgdm", "lr": 0.01}"#).unwrap();
    let (lines, names) = replay(&config, "sgdm_f32");
    assert_eq!(lines.len(), 100);
    assert!(lines.iter().all(|l| l["rho"].is_null()));
    assert!(names.contains(&"b.layer0.bias".to_string()), "{names:?}");
}

/// Runs replay on `config` / `input` and checks: exit 2, one line naming `needle`, no output.
fn refuses(config: &str, input: &Path, needle: &str) {
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("config.json");
    std::fs::write(&config_path, config).unwrap();
    let out = dir.path().join("out.safetensors");
    let run = homeadam()
        .args(["replay", "--config"])
        .arg(&config_path)
        .arg("--input")
        .arg(input)
        .arg("--output")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: ") && stderr.contains(needle),
        "{needle}: {stderr}"
    );
    assert!(!out.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "a temporary file was left"
    );
}

#[test]
fn bad_inputs_are_named_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ok = r#"{"rule": "adamw"}"#;
    let path = |name: &str| dir.path().join(name);

    write_tensors(
        &path("no_grad.st"),
        &[("param.w", Dtype::F32, vec![2], f32_bytes(&[1.0, 2.0]))],
    );
    refuses(ok, &path("no_grad.st"), "grad.w");

    write_tensors(
        &path("shape.st"),
        &[
            ("param.w", Dtype::F32, vec![2], f32_bytes(&[1.0, 2.0])),
            ("grad.w", Dtype::F32, vec![3], f32_bytes(&[1.0, 2.0, 3.0])),
        ],
    );
    refuses(ok, &path("shape.st"), "grad.w has shape [3]");

    write_tensors(
        &path("bf16.st"),
        &[
            ("param.w", Dtype::BF16, vec![2], vec![0; 4]),
            ("grad.w", Dtype::F32, vec![1, 2], f32_bytes(&[1.0, 2.0])),
        ],
    );
    refuses(ok, &path("bf16.st"), "param.w is BF16");

    write_tensors(
        &path("steps.st"),
        &[
            ("param.a", Dtype::F32, vec![1], f32_bytes(&[1.0])),
            ("grad.a", Dtype::F32, vec![2, 1], f32_bytes(&[1.0, 2.0])),
            ("param.b", Dtype::F32, vec![1], f32_bytes(&[1.0])),
            ("grad.b", Dtype::F32, vec![3, 1], f32_bytes(&[1.0, 2.0, 3.0])),
        ],
    );
    refuses(ok, &path("steps.st"), "steps");

    write_tensors(
        &path("extra.st"),
        &[
            ("param.w", Dtype::F32, vec![1], f32_bytes(&[1.0])),
            ("grad.w", Dtype::F32, vec![1, 1], f32_bytes(&[1.0])),
            ("weights.w", Dtype::F32, vec![1], f32_bytes(&[1.0])),
        ],
    );
    refuses(ok, &path("extra.st"), "weights.w");

    std::fs::write(
        path("truncated.st"),
        &std::fs::read(path("extra.st")).unwrap()[..40],
    )
    .unwrap();
    refuses(ok, &path("truncated.st"), "not a valid safetensors file");
    refuses(ok, &path("missing.st"), "cannot read");

    let good = golden("adamw_f32").join("input.safetensors");
    refuses(r#"{"rule": "adamw", "lr": "fast"}"#, &good, "config: lr");
    refuses(r#"{"rule": "adamw", "amsgrad": true}"#, &good, "amsgrad");
    refuses(
        r#"{"rule": "adamw", "momentum_typo": 0.9}"#,
        &good,
        "momentum_typo",
    );
    refuses(r#"{"rule": "nadam"}"#, &good, "unknown rule");
    refuses(r#"{"rule": "adamw", "lr": -0.1}"#, &good, "lr");
    refuses(r#"{"rule": "homeadamw", "state_dtype": "f16"}"#, &good, "f16");
    refuses("not json", &good, "config");
}
