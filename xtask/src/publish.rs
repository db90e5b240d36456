//! The publish check: the crates a user adds from crates.io must package, and the core (the
//! crate other no_std learners depend on) must build from its package alone.
//!
//! - `homeadam-core`: `cargo publish --dry-run` (packaged and built from the package, no_std
//!   as a dependent gets it by default);
//! - `homeadam-cuda`, `homeadam-candle`: packaged with the core (`cargo package --no-verify`,
//!   which checks their manifests against the packaged core) and their file lists checked:
//!   every file their sources include (`include_str!`, `include_bytes!`), their build script
//!   and README (where they have them) are in the package. Building them from the package would compile candle once
//!   more for what the workspace's build already proves of their code.
//!
//! The dry run builds through a local registry that cargo unpacks into
//! `$CARGO_HOME/registry/src/-<hash>/`, which is kept from one run to the next although the
//! crates change under the same version (the unpacked files carry a fixed old mtime, so they
//! never look newer than a build): it is removed first, and the build goes to a target
//! directory emptied first, so that every run verifies what the working tree holds.

use std::path::{Path, PathBuf};
use std::process::{exit, Command};

use crate::{cache, fail_exit, run};

/// The published crates, dependencies first.
const CRATES: &[&str] = &["homeadam-core", "homeadam-cuda", "homeadam-candle"];
/// The crates packaged without a build, and their folders.
const PACKAGED_ONLY: &[(&str, &str)] = &[
    ("homeadam-cuda", "backends/cuda"),
    ("homeadam-candle", "backends/candle"),
];

/// Runs the publish check.
pub(crate) fn check() {
    forget_unpacked_crates();
    let target = cache::build_root().join("publish");
    if target.exists() {
        remove(&target);
    }
    let target = target.to_string_lossy();
    run(
        "publish check: homeadam-core",
        "cargo",
        &[
            "publish",
            "--dry-run",
            "--allow-dirty",
            "-p",
            "homeadam-core",
            "--target-dir",
            &target,
        ],
    );
    let mut args = vec!["package", "--no-verify", "--allow-dirty", "--target-dir", &target];
    for name in CRATES {
        args.extend(["-p", name]);
    }
    run("publish check: package every crate", "cargo", &args);
    for &(name, dir) in PACKAGED_ONLY {
        check_file_list(name, dir);
    }
}

/// Fails unless `cargo package --list` of `name` (in `dir`) holds every file its sources
/// include, and its build script and README where it has them.
fn check_file_list(name: &str, dir: &str) {
    let out = Command::new("cargo")
        .args(["package", "--list", "--allow-dirty", "-p", name])
        .output()
        .unwrap_or_else(|e| fail_exit(&format!("cannot run cargo package --list: {e}"), 1));
    if !out.status.success() {
        fail_exit(
            &format!(
                "cargo package --list -p {name}: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
            1,
        );
    }
    let listed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    let root = crate::root().join(dir);
    let mut needed = vec!["Cargo.toml".to_string()];
    for file in ["build.rs", "README.md"] {
        if root.join(file).exists() {
            needed.push(file.into());
        }
    }
    needed.extend(included_files(&root));
    let missing: Vec<&String> = needed.iter().filter(|f| !listed.contains(f)).collect();
    if !missing.is_empty() {
        fail_exit(
            &format!("{name}'s package lacks files its build needs: {missing:?}"),
            1,
        );
    }
    println!(
        "== xtask: publish check: {name} packages {} files, the {} its build needs among them",
        listed.len(),
        needed.len()
    );
}

/// The files that the Rust sources under `root/src` include, relative to `root`.
fn included_files(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    let mut dirs = vec![root.join("src")];
    while let Some(dir) = dirs.pop() {
        for path in entries(&dir) {
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            for macro_call in ["include_str!(\"", "include_bytes!(\""] {
                for (at, _) in text.match_indices(macro_call) {
                    let rest = &text[at + macro_call.len()..];
                    let Some(end) = rest.find('"') else { continue };
                    let file = path.parent().expect("a file's folder").join(&rest[..end]);
                    if let Ok(relative) = normalize(&file).strip_prefix(root) {
                        files.push(relative.to_string_lossy().into_owned());
                    }
                }
            }
        }
    }
    files.sort();
    files.dedup();
    files
}

/// `path` with its `..` and `.` components resolved (without touching the file system).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
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

/// Removes the earlier dry runs' unpacked crates (local registries: `registry/src/-<hash>`).
fn forget_unpacked_crates() {
    let Some(home) = cargo_home() else { return };
    let registries = entries(&home.join("registry/src"))
        .into_iter()
        .filter(|dir| file_name(dir).starts_with('-'));
    for unpacked in registries.flat_map(|r| entries(&r)) {
        if is_published_crate(file_name(&unpacked)) {
            remove(&unpacked);
        }
    }
}
