//! The build cache of `cargo xtask test`: every build directory of the run (the workspace's,
//! the CUDA host's and its toolkit, the firmware's, the defmt decoder's, the fuzz workspace's)
//! lives in one folder outside the clone, kept from run to run like a hosted CI's cache, so that
//! a second run on the same machine rebuilds only the project's own crates.
//!
//! The folder is `$HOMEADAM_CACHE` or `$XDG_CACHE_HOME/homeadam-rs` (else `~/.cache/homeadam-rs`)
//! `/ci-KEY`, where KEY hashes what the dependencies' builds depend on: every `Cargo.lock`, both
//! toolchains' `rustc -vV`, the pinned CUDA wheels and [`FORMAT`]. A new key starts an empty
//! folder and removes the other `ci-*` folders (a machine keeps one cache).
//!
//! Cargo decides what to rebuild, as in any target directory. A cache that is corrupt rather
//! than stale costs time, not a wrong result: a stage that fails on a cache that existed
//! before the run is run once more with its build directory emptied ([`crate::stage_retrying`]),
//! and only that second result counts.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{build_cuda, cuda};

/// Changes when the cache's layout does.
const FORMAT: &str = "1";

/// The variable that points every build directory of `cargo xtask` somewhere other than the
/// clone's `target/` (set by [`open`] for the run and its lanes).
pub(crate) const BUILD_ROOT: &str = "HOMEADAM_BUILD_ROOT";

/// The cache's folder, whether it existed before this run.
pub(crate) struct Cache {
    pub(crate) dir: PathBuf,
    pub(crate) warm: bool,
}

/// The folder every build directory of the run lives in: [`BUILD_ROOT`] if set, else the
/// clone's `target/`.
pub(crate) fn build_root() -> PathBuf {
    match std::env::var_os(BUILD_ROOT) {
        Some(dir) => PathBuf::from(dir),
        None => crate::root().join("target"),
    }
}

/// The workspace's target directory under the build root.
pub(crate) fn workspace_target() -> PathBuf {
    build_root().join("workspace")
}

/// Opens (creates) the cache for this machine's toolchains and lock files, removes caches of
/// other keys, and points this process's builds and its children's at it.
pub(crate) fn open() -> Cache {
    let base = match std::env::var_os("HOMEADAM_CACHE") {
        Some(dir) => PathBuf::from(dir),
        None => std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
            .unwrap_or_else(|| crate::root().join("target"))
            .join("homeadam-rs"),
    };
    let name = format!("ci-{:016x}", key());
    let dir = base.join(&name);
    let warm = dir.join("workspace").is_dir();
    for entry in std::fs::read_dir(&base).into_iter().flatten().flatten() {
        let other = entry.file_name().to_string_lossy().into_owned();
        if other.starts_with("ci-") && other != name {
            println!(
                "== xtask: removing the cache of another key: {}",
                entry.path().display()
            );
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("xtask: cannot create the cache {}: {e}", dir.display());
        std::process::exit(1);
    }
    println!(
        "== xtask: build cache {} ({})",
        dir.display(),
        if warm { "warm" } else { "empty" }
    );
    std::env::set_var(BUILD_ROOT, &dir);
    std::env::set_var("CARGO_TARGET_DIR", dir.join("workspace"));
    Cache { dir, warm }
}

/// FNV-1a of the inputs that the cached dependency builds depend on.
fn key() -> u64 {
    let root = crate::root();
    let mut parts: Vec<Vec<u8>> = vec![FORMAT.into()];
    for lock in [
        "Cargo.lock",
        "fuzz/Cargo.lock",
        "firmware/Cargo.lock",
        "firmware/decoder/Cargo.lock",
    ] {
        parts.push(std::fs::read(root.join(lock)).unwrap_or_default());
    }
    let rustc = Command::new("rustc").arg("-vV").output();
    parts.push(rustc.map(|o| o.stdout).unwrap_or_default());
    parts.push(build_cuda::WHEELS.join("\n").into());
    parts.push(cuda::NVRTC_WHEEL.into());
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in &parts {
        for &byte in part.iter().chain(&[0xff]) {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}
