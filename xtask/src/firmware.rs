//! Firmware checks under QEMU: for each board of [`BOARDS`] (Cortex-M0, M4F, M7, M33 and
//! RV32IMAC), build the firmware, run the fine-tuning app, the on-target golden test and the
//! instruction count, decode their defmt output, and fail unless fine-tuning improves held-out
//! accuracy (and, where the board has the RAM for it, the resumed run is bit-identical) and the
//! golden test reports `N passed, 0 failed`. On the STM32F405 model the UART app runs too, fed
//! through QEMU's serial port by `homeadam send-samples` ([`uart_run`]). The real-board build
//! (STM32F405 through a debug probe: RTT, the chip's flash, samples over the UART) is linted and
//! built, not run; what it must run from RAM is checked in its ELF ([`check_ram_functions`]).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{exit, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::{cache, run, stage_retrying, stages, system, PROFILE};

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
    /// Whether the machine is the STM32F405 (firmware feature `usart2`), where the UART app
    /// runs too.
    uart: bool,
}

/// The STM32F405 model (Cortex-M4F, 128 KiB).
const NETDUINO: Board = Board {
    feature: "netduinoplus2",
    extra: "",
    target: "thumbv7em-none-eabihf",
    rustflags: "",
    qemu: "qemu-system-arm",
    machine: "netduinoplus2",
    resume_check: true,
    uart: true,
};

/// The nRF51 model (Cortex-M0, 16 KiB).
const MICROBIT: Board = Board {
    feature: "microbit",
    target: "thumbv6m-none-eabi",
    machine: "microbit",
    resume_check: false,
    uart: false,
    ..NETDUINO
};

/// The SiFive E model (RV32IMAC, 16 KiB).
const SIFIVE_E: Board = Board {
    feature: "sifive-e",
    target: "riscv32imac-unknown-none-elf",
    qemu: "qemu-system-riscv32",
    machine: "sifive_e",
    ..MICROBIT
};

/// `board` with 8-bit optimizer state.
const fn q8_state(board: Board) -> Board {
    Board {
        extra: "q8-state",
        ..board
    }
}

const BOARDS: [Board; 8] = [
    NETDUINO,
    MICROBIT,
    Board {
        feature: "mps2-an500",
        rustflags: r#"["-C", "target-cpu=cortex-m7"]"#,
        machine: "mps2-an500",
        uart: false,
        ..NETDUINO
    },
    Board {
        feature: "mps2-an505",
        target: "thumbv8m.main-none-eabihf",
        machine: "mps2-an505",
        uart: false,
        ..NETDUINO
    },
    SIFIVE_E,
    // 8-bit optimizer state on the M4F and on both 16 KiB parts.
    q8_state(NETDUINO),
    q8_state(MICROBIT),
    q8_state(SIFIVE_E),
];

/// The QEMU board clippy lints the firmware for: with [`REAL_BOARD`] (Arm, 128 KiB, RTT) and
/// `netduinoplus2` (the UART app under QEMU), every `cfg` branch (RISC-V, 16 KiB, semihosting).
const CLIPPY_BOARD: &str = "sifive-e";

/// `cargo build`/`clippy` arguments of the real-board build (firmware/README.md), without its
/// target directory: its own (`stm32f405` under [`builds`]), as its dependencies differ from
/// the QEMU boards' on the same target.
const REAL_BOARD: [&str; 4] = ["--release", "--no-default-features", "--features", "stm32f405"];

/// The folder of the firmware's target directories: `firmware/target` (where firmware/README.md
/// says), or `firmware` in the build cache of `cargo xtask test`.
fn builds() -> PathBuf {
    match std::env::var_os(cache::BUILD_ROOT) {
        Some(_) => cache::build_root().join("firmware"),
        None => crate::root().join("firmware/target"),
    }
}

/// The defmt decoder's target directory.
fn decoder_target() -> PathBuf {
    match std::env::var_os(cache::BUILD_ROOT) {
        Some(_) => cache::build_root().join("decoder"),
        None => crate::root().join("firmware/decoder/target"),
    }
}

fn decoder() -> PathBuf {
    decoder_target().join("debug/homeadam-defmt-decode")
}

impl Board {
    fn get(feature: &str, extra: &str) -> &'static Board {
        BOARDS
            .iter()
            .find(|b| b.feature == feature && b.extra == extra)
            .expect("a board of BOARDS")
    }

    /// The target directory: a board with its own rustflags or an extra feature gets its own
    /// (the default board's artifacts of the same target stay where README.md says).
    fn target_dir(&self) -> PathBuf {
        match (self.rustflags, self.extra) {
            ("", "") => builds(),
            (_, "") => builds().join(self.feature),
            (_, extra) => builds().join(extra),
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
        let config = format!("target.{}.rustflags={}", self.target, self.rustflags);
        if !self.rustflags.is_empty() {
            args.extend(["--config", &config]);
        }
        args.extend(extra);
        cargo_in(&format!("{name} ({features})"), &target_dir, &args);
    }

    fn elf(&self, bin: &str) -> String {
        let elf = self.target_dir().join(self.target).join("release").join(bin);
        elf.to_string_lossy().into_owned()
    }
}

/// Runs `cargo args --target-dir target_dir` in firmware/ (its own `.cargo/config.toml`
/// applies there), as [`stage_retrying`].
fn cargo_in(name: &str, target_dir: &Path, args: &[&str]) {
    let dir = target_dir.to_string_lossy();
    let (head, tail) = args.split_at(args.iter().position(|&a| a == "--").unwrap_or(args.len()));
    let args = [head, &["--target-dir", &dir], tail].concat();
    stage_retrying(name, target_dir, || {
        crate::try_command(
            name,
            Command::new("cargo")
                .args(&args)
                .current_dir(crate::root().join("firmware"))
                .env_remove("CARGO_TARGET_DIR"),
        )
    });
}

/// The Debian packages of the QEMU programs that are missing (`qemu-system-arm`, and
/// `qemu-system-misc` for RISC-V).
pub(crate) fn missing_packages() -> Vec<&'static str> {
    [
        ("qemu-system-arm", "qemu-system-arm"),
        ("qemu-system-riscv32", "qemu-system-misc"),
    ]
    .into_iter()
    .filter(|(program, _)| !system::present(program))
    .map(|(_, package)| package)
    .collect()
}

/// The `timeout` arguments that run `elf` on `board` in QEMU for at most two minutes, with
/// `extra` QEMU arguments; printed with the decoder.
fn qemu_args(board: &Board, elf: &str, extra: &[&str]) -> Vec<String> {
    let args: Vec<String> = [
        &["120", board.qemu, "-machine", board.machine],
        &["-display", "none", "-monitor", "none", "-serial", "none"][..],
        &["-semihosting-config", "enable=on,target=native"],
        extra,
        &["-kernel", elf],
    ]
    .concat()
    .into_iter()
    .map(String::from)
    .collect();
    println!(
        "\n== xtask: qemu: timeout {} | {} {elf}",
        args.join(" "),
        decoder().display()
    );
    args
}

/// Decodes the defmt stream `frames` of `elf` and prints it; returns (decoded, log).
fn decode(elf: &str, frames: &[u8]) -> (bool, String) {
    let mut decoder = Command::new(decoder())
        .arg(elf)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            eprintln!("xtask: cannot run {}: {e}", decoder().display());
            exit(1)
        });
    if let Some(mut stdin) = decoder.stdin.take() {
        let _ = stdin.write_all(frames);
    }
    let decoded = decoder.wait_with_output().unwrap_or_else(|e| {
        eprintln!("xtask: defmt decoder: {e}");
        exit(1)
    });
    let log = String::from_utf8_lossy(&decoded.stdout).into_owned();
    print!("{log}");
    (decoded.status.success(), log)
}

/// Runs `bin` on `board` in QEMU, decodes its defmt log, prints it, and returns (exit ok, log).
fn qemu_run(board: &Board, bin: &str, extra: &[&str]) -> (bool, String) {
    let elf = board.elf(bin);
    let args = qemu_args(board, &elf, extra);
    let start = Instant::now();
    let out = Command::new("timeout")
        .args(&args)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| {
            eprintln!("xtask: cannot run {}: {e}", board.qemu);
            exit(1)
        });
    let (decoded, log) = decode(&elf, &out.stdout);
    println!(
        "== xtask: qemu {bin} on {}: {} ({:.0} s)",
        board.machine,
        out.status,
        start.elapsed().as_secs_f64()
    );
    (out.status.success() && decoded, log)
}

/// `homeadam send-samples`: the workspace's `homeadam` in the `ci` profile (built by
/// `cargo xtask test` before the firmware lane starts, or by [`build_sender`]).
fn sender() -> PathBuf {
    cache::workspace_target().join(PROFILE).join("homeadam")
}

/// Builds [`sender`], linted as the workspace's other builds into that target directory.
fn build_sender() {
    let args = [
        "build",
        "--profile",
        PROFILE,
        "-p",
        "homeadam-host",
        "--bin",
        "homeadam",
    ];
    let name = "homeadam send-samples";
    stage_retrying(name, &cache::workspace_target(), || {
        crate::try_command(
            name,
            crate::lint::while_building(Command::new("cargo").args(args)),
        )
    });
}

/// Runs the UART app on `board` with USART2 on QEMU's second serial port, a pair of FIFOs
/// (`pipe:`), and streams the fine-tuning set into it, twice and unpaced, with `homeadam
/// send-samples` once the app has announced itself on USART2's TX (QEMU drops what arrives
/// before the app enables the receiver). Fails unless the app trained on every frame sent,
/// none was bad, no byte was lost, and it ends at `accuracy`, the held-out accuracy of the
/// embedded run (the same samples in the same order).
fn uart_run(board: &Board, accuracy: &str) {
    let elf = board.elf("board");
    let dir = board.target_dir().join("usart2");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| fail(&format!("{}: {e}", dir.display())));
    let (input, output) = (dir.join("usart2.in"), dir.join("usart2.out"));
    for fifo in [&input, &output] {
        run("mkfifo", "mkfifo", &[&fifo.to_string_lossy()]);
    }
    let serial = format!("pipe:{}", dir.join("usart2").display());
    // The second `-serial` (after [`qemu_args`]'s `none` for USART1) is USART2.
    let args = qemu_args(board, &elf, &["-serial", &serial]);
    let start = Instant::now();
    let mut qemu = Command::new("timeout")
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| fail(&format!("cannot run {}: {e}", board.qemu)));
    let mut stdout = qemu.stdout.take().unwrap_or_else(|| fail("QEMU's stdout"));
    let frames = std::thread::spawn(move || {
        let mut frames = Vec::new();
        let _ = stdout.read_to_end(&mut frames);
        frames
    });
    // Read and write: opening a FIFO so never blocks, whether or not QEMU has opened it.
    let mut tx = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&output)
        .unwrap_or_else(|e| fail(&format!("{}: {e}", output.display())));
    let (ready, announced) = mpsc::channel();
    std::thread::spawn(move || {
        let mut byte = [0u8];
        let _ = ready.send(tx.read_exact(&mut byte).map(|()| byte[0]));
    });
    if !matches!(announced.recv_timeout(Duration::from_secs(60)), Ok(Ok(0))) {
        // SIGTERM to `timeout`, which passes it on to QEMU.
        let _ = Command::new("kill").arg(qemu.id().to_string()).status();
        fail(&format!(
            "the UART app on {} never announced itself on USART2",
            board.machine
        ));
    }
    // Under `timeout`: a writer's open of a FIFO waits for a reader, and QEMU may be gone.
    let (program, port) = (sender(), input.to_string_lossy());
    let send = [
        "120",
        &program.to_string_lossy(),
        "send-samples",
        "--port",
        &port,
        "--passes",
        "2",
    ];
    println!("== xtask: timeout {}", send.join(" "));
    let sent = Command::new("timeout").args(send).output();
    let status = qemu.wait();
    let (decoded, log) = decode(&elf, &frames.join().unwrap_or_default());
    println!(
        "== xtask: qemu board on {}: {:?} ({:.0} s)",
        board.machine,
        status,
        start.elapsed().as_secs_f64()
    );
    let sent = match sent {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        Ok(out) => fail(&format!("send-samples: {}", String::from_utf8_lossy(&out.stderr))),
        Err(e) => fail(&format!("cannot run {}: {e}", program.display())),
    };
    print!("{sent}");
    let frames_sent = sent
        .strip_prefix("sent ")
        .and_then(|r| r.split(' ').next())
        .unwrap_or("?");
    let result = log.lines().find(|l| l.starts_with("UART result:")).unwrap_or("");
    let expected = format!(
        "UART result: trained on {frames_sent} samples in 120 steps; bad frames 0, queue \
         overflows 0, UART errors 0; held-out accuracy "
    );
    let ok = status.is_ok_and(|s| s.success()) && decoded;
    if !ok || !result.starts_with(&expected) || !result.ends_with(&format!(" -> {accuracy} per mille; PASS"))
    {
        fail(&format!(
            "the UART app on {} did not train on all {frames_sent} frames sent, lost bytes, or \
             did not reach the embedded run's {accuracy} per mille: {result:?}",
            board.machine
        ));
    }
    println!("xtask: firmware UART app on {}: {result}", board.machine);
}

fn fail(what: &str) -> ! {
    eprintln!("xtask: firmware: {what}");
    exit(1)
}

/// Builds the firmware for `board` and runs its three programs there.
fn test_board(board: &Board) {
    board.cargo("firmware build", "build", &[]);
    let start = Instant::now();
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
    if board.uart {
        let after = log
            .lines()
            .find_map(|l| l.strip_prefix("held-out accuracy after 120 steps: "))
            .and_then(|l| l.strip_suffix(" per mille"))
            .unwrap_or_else(|| fail("the fine-tuning run logged no accuracy after 120 steps"));
        uart_run(board, after);
    }

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
    stages::record(
        &format!("firmware QEMU runs ({})", board.features()),
        start.elapsed().as_secs_f64(),
    );
}

/// The functions of the real board's `board` ELF that run while its flash erases or programs:
/// USART2's handler and the flash driver's waits (firmware/src/usart.rs, flash.rs).
const RAM_FUNCTIONS: [&str; 3] = ["USART2", "erase_in_ram", "program_in_ram"];

/// Where the STM32F405's RAM begins: every fetch below it (the flash) stalls during an erase.
const RAM: u64 = 0x2000_0000;

/// Fails unless each of [`RAM_FUNCTIONS`] is in `elf`'s RAM and neither calls anything nor
/// branches out of RAM (`llvm-nm` and `llvm-objdump` of rustup's `llvm-tools`): a call left out
/// of line, say the queue's `enqueue`, would run from the flash and stall the receiving during
/// an erase.
fn check_ram_functions(elf: &Path) {
    run("llvm-tools", "rustup", &["component", "add", "llvm-tools"]);
    // `address size type name` of every symbol.
    let symbols = llvm_tool("llvm-nm", &["-S", "-n"], elf);
    for f in RAM_FUNCTIONS {
        let found = symbols.lines().find_map(|l| {
            let [address, size, _, name] = l.split_whitespace().collect::<Vec<_>>()[..] else {
                return None;
            };
            let hex = |h| u64::from_str_radix(h, 16).ok();
            // The function itself, not a linker's thunk to it (`__Thumbv7ABSLongThunk_…`).
            let named = name == f || name.starts_with("_ZN") && name.contains(f);
            named.then_some((hex(address)?, hex(size)?))
        });
        let Some((address, size)) = found.filter(|&(a, _)| a >= RAM) else {
            fail(&format!("{f} is not in the RAM of {}", elf.display()))
        };
        let range = [
            format!("--start-address={address:#x}"),
            format!("--stop-address={:#x}", address + size),
        ];
        let listing = llvm_tool(
            "llvm-objdump",
            &["-d", "--no-show-raw-insn", &range[0], &range[1]],
            elf,
        );
        // An instruction: `20000004:      \tmovw\tr0, #17408`.
        let instructions = listing.lines().filter_map(|l| {
            let (address, instruction) = l.split_once(':')?;
            u64::from_str_radix(address.trim(), 16).ok()?;
            Some(instruction.trim())
        });
        let mut count = 0;
        for instruction in instructions {
            count += 1;
            let mut words = instruction.split_whitespace();
            let (mnemonic, operand) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
            let target = instruction
                .split_whitespace()
                .find_map(|w| w.strip_prefix("0x"))
                .and_then(|t| u64::from_str_radix(t, 16).ok());
            let leaves = match mnemonic {
                m if m.starts_with("bl") => true,
                "bx" => operand != "lr",
                m if is_branch(m) => target.is_none_or(|t| t < RAM),
                _ => false,
            };
            if leaves {
                fail(&format!("{f} in RAM leaves RAM: `{instruction}`"));
            }
        }
        if count == 0 {
            fail(&format!("no instructions of {f} in {}", elf.display()));
        }
    }
    println!("xtask: firmware (stm32f405): {RAM_FUNCTIONS:?} in RAM, no call or branch out of it");
}

/// The output of rustup's `llvm-tools` program `name` with `args` on `elf`.
fn llvm_tool(name: &str, args: &[&str], elf: &Path) -> String {
    let output = |args: &[&str]| Command::new("rustc").args(args).output().ok();
    let (Some(sysroot), Some(host)) = (
        output(&["--print", "sysroot"]),
        output(&["--print", "host-tuple"]),
    ) else {
        fail("cannot run rustc")
    };
    let program = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim())
        .join("lib/rustlib")
        .join(String::from_utf8_lossy(&host.stdout).trim())
        .join("bin")
        .join(name);
    match Command::new(&program).args(args).arg(elf).output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        Ok(out) => fail(&format!("{name}: {}", String::from_utf8_lossy(&out.stderr))),
        Err(e) => fail(&format!("cannot run {}: {e}", program.display())),
    }
}

/// Whether `mnemonic` is a direct branch: `b`, `cbz`, `cbnz` or a conditional `b`, with or
/// without a width suffix.
fn is_branch(mnemonic: &str) -> bool {
    const CONDITIONS: [&str; 16] = [
        "eq", "ne", "cs", "hs", "cc", "lo", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt", "gt", "le",
    ];
    let m = mnemonic.trim_end_matches(".w").trim_end_matches(".n");
    m == "b" || m == "cbz" || m == "cbnz" || m.strip_prefix('b').is_some_and(|c| CONDITIONS.contains(&c))
}

/// The boards' Rust targets.
pub(crate) fn targets() -> Vec<&'static str> {
    let mut targets: Vec<&str> = BOARDS.iter().map(|b| b.target).collect();
    targets.sort_unstable();
    targets.dedup();
    targets
}

/// Writes the golden vectors the firmware embeds (every time: the file must hold the cases the
/// firmware is built with), from the workspace in the `ci` profile.
pub(crate) fn golden_vectors() {
    if !Path::new("firmware/generated/weights.bin").exists() {
        run("pretraining", "python3", &["firmware/tools/pretrain.py"]);
    }
    let args = [
        "run",
        "--profile",
        PROFILE,
        "-p",
        "homeadam-mcu",
        "--example",
        "golden",
        "--",
        "firmware/generated/golden.bin",
    ];
    stage_retrying("golden vectors", &cache::workspace_target(), || {
        crate::try_run("golden vectors", "cargo", &args)
    });
}

/// The firmware's formatting check.
pub(crate) fn format() {
    run(
        "firmware fmt",
        "cargo",
        &["fmt", "--manifest-path", "firmware/Cargo.toml", "--", "--check"],
    );
}

/// What building and running the firmware needs: the boards' Rust targets, QEMU, the
/// pretrained weights and the golden vectors ([`boards`] builds the defmt decoder).
fn prepare() {
    run(
        "firmware targets",
        "rustup",
        &[&["target", "add"], &targets()[..]].concat(),
    );
    system::install_packages_in_background(missing_packages()).join();
    golden_vectors();
}

/// Builds the defmt decoder, from the root: the firmware's target config must not apply to
/// this host tool. Unoptimized (its manifest's dev profile): it decodes a few kilobytes per
/// run, and an optimized build of its dependencies costs minutes of a cold run.
fn build_decoder() {
    let target = decoder_target();
    let dir = target.to_string_lossy();
    let args = [
        "build",
        "--manifest-path",
        "firmware/decoder/Cargo.toml",
        "--target-dir",
        &dir,
    ];
    stage_retrying("defmt decoder", &target, || {
        crate::try_run("defmt decoder", "cargo", &args)
    });
}

/// The `cost` program's lines on the Cortex-M4F (`netduinoplus2` in QEMU, one instruction per
/// virtual ns), `<rule> state <dtype> (<finite check>): <n> instructions per parameter per
/// step`, for `cargo xtask bench`.
pub(crate) fn m4f_cost() -> Vec<String> {
    prepare();
    build_decoder();
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

/// `cargo xtask firmware`: the firmware checks of `cargo xtask test` alone.
pub(crate) fn test() {
    prepare();
    build_sender();
    format();
    boards();
}

/// The firmware's lints, the real board's build, and every QEMU board's build and runs (the
/// targets, QEMU and the golden vectors in place: `cargo xtask test` runs this as a lane).
pub(crate) fn boards() {
    build_decoder();
    Board::get(CLIPPY_BOARD, "").cargo("firmware clippy", "clippy", &["--", "-D", "warnings"]);
    Board::get("microbit", "q8-state").cargo("firmware clippy", "clippy", &["--", "-D", "warnings"]);
    // The UART app's QEMU build (feature `usart2` with `qemu`).
    Board::get("netduinoplus2", "q8-state").cargo("firmware clippy", "clippy", &["--", "-D", "warnings"]);
    let real_board = builds().join("stm32f405");
    let clippy = [&["clippy"], &REAL_BOARD[..], &["--", "-D", "warnings"]].concat();
    cargo_in("firmware clippy (stm32f405)", &real_board, &clippy);
    cargo_in(
        "firmware build (stm32f405)",
        &real_board,
        &[&["build"], &REAL_BOARD[..]].concat(),
    );
    check_ram_functions(&real_board.join("thumbv7em-none-eabihf/release/board"));
    for board in &BOARDS {
        test_board(board);
    }
}
