//! Background lanes of `cargo xtask test`: stages with build directories of their own (the
//! CUDA host, the firmware, aarch64), or that only run what the main lane built (the CUDA
//! tests), run as a child `xtask lane NAME` beside the main lane, their output
//! in a log that is printed when the lane is joined. On two cores this fills the time the main
//! lane leaves a core idle (QEMU, test runs, links, downloads).
//!
//! A lane runs in its own process group and ends it when its parent is gone, so that a failing
//! or killed main lane leaves no build running behind it.

use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{exit, Child, Command};
use std::time::{Duration, Instant};

use crate::stages;

/// A running lane.
pub(crate) struct Lane {
    name: &'static str,
    child: Child,
    log: PathBuf,
    stages_file: PathBuf,
    start: Instant,
}

/// Starts `xtask lane NAME` with its output in `<build root>/logs/NAME.log`.
pub(crate) fn spawn(name: &'static str) -> Lane {
    spawn_with(name, &[])
}

/// Starts `xtask lane NAME ARGS…`, as [`spawn`].
pub(crate) fn spawn_with(name: &'static str, args: &[&OsStr]) -> Lane {
    let logs = crate::cache::build_root().join("logs");
    let fail = |e: std::io::Error| -> ! {
        eprintln!("xtask: cannot start the {name} lane: {e}");
        exit(1)
    };
    std::fs::create_dir_all(&logs).unwrap_or_else(|e| fail(e));
    let log = logs.join(format!("{name}.log"));
    let stages_file = logs.join(format!("{name}.stages"));
    let _ = std::fs::remove_file(&stages_file);
    let out = File::create(&log).unwrap_or_else(|e| fail(e));
    let err = out.try_clone().unwrap_or_else(|e| fail(e));
    let exe = std::env::current_exe().unwrap_or_else(|e| fail(e));
    let child = Command::new(exe)
        .args(["lane", name])
        .args(args)
        .env(stages::LANE, name)
        .env(stages::STAGES_FILE, &stages_file)
        .env("CARGO_TERM_PROGRESS_WHEN", "never")
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| fail(e));
    println!(
        "\n== xtask: lane {name} started in the background (log: {})",
        log.display()
    );
    Lane {
        name,
        child,
        log,
        stages_file,
        start: Instant::now(),
    }
}

impl Lane {
    /// Waits for the lane, prints its log and adds its stages to the table; exits on failure.
    pub(crate) fn join(self) {
        let name = self.name;
        if !self.passed() {
            crate::fail_exit(&format!("lane {name} failed"), 1);
        }
    }

    /// Waits for the lane, prints its log and adds its stages to the table; whether it passed.
    pub(crate) fn passed(mut self) -> bool {
        let waited = Instant::now();
        let status = self.child.wait().unwrap_or_else(|e| {
            eprintln!("xtask: lane {}: {e}", self.name);
            exit(1)
        });
        stages::record(
            &format!("waiting for lane {}", self.name),
            waited.elapsed().as_secs_f64(),
        );
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        println!("\n== xtask: lane {}: its log ({})", self.name, self.log.display());
        print!("{log}");
        stages::read_lane_file(&self.stages_file);
        println!(
            "== xtask: lane {}: {status} after {:.0} s",
            self.name,
            self.start.elapsed().as_secs_f64()
        );
        status.success()
    }
}

/// In a lane: ends the lane's process group once the parent is gone (its parent id changes).
pub(crate) fn watch_parent() {
    let parent = std::os::unix::process::parent_id();
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(1));
        if std::os::unix::process::parent_id() != parent {
            eprintln!("xtask: lane: the main lane is gone; stopping");
            let group = format!("-{}", std::process::id());
            let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
            exit(1);
        }
    });
}
