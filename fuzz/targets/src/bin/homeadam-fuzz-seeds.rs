//! Writes the seed corpora of the fuzz targets into `DIR/<target>/<name>`
//! (`homeadam-fuzz-seeds DIR`; `cargo xtask fuzz` runs it before fuzzing), see
//! [`homeadam_fuzz_targets::seeds`].

use std::fs;
use std::path::PathBuf;
use std::process::exit;

use homeadam_fuzz_targets::{seeds, TARGETS};

fn main() {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: homeadam-fuzz-seeds DIR");
        exit(2);
    };
    let mut written = 0;
    for (target, _) in TARGETS {
        let target_dir = dir.join(target);
        for (name, bytes) in seeds(target) {
            let path = target_dir.join(&name);
            fs::create_dir_all(&target_dir)
                .and_then(|()| fs::write(&path, bytes))
                .unwrap_or_else(|e| {
                    eprintln!("homeadam-fuzz-seeds: cannot write {}: {e}", path.display());
                    exit(1)
                });
            written += 1;
        }
    }
    println!("{written} seeds in {}", dir.display());
}
