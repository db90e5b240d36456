//! Firmware checks under QEMU: build the Cortex-M4F firmware, run the fine-tuning app and the
//! on-target golden test on `netduinoplus2`, decode their defmt output, and fail unless
//! fine-tuning improves held-out accuracy, the resumed run is bit-identical, and the golden
//! test reports `N passed, 0 failed`.

use std::path::Path;
use std::process::{exit, Command, Stdio};
use std::time::Instant;

use crate::{run, THUMB};

const ELF_DIR: &str = "firmware/target/thumbv7em-none-eabihf/release";
const DECODER: &str = "firmware/decoder/target/release/homeadam-defmt-decode";
const DECODER_BUILD: [&str; 6] = [
    "build",
    "--release",
    "--manifest-path",
    "firmware/decoder/Cargo.toml",
    "--target-dir",
    "firmware/decoder/target",
];

/// Runs `cargo args` in `dir` (the firmware's own `.cargo/config.toml` applies there).
fn cargo_in(name: &str, dir: &str, args: &[&str]) {
    println!("\n== xtask: {name}: (cd {dir} && cargo {})", args.join(" "));
    let start = Instant::now();
    let ok = Command::new("cargo")
        .args(args)
        .current_dir(dir)
        .env_remove("CARGO_TARGET_DIR")
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("xtask: {name} failed");
        exit(1);
    }
    println!("== xtask: {name} ok ({:.0} s)", start.elapsed().as_secs_f64());
}

/// Installs QEMU when missing.
fn qemu() {
    let present = Command::new("qemu-system-arm")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !present {
        run("apt index", "apt-get", &["update", "-qq"]);
        run("qemu", "apt-get", &["install", "-y", "-qq", "qemu-system-arm"]);
    }
}

/// Runs `bin` in QEMU, decodes its defmt log, prints it, and returns (exit ok, log).
fn qemu_run(bin: &str, extra: &[&str]) -> (bool, String) {
    let elf = format!("{ELF_DIR}/{bin}");
    println!(
        "\n== xtask: qemu: timeout 120 qemu-system-arm -machine netduinoplus2 -display none -monitor none -serial none -semihosting-config enable=on,target=native {}-kernel {elf} | {DECODER} {elf}",
        extra.iter().map(|a| format!("{a} ")).collect::<String>()
    );
    let start = Instant::now();
    let out = Command::new("timeout")
        .args(["120", "qemu-system-arm", "-machine", "netduinoplus2"])
        .args(["-display", "none", "-monitor", "none", "-serial", "none"])
        .args(["-semihosting-config", "enable=on,target=native"])
        .args(extra)
        .args(["-kernel", &elf])
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| {
            eprintln!("xtask: cannot run qemu-system-arm: {e}");
            exit(1)
        });
    let mut decoder = Command::new(DECODER)
        .arg(&elf)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            eprintln!("xtask: cannot run {DECODER}: {e}");
            exit(1)
        });
    if let Some(mut stdin) = decoder.stdin.take() {
        use std::io::Write;
        let _ = stdin.write_all(&out.stdout);
    }
    let decoded = decoder.wait_with_output().unwrap_or_else(|e| {
        eprintln!("xtask: defmt decoder: {e}");
        exit(1)
    });
    let log = String::from_utf8_lossy(&decoded.stdout).into_owned();
    print!("{log}");
    println!(
        "== xtask: qemu {bin}: {} ({:.0} s)",
        out.status,
        start.elapsed().as_secs_f64()
    );
    (out.status.success() && decoded.status.success(), log)
}

fn fail(what: &str) -> ! {
    eprintln!("xtask: firmware: {what}");
    exit(1)
}

/// Runs the firmware checks.
pub(crate) fn test() {
    run("firmware target", "rustup", &["target", "add", THUMB]);
    qemu();
    if !Path::new("firmware/generated/weights.bin").exists() {
        run("pretraining", "python3", &["firmware/tools/pretrain.py"]);
    }
    if !Path::new("firmware/generated/golden.bin").exists() {
        run(
            "golden vectors",
            "cargo",
            &[
                "run",
                "-p",
                "homeadam-mcu",
                "--example",
                "golden",
                "--",
                "firmware/generated/golden.bin",
            ],
        );
    }
    cargo_in("firmware fmt", "firmware", &["fmt", "--", "--check"]);
    cargo_in(
        "firmware clippy",
        "firmware",
        &["clippy", "--release", "--", "-D", "warnings"],
    );
    cargo_in("firmware build", "firmware", &["build", "--release"]);
    // From the root: the firmware's target config must not apply to this host tool.
    run("defmt decoder", "cargo", &DECODER_BUILD);

    let (ok, log) = qemu_run("homeadam-firmware", &[]);
    let result = log
        .lines()
        .find(|l| l.starts_with("fine-tuning result:"))
        .unwrap_or("");
    if !ok || !log.contains("resume check: bit-identical") || !result.ends_with("; PASS") {
        fail("the fine-tuning run failed (accuracy not improved, or resume not bit-identical)");
    }
    println!("xtask: firmware {result}");

    let (ok, log) = qemu_run("golden", &[]);
    let summary = log.lines().find(|l| l.ends_with(" failed")).unwrap_or("");
    if !ok || !summary.ends_with(" passed, 0 failed") {
        fail(&format!("the on-target golden test failed: {summary:?}"));
    }
    println!("xtask: firmware golden test: {summary}");

    // Cost figures for BENCHMARKS.md: one instruction per virtual ns, counted by SysTick.
    let (ok, _) = qemu_run("cost", &["-icount", "shift=0"]);
    if !ok {
        fail("the instruction-count run failed");
    }
}
