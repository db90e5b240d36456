//! The publish check: the crates a user adds from crates.io must package and build on their own
//! (`cargo publish --dry-run`).
//!
//! The dry run verifies each crate against the others as packaged, through a local registry
//! that cargo unpacks into `$CARGO_HOME/registry/src/-<hash>/` and builds into `target/debug`.
//! Both are kept from one run to the next although the crates change under the same version
//! (the unpacked files carry a fixed old mtime, so they never look newer than the build): a
//! second run would verify against the first run's crates. Removing them first makes every run
//! verify what the working tree holds, as on a fresh clone.

use std::path::{Path, PathBuf};
use std::process::exit;

use crate::run;

/// The published crates, dependencies first.
const CRATES: &[&str] = &["homeadam-core", "homeadam-cuda", "homeadam-candle"];

/// Runs the dry run of every published crate.
pub(crate) fn check() {
    forget_packaged_builds();
    let mut args = vec!["publish", "--dry-run", "--allow-dirty"];
    for name in CRATES {
        args.extend(["-p", name]);
    }
    run("publish check", "cargo", &args);
}

fn cargo_home() -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cargo")))
}

fn remove(path: &Path) {
    if let Err(e) = std::fs::remove_dir_all(path) {
        eprintln!("xtask: cannot remove {}: {e}", path.display());
        exit(1);
    }
}

/// The entries of `dir` (none if it cannot be read).
fn entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default()
}

fn file_name(path: &Path) -> &str {
    path.file_name().and_then(|n| n.to_str()).unwrap_or("")
}

/// Whether `name` (`homeadam-core-0.1.0`, `homeadam_core-4513000e97e3b44f.d`) is one of
/// [`CRATES`], with `-` or `_` in its name.
fn is_published_crate(name: &str) -> bool {
    let name = name.replace('_', "-");
    CRATES.iter().any(|c| name.starts_with(&format!("{c}-")))
}

/// Removes the earlier dry runs' unpacked crates (local registries: `registry/src/-<hash>`)
/// and the `target/debug` builds made from them.
fn forget_packaged_builds() {
    let Some(home) = cargo_home() else { return };
    let registries: Vec<PathBuf> = entries(&home.join("registry/src"))
        .into_iter()
        .filter(|dir| file_name(dir).starts_with('-'))
        .collect();
    for unpacked in registries.iter().flat_map(|r| entries(r)) {
        if is_published_crate(file_name(&unpacked)) {
            remove(&unpacked);
        }
    }
    let debug = Path::new("target/debug");
    for dep_info in entries(&debug.join("deps")) {
        let name = file_name(&dep_info);
        let Some(stem) = name.strip_suffix(".d").filter(|_| is_published_crate(name)) else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(&dep_info) else {
            continue;
        };
        if registries.iter().any(|r| text.contains(&*r.to_string_lossy())) {
            let fingerprint = debug.join(".fingerprint").join(stem.replace('_', "-"));
            if fingerprint.exists() {
                remove(&fingerprint);
            }
        }
    }
}
