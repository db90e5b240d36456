//! The Debian packages the checks need (QEMU for the firmware and aarch64, the aarch64 cross
//! linker and C library), installed in one `apt-get` call on a thread while the first stages
//! build: the download overlaps the compilation.

use std::process::{Command, Stdio};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::stages;

/// An installation in progress.
pub(crate) struct Install(Option<JoinHandle<Result<String, String>>>);

/// Whether `program --version` runs and succeeds.
pub(crate) fn present(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Starts installing `missing` (nothing to do: no thread).
pub(crate) fn install_packages_in_background(missing: Vec<&'static str>) -> Install {
    if missing.is_empty() {
        return Install(None);
    }
    println!(
        "\n== xtask: installing in the background: apt-get install {}",
        missing.join(" ")
    );
    Install(Some(std::thread::spawn(move || {
        let start = Instant::now();
        let apt = |args: &[&str]| -> Result<String, String> {
            let out = Command::new("apt-get")
                .args(args)
                .output()
                .map_err(|e| format!("cannot run apt-get: {e}"))?;
            let text =
                String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
            if out.status.success() {
                Ok(text)
            } else {
                Err(format!(
                    "apt-get {} failed ({}):\n{text}",
                    args.join(" "),
                    out.status
                ))
            }
        };
        let mut log = apt(&["update", "-qq"])?;
        let install = [&["install", "-y", "-qq", "--no-install-recommends"], &missing[..]].concat();
        log += &apt(&install)?;
        stages::record("Debian packages (background)", start.elapsed().as_secs_f64());
        Ok(log)
    })))
}

impl Install {
    /// Waits for the installation; exits on failure.
    pub(crate) fn join(self) {
        let Some(thread) = self.0 else { return };
        match thread.join().expect("the apt thread does not panic") {
            Ok(log) => println!("\n== xtask: Debian packages installed\n{log}"),
            Err(e) => crate::fail_exit(&e, 1),
        }
    }
}
