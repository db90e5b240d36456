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
//! Cargo decides what to rebuild, as in any target directory, by the sources' modification
//! times, which a fresh clone sets to the time of the clone: every crate of the project would
//! look changed. In CI (`CI` set, where the clone is fresh) [`restore_mtimes`] gives each
//! tracked file whose content (its git blob hash) is the one an earlier run recorded the
//! modification time it had then, which is older than every build made from it; a file whose
//! content differs keeps its new time, so what it feeds is rebuilt. Then the run records the
//! times of this clone's files, before it builds. Only for a clone in the folder of the
//! recorded one: cargo does not rebuild a crate that moved, whose binaries hold its old path
//! (`env!("CARGO_MANIFEST_DIR")`). Outside CI the working tree is left alone: moving a file's
//! time back there could make an older build in its `target/` look fresh.
//!
//! A cache that is corrupt rather than stale costs time, not a wrong result: a stage that fails on a cache that existed
//! before the run is run once more with its build directory emptied ([`crate::stage_retrying`]),
//! and only that second result counts.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::wheels::{NVCC_WHEELS, NVRTC_WHEEL};

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
    parts.push(NVCC_WHEELS.join("\n").into());
    parts.push(NVRTC_WHEEL.into());
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in &parts {
        for &byte in part.iter().chain(&[0xff]) {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

/// The record of the sources' content and modification times, in the cache.
const SOURCES: &str = "sources.tsv";

/// In CI, sets the modification time of every tracked file whose content the cache's record
/// holds to the recorded time, then records this clone's files (module docs). Prints how many
/// kept their recorded time.
pub(crate) fn restore_mtimes(cache: &Cache) {
    if std::env::var_os("CI").is_none() {
        return;
    }
    let files = tracked_files();
    let hashes = blob_hashes(&files);
    let record = cache.dir.join(SOURCES);
    let root = crate::root();
    let text = std::fs::read_to_string(&record).unwrap_or_default();
    let (recorded_root, text) = text.split_once('\n').unwrap_or_default();
    let same_folder = recorded_root == root.to_string_lossy();
    let recorded: HashMap<String, (String, SystemTime)> = text
        .lines()
        .filter(|_| same_folder)
        .filter_map(|line| {
            let mut fields = line.splitn(3, '\t');
            let (hash, nanos, path) = (fields.next()?, fields.next()?, fields.next()?);
            let time = UNIX_EPOCH + Duration::from_nanos(nanos.parse().ok()?);
            Some((path.to_string(), (hash.to_string(), time)))
        })
        .collect();
    let mut restored = 0;
    let mut lines = format!("{}\n", root.to_string_lossy());
    for (path, hash) in files.iter().zip(&hashes) {
        let full = root.join(path);
        if let Some((old_hash, time)) = recorded.get(path) {
            if old_hash == hash
                && std::fs::File::open(&full)
                    .and_then(|f| f.set_modified(*time))
                    .is_ok()
            {
                restored += 1;
            }
        }
        let Ok(time) = std::fs::metadata(&full).and_then(|m| m.modified()) else {
            continue;
        };
        let nanos = time.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
        lines += &format!("{hash}\t{nanos}\t{path}\n");
    }
    let temporary = cache.dir.join(format!("{SOURCES}.tmp"));
    if let Err(e) = std::fs::write(&temporary, lines).and_then(|()| std::fs::rename(&temporary, &record)) {
        eprintln!("xtask: cannot record the sources in {}: {e}", record.display());
    }
    println!(
        "== xtask: {restored} of {} tracked files have the content an earlier run built: their modification times restored",
        files.len()
    );
}

/// The files git tracks, relative to the root.
fn tracked_files() -> Vec<String> {
    let out = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(crate::root())
        .output();
    match out {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
            .split('\0')
            .filter(|p| !p.is_empty() && crate::root().join(p).is_file())
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

/// The git blob hash of each file's content in the working tree, in order.
fn blob_hashes(files: &[String]) -> Vec<String> {
    let fail = |e: String| -> ! {
        eprintln!("xtask: git hash-object: {e}");
        std::process::exit(1)
    };
    let mut child = Command::new("git")
        .args(["hash-object", "--no-filters", "--stdin-paths"])
        .current_dir(crate::root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| fail(e.to_string()));
    let mut stdin = child.stdin.take().expect("piped stdin");
    let paths = files.join("\n") + "\n";
    let writer = std::thread::spawn(move || stdin.write_all(paths.as_bytes()));
    let out = child.wait_with_output().unwrap_or_else(|e| fail(e.to_string()));
    if !matches!(writer.join(), Ok(Ok(()))) || !out.status.success() {
        fail(format!("failed ({})", out.status));
    }
    let hashes: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    if hashes.len() != files.len() {
        fail(format!("{} hashes for {} files", hashes.len(), files.len()));
    }
    hashes
}
