//! The stage-time table that `cargo xtask test` prints at its end (and at a failure): every
//! stage's seconds and its share of the run's wall time, so that the stage that grows is seen
//! at once.
//!
//! A background lane (a child `xtask lane NAME`, see [`crate::lanes`]) appends its stages to a
//! file that the parent names in [`STAGES_FILE`]; the parent reads them back into its table.
//! Lanes overlap the main one, so the shares add up to more than 100 %.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The variable naming the file a background lane appends its stages to.
pub(crate) const STAGES_FILE: &str = "XTASK_STAGES_FILE";
/// The variable naming a background lane (the main lane has none).
pub(crate) const LANE: &str = "XTASK_LANE";

/// One finished stage.
struct Stage {
    lane: String,
    name: String,
    seconds: f64,
}

static STAGES: Mutex<Vec<Stage>> = Mutex::new(Vec::new());
/// Tests passed and failed so far (from libtest's `test result:` lines), lanes' included.
static PASSED: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);

/// The lane this process runs.
fn lane() -> String {
    std::env::var(LANE).unwrap_or_else(|_| "main".into())
}

/// Records a finished stage (in a background lane, also in its stages file).
pub(crate) fn record(name: &str, seconds: f64) {
    record_tests(name, seconds, 0, 0);
}

/// Records a finished stage that ran `passed` + `failed` tests, as [`record`].
pub(crate) fn record_tests(name: &str, seconds: f64, passed: u64, failed: u64) {
    PASSED.fetch_add(passed, Ordering::Relaxed);
    FAILED.fetch_add(failed, Ordering::Relaxed);
    let lane = lane();
    if let Ok(path) = std::env::var(STAGES_FILE) {
        let line = format!("{lane}\t{name}\t{seconds:.1}\t{passed}\t{failed}\n");
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            eprintln!("xtask: cannot record the stage in {path}: {e}");
        }
    }
    STAGES.lock().expect("stages").push(Stage {
        lane,
        name: name.to_string(),
        seconds,
    });
}

/// Adds a background lane's stages from its file (written by [`record`] in the child).
pub(crate) fn read_lane_file(path: &std::path::Path) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    let mut stages = STAGES.lock().expect("stages");
    for line in text.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        if let [lane, name, seconds, passed, failed] = fields[..] {
            stages.push(Stage {
                lane: lane.into(),
                name: name.into(),
                seconds: seconds.parse().unwrap_or(0.0),
            });
            PASSED.fetch_add(passed.parse().unwrap_or(0), Ordering::Relaxed);
            FAILED.fetch_add(failed.parse().unwrap_or(0), Ordering::Relaxed);
        }
    }
}

/// Prints the tests passed and failed in every lane so far.
pub(crate) fn print_totals() {
    println!(
        "tests: {} passed, {} failed",
        PASSED.load(Ordering::Relaxed),
        FAILED.load(Ordering::Relaxed)
    );
}

/// Prints the table: stage, lane, seconds, share of `wall` seconds.
pub(crate) fn print_table(wall: f64) {
    let stages = STAGES.lock().expect("stages");
    let width = stages
        .iter()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(5)
        .max(5);
    println!("\nxtask: stage times (lanes overlap; shares are of the wall time)");
    println!(
        "  {:<width$}  {:<8}  {:>7}  {:>6}",
        "stage", "lane", "seconds", "share"
    );
    for s in stages.iter() {
        println!(
            "  {:<width$}  {:<8}  {:>7.0}  {:>5.1}%",
            s.name,
            s.lane,
            s.seconds,
            100.0 * s.seconds / wall.max(1e-9)
        );
    }
    println!(
        "  {:<width$}  {:<8}  {:>7.0}  {:>5.1}%",
        "wall time", "", wall, 100.0
    );
}
