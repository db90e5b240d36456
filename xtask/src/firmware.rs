//! Firmware checks under QEMU: for each board of [`BOARDS`] (Cortex-M0, M4F, M7, M33 and
//! RV32IMAC), build the firmware, run the fine-tuning app, the on-target golden test and the
//! instruction count, decode their defmt output, and fail unless fine-tuning improves held-out
//! accuracy (and, where the board has the RAM for it, the resumed run is bit-identical) and the
//! golden test reports `N passed, 0 failed`. The real-board build (STM32F405 through a debug
//! probe: RTT, the chip's flash, samples over the UART) is linted and built, not run.

use std::path::Path;
use std::process::{exit, Command, Stdio};
use std::time::Instant;

use crate::run;

/// A QEMU machine the firmware runs on, and how the firmware is built for it.
struct Board {
    /// The firmware's cargo feature for the board (firmware/Cargo.toml).
    feature: &'static str,
    /// Another firmware feature built with it (`q8-state`), in a target directory of its own;
    /// empty for none.
    extra: &'static str,
    /// The Rust target.
    target: &'static str,
    /// Flags added to the target's `rustflags` of firmware/.cargo/config.toml (a TOML array).
    rustflags: &'static str,
    /// The QEMU program and machine.
    qemu: &'static str,
    machine: &'static str,
    /// Whether the fine-tuning app runs the power-cut resume check there (16 KiB boards do not:
    /// firmware/src/board.rs).
    resume_check: bool,
}

const BOARDS: [Board; 7] = [
    Board {
        feature: "netduinoplus2",
        extra: "",
        target: "thumbv7em-none-eabihf",
        rustflags: "",
        qemu: "qemu-system-arm",
        machine: "netduinoplus2",
        resume_check: true,
    },
    Board {
        feature: "microbit",
        extra: "",
        target: "thumbv6m-none-eabi",
        rustflags: "",
        qemu: "qemu-system-arm",
        machine: "microbit",
        resume_check: false,
    },
    Board {
        feature: "mps2-an500",
        extra: "",
        target: "thumbv7em-none-eabihf",
        rustflags: r#"["-C", "target-cpu=cortex-m7"]"#,
        qemu: "qemu-system-arm",
        machine: "mps2-an500",
        resume_check: true,
    },
    Board {
        feature: "mps2-an505",
        extra: "",
        target: "thumbv8m.main-none-eabihf",
        rustflags: "",
        qemu: "qemu-system-arm",
        machine: "mps2-an505",
        resume_check: true,
    },
    Board {
        feature: "sifive-e",
        extra: "",
        target: "riscv32imac-unknown-none-elf",
        rustflags: "",
        qemu: "qemu-system-riscv32",
        machine: "sifive_e",
        resume_check: false,
    },
    // 8-bit optimizer state on the M4F and on a 16 KiB part.
    Board {
        feature: "netduinoplus2",
        extra: "q8-state",
        target: "thumbv7em-none-eabihf",
        rustflags: "",
        qemu: "qemu-system-arm",
        machine: "netduinoplus2",
        resume_check: true,
    },
    Board {
        feature: "microbit",
        extra: "q8-state",
        target: "thumbv6m-none-eabi",
        rustflags: "",
        qemu: "qemu-system-arm",
        machine: "microbit",
        resume_check: false,
    },
];

/// The QEMU board clippy lints the firmware for: with [`REAL_BOARD`] (Arm, 128 KiB, RTT), every
/// `cfg` branch (RISC-V, 16 KiB, semihosting).
const CLIPPY_BOARD: &str = "sifive-e";

/// `cargo build`/`clippy` arguments of the real-board build (firmware/README.md; its own target
/// directory, as its dependencies differ from the QEMU boards' on the same target).
const REAL_BOARD: [&str; 6] = [
    "--release",
    "--no-default-features",
    "--features",
    "stm32f405",
    "--target-dir",
    "target/stm32f405",
];

const DECODER: &str = "firmware/decoder/target/release/homeadam-defmt-decode";
const DECODER_BUILD: [&str; 6] = [
    "build",
    "--release",
    "--manifest-path",
    "firmware/decoder/Cargo.toml",
    "--target-dir",
    "firmware/decoder/target",
];

impl Board {
    fn get(feature: &str, extra: &str) -> &'static Board {
        BOARDS
            .iter()
            .find(|b| b.feature == feature && b.extra == extra)
            .expect("a board of BOARDS")
    }

    /// The target directory, relative to firmware/: a board with its own rustflags or an extra
    /// feature gets its own (the default board's artifacts of the same target stay where
    /// README.md says).
    fn target_dir(&self) -> String {
        match (self.rustflags, self.extra) {
            ("", "") => "target".into(),
            (_, "") => format!("target/{}", self.feature),
            (_, extra) => format!("target/{extra}"),
        }
    }

    /// The `--features` argument: the board's, and the extra one if any.
    fn features(&self) -> String {
        match self.extra {
            "" => self.feature.into(),
            extra => format!("{},{extra}", self.feature),
        }
    }

    /// Runs `cargo <command>` for this board (plus `extra`), in firmware/.
    fn cargo(&self, name: &str, command: &str, extra: &[&str]) {
        let (target_dir, features) = (self.target_dir(), self.features());
        let mut args = vec![command, "--release", "--target", self.target];
        args.extend(["--no-default-features", "--features", &features]);
        args.extend(["--target-dir", &target_dir]);
        let config = format!("target.{}.rustflags={}", self.target, self.rustflags);
        if !self.rustflags.is_empty() {
            args.extend(["--config", &config]);
        }
        args.extend(extra);
        cargo_in(&format!("{name} ({features})"), "firmware", &args);
    }

    fn elf(&self, bin: &str) -> String {
        format!("firmware/{}/{}/release/{bin}", self.target_dir(), self.target)
    }
}

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

/// Installs the QEMU packages whose programs are missing (Debian: `qemu-system-arm`, and
/// `qemu-system-misc` for RISC-V).
fn qemu() {
    let present = |program: &str| {
        Command::new(program)
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let missing: Vec<&str> = [
        ("qemu-system-arm", "qemu-system-arm"),
        ("qemu-system-riscv32", "qemu-system-misc"),
    ]
    .into_iter()
    .filter(|(program, _)| !present(program))
    .map(|(_, package)| package)
    .collect();
    if !missing.is_empty() {
        run("apt index", "apt-get", &["update", "-qq"]);
        let args = [&["install", "-y", "-qq", "--no-install-recommends"], &missing[..]].concat();
        run("qemu", "apt-get", &args);
    }
}

/// Runs `bin` on `board` in QEMU, decodes its defmt log, prints it, and returns (exit ok, log).
fn qemu_run(board: &Board, bin: &str, extra: &[&str]) -> (bool, String) {
    let elf = board.elf(bin);
    let args = [
        &["120", board.qemu, "-machine", board.machine],
        &["-display", "none", "-monitor", "none", "-serial", "none"][..],
        &["-semihosting-config", "enable=on,target=native"],
        extra,
        &["-kernel", &elf],
    ]
    .concat();
    println!("\n== xtask: qemu: timeout {} | {DECODER} {elf}", args.join(" "));
    let start = Instant::now();
    let out = Command::new("timeout")
        .args(&args)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| {
            eprintln!("xtask: cannot run {}: {e}", board.qemu);
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
        "== xtask: qemu {bin} on {}: {} ({:.0} s)",
        board.machine,
        out.status,
        start.elapsed().as_secs_f64()
    );
    (out.status.success() && decoded.status.success(), log)
}

fn fail(what: &str) -> ! {
    eprintln!("xtask: firmware: {what}");
    exit(1)
}

/// Builds the firmware for `board` and runs its three programs there.
fn test_board(board: &Board) {
    board.cargo("firmware build", "build", &[]);
    let (ok, log) = qemu_run(board, "homeadam-firmware", &[]);
    let result = log
        .lines()
        .find(|l| l.starts_with("fine-tuning result:"))
        .unwrap_or("");
    let resumed = !board.resume_check || log.contains("resume check: bit-identical");
    if !ok || !resumed || !result.ends_with("; PASS") {
        fail(&format!(
            "the fine-tuning run on {} failed (accuracy not improved, stack overflow, or resume \
             not bit-identical)",
            board.machine
        ));
    }
    println!("xtask: firmware on {}: {result}", board.machine);

    let (ok, log) = qemu_run(board, "golden", &[]);
    let summary = log.lines().find(|l| l.ends_with(" failed")).unwrap_or("");
    if !ok || !summary.ends_with(" passed, 0 failed") {
        fail(&format!(
            "the on-target golden test on {} failed: {summary:?}",
            board.machine
        ));
    }
    println!("xtask: firmware golden test on {}: {summary}", board.machine);

    // Cost figures for BENCHMARKS.md: one instruction per virtual ns.
    let (ok, _) = qemu_run(board, "cost", &["-icount", "shift=0"]);
    if !ok {
        fail(&format!("the instruction-count run on {} failed", board.machine));
    }
}

/// What building and running the firmware needs: the boards' Rust targets, QEMU, the
/// pretrained weights, the golden vectors and the defmt decoder.
fn prepare() {
    let mut targets: Vec<&str> = BOARDS.iter().map(|b| b.target).collect();
    targets.sort_unstable();
    targets.dedup();
    run(
        "firmware targets",
        "rustup",
        &[&["target", "add"], &targets[..]].concat(),
    );
    qemu();
    if !Path::new("firmware/generated/weights.bin").exists() {
        run("pretraining", "python3", &["firmware/tools/pretrain.py"]);
    }
    // Written every time: the file must hold the cases the firmware is built with.
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
    // From the root: the firmware's target config must not apply to this host tool.
    run("defmt decoder", "cargo", &DECODER_BUILD);
}

/// The `cost` program's lines on the Cortex-M4F (`netduinoplus2` in QEMU, one instruction per
/// virtual ns): "<rule> state <dtype> (<finite check>): <n> instructions per parameter per
/// step", for `cargo xtask bench`.
pub(crate) fn m4f_cost() -> Vec<String> {
    prepare();
    let board = Board::get("netduinoplus2", "");
    board.cargo("firmware build", "build", &[]);
    let (ok, log) = qemu_run(board, "cost", &["-icount", "shift=0"]);
    if !ok {
        fail("the instruction-count run on netduinoplus2 failed");
    }
    log.lines()
        .filter(|l| l.ends_with(" instructions per parameter per step"))
        .map(str::to_string)
        .collect()
}

/// Runs the firmware checks.
pub(crate) fn test() {
    prepare();
    cargo_in("firmware fmt", "firmware", &["fmt", "--", "--check"]);
    Board::get(CLIPPY_BOARD, "").cargo("firmware clippy", "clippy", &["--", "-D", "warnings"]);
    Board::get("microbit", "q8-state").cargo("firmware clippy", "clippy", &["--", "-D", "warnings"]);
    let clippy = [&["clippy"], &REAL_BOARD[..], &["--", "-D", "warnings"]].concat();
    cargo_in("firmware clippy (stm32f405)", "firmware", &clippy);
    cargo_in(
        "firmware build (stm32f405)",
        "firmware",
        &[&["build"], &REAL_BOARD[..]].concat(),
    );
    for board in &BOARDS {
        test_board(board);
    }
}
