//! Paper-style figures of a run directory (PNG), one line per optimizer.
//!
//! [`draw_figures`] reads every optimizer folder of a run directory and writes into
//! `RUN_DIR/figures/`:
//!
//! - `curves.png` — the paper's Figures 2–5: training loss, training accuracy (%) or perplexity,
//!   test loss, test accuracy (%) or perplexity, per epoch (and the clean training evaluation's
//!   loss and accuracy or perplexity, when a run recorded it with `--eval-train`);
//! - `home.png` — per epoch, when some optimizer recorded them: the share of home (SGDM)
//!   updates (%), the τ of the epoch's last step, and side by side the epoch's smallest
//!   ρ = min v̂ over all elements and over the active elements (v > 0);
//! - `iterations.png` — per row of `iterations.csv`, when some optimizer wrote one: training
//!   loss, the home share of the logged window (with `--log-every 1`, of every step), τ, ρ over
//!   all and over the active elements, and the test subset's loss and accuracy or perplexity
//!   when it was evaluated (`--eval-every`): the per-iteration panels of Figures 4–5;
//! - `stability.png` — the stability experiment: ‖θ(S) − θ(S⁽ⁱ⁾)‖, the same relative to the
//!   distance travelled ‖θ(S) − θ₀‖ and against the training loss, both loss gaps and the
//!   generalization gap per epoch, when some optimizer wrote `stability.csv`.
//!
//! Perplexity, ρ, τ and the parameter distance go on a log scale when their positive values span
//! at least a factor of ten (the axis label then says so), else on a linear one. A log axis has
//! no place for 0, yet ρ = 0 is what decides the global rule's every step when some element
//! never had a gradient: such values are drawn on a floor line below the axis' lowest value,
//! marked `0` on the axis and by a note above it, with hollow markers, and not joined to the
//! values above (the axis is broken between them). A panel whose every value is 0 says so in
//! words instead of drawing a flat line. An accuracy's y axis spans the values of the later half
//! of the epochs, which the verdicts compare, where they span less than half of all its values;
//! a note says that the earlier epochs lie below, and a line ends where it crosses the axis.
//!
//! Each optimizer keeps its colour, line style (solid or dashed) and marker in every figure, by
//! its name (`report/style.rs`); the legend sits under the panels and says which HomeAdam(W) rule
//! a line is (Alg. 2, global; Alg. 3, element-wise) and how a variant beyond the paper departs
//! from it (ρ over the active elements, a calibrated τ). An optimizer run with several seeds is
//! drawn as the mean over its seeds, in a band from their smallest to their largest value, and
//! the legend says so. Non-finite values (a diverged run) and, on log scales, negative ones are
//! left out: the line breaks there. Text uses the
//! bundled DejaVu Sans (`host/assets/`, Bitstream Vera licence). Each PNG is written to a
//! temporary file and renamed, so a reader never sees half a figure.

use std::fs;
use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::canvas::{plot_err, register_bundled_font, write_png, FONT};
use super::legend::{Entry, Legend};
use super::metrics::{EpochRecord, IterationRecord, Task};
use super::run::{load_run, OptimizerRun, Run, FIGURES_DIR};
use super::stability::StabilityRecord;
use super::style::{draw_marker, style_of};

const PANEL_WIDTH: u32 = 760;
const PANEL_HEIGHT: u32 = 520;
const TITLE_HEIGHT: u32 = 56;
/// At most this many markers per line, so long runs stay readable.
const MARKERS_PER_LINE: usize = 14;
/// How far a log panel's floor line for zeros lies under the values' axis range (the axis
/// break), as a share of that range.
const FLOOR_GAP: f64 = 0.12;
/// The margin under the floor line, as a share of the values' axis range.
const FLOOR_MARGIN: f64 = 0.04;

/// How a panel's values are placed on its y axis.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scale {
    Linear,
    /// Drawn as log10 of the value; ticks labelled with the value.
    Log,
}

/// One optimizer's line in a panel: its index in the run (its style), its points (the mean
/// over its seeds) and, with several seeds, the band (x, smallest, largest); a NaN y breaks the
/// line and the band.
struct Series {
    optimizer: usize,
    points: Vec<(f64, f64)>,
    band: Vec<(f64, f64, f64)>,
}

/// Per x (in increasing order), the values the seeds recorded there: each seed's `value`, or
/// NaN where it recorded none (a line break). Seeds that did not reach an x leave it out.
fn values_by_x<R>(
    seeds: &[&[R]],
    x: impl Fn(&R) -> f64,
    value: impl Fn(&R) -> Option<f64>,
) -> Vec<(f64, Vec<f64>)> {
    let mut all: Vec<(f64, f64)> = seeds
        .iter()
        .flat_map(|rows| rows.iter().map(|r| (x(r), value(r).unwrap_or(f64::NAN))))
        .collect();
    // A stable sort keeps the seeds' order at each x.
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<(f64, Vec<f64>)> = Vec::new();
    for (x, v) in all {
        match out.last_mut() {
            Some((last, values)) if *last == x => values.push(v),
            _ => out.push((x, vec![v])),
        }
    }
    out
}

/// One chart of a figure.
struct Panel {
    title: String,
    x_label: &'static str,
    y_label: String,
    scale: Scale,
    /// On a log scale: some value is 0 (a y of −∞), drawn on the floor line.
    zeros: bool,
    /// Every value is 0: the panel says so in words instead of drawing a flat line.
    all_zero: bool,
    /// The y axis spans the values of the later half of the x axis where they span less than
    /// half of all the values (an accuracy's last epochs, which the verdicts compare).
    later_half: bool,
    series: Vec<Series>,
}

impl Panel {
    /// A panel of `value` over `x` for every optimizer that recorded it (`scale_by` multiplies,
    /// for percentages). [`Scale::Log`] is a preference: it is used only where the positive
    /// values span at least a factor of ten, and then adds "(log scale)" to the axis label.
    /// Panels without any series are dropped by the caller.
    #[allow(clippy::too_many_arguments)]
    fn build<R>(
        run: &Run,
        rows: impl Fn(&OptimizerRun) -> Vec<&[R]>,
        x: impl Fn(&R) -> f64,
        value: impl Fn(&R) -> Option<f64>,
        scale_by: f64,
        title: &str,
        x_label: &'static str,
        y_label: &str,
        scale: Scale,
    ) -> Panel {
        let mut series: Vec<Series> = run
            .optimizers
            .iter()
            .enumerate()
            .filter_map(|(optimizer, opt)| {
                let seeds = rows(opt);
                if !seeds.iter().flat_map(|r| r.iter()).any(|r| value(r).is_some()) {
                    return None;
                }
                let by_x = values_by_x(&seeds, &x, &value);
                // The mean of one value is that value exactly: one seed draws what it recorded.
                let points = by_x
                    .iter()
                    .map(|(x, v)| (*x, v.iter().sum::<f64>() / v.len() as f64 * scale_by))
                    .collect();
                let band = if seeds.len() > 1 {
                    by_x.iter()
                        .map(|(x, v)| {
                            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
                            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                            if v.iter().all(|y| y.is_finite()) {
                                (*x, lo * scale_by, hi * scale_by)
                            } else {
                                (*x, f64::NAN, f64::NAN)
                            }
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                Some(Series {
                    optimizer,
                    points,
                    band,
                })
            })
            .collect();
        let all_zero = finite_bounds(series.iter().flat_map(|s| {
            s.points
                .iter()
                .map(|p| p.1)
                .chain(s.band.iter().flat_map(|b| [b.1, b.2]))
        })) == Some((0.0, 0.0));
        let positive = finite_bounds(
            series
                .iter()
                .flat_map(|s| {
                    s.points
                        .iter()
                        .map(|p| p.1)
                        .chain(s.band.iter().flat_map(|b| [b.1, b.2]))
                })
                .filter(|&y| y > 0.0),
        );
        let scale = match (scale, positive) {
            (Scale::Log, Some((lo, hi))) if hi >= 10.0 * lo => Scale::Log,
            _ => Scale::Linear,
        };
        let mut y_label = y_label.to_string();
        let mut zeros = false;
        if scale == Scale::Log {
            y_label.push_str(" (log scale)");
            // log10(0) = −∞ goes on the floor line; negative values have no place on a log axis
            // and break the line.
            let log = |y: f64| if y >= 0.0 { y.log10() } else { f64::NAN };
            for s in series.iter_mut() {
                s.points.iter_mut().for_each(|p| p.1 = log(p.1));
                s.band.iter_mut().for_each(|b| (b.1, b.2) = (log(b.1), log(b.2)));
            }
            zeros = series.iter().any(|s| {
                s.points
                    .iter()
                    .map(|p| p.1)
                    .chain(s.band.iter().map(|b| b.1))
                    .any(|y| y == f64::NEG_INFINITY)
            });
        }
        Panel {
            title: title.to_string(),
            x_label,
            y_label,
            scale,
            zeros,
            all_zero,
            later_half: false,
            series,
        }
    }

    /// The panel with its y axis fitted to the later half of its x axis ([`Panel::later_half`]).
    fn fitted_to_later_half(self) -> Panel {
        Panel {
            later_half: true,
            ..self
        }
    }
}

/// Draws every figure the files of `run_dir` allow into `run_dir/figures/` and returns the PNGs
/// written (none when no optimizer has finished an epoch or written a row yet). Errors: no
/// optimizer folder, a malformed CSV (naming file and line), `metrics.csv` files of different
/// tasks, or a failure to write.
pub fn draw_figures(run_dir: &Path) -> Result<Vec<PathBuf>> {
    let run = load_run(run_dir)?;
    draw_run_figures(&run, &run_dir.join(FIGURES_DIR))
}

/// Draws the figures of an already loaded `run` into `out_dir` (created if missing); see
/// [`draw_figures`].
pub fn draw_run_figures(run: &Run, out_dir: &Path) -> Result<Vec<PathBuf>> {
    register_bundled_font()?;
    let mut figures: Vec<(&str, String, Vec<Panel>)> = Vec::new();
    if let Some(task) = run.task {
        figures.push((
            "curves.png",
            format!("{}: training and test curves", run.name),
            curve_panels(run, task),
        ));
    }
    figures.push((
        "home.png",
        format!("{}: home (SGDM) updates and ρ", run.name),
        home_panels(run),
    ));
    figures.push((
        "iterations.png",
        format!("{}: per iteration", run.name),
        iteration_panels(run),
    ));
    figures.push((
        "stability.png",
        format!("{}: algorithmic stability (S vs S⁽ⁱ⁾)", run.name),
        stability_panels(run),
    ));
    let mut written = Vec::new();
    for (file, title, panels) in figures {
        let panels: Vec<Panel> = panels.into_iter().filter(|p| !p.series.is_empty()).collect();
        if panels.is_empty() {
            continue;
        }
        fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
        let path = out_dir.join(file);
        let entries: Vec<Entry> = run
            .optimizers
            .iter()
            .map(|o| Entry {
                label: label(&o.name),
                style: style_of(&o.name),
            })
            .collect();
        draw_figure(&path, &title, &entries, &panels)?;
        written.push(path);
    }
    Ok(written)
}

fn epoch_of(r: &EpochRecord) -> f64 {
    f64::from(r.epoch)
}

fn epochs(o: &OptimizerRun) -> Vec<&[EpochRecord]> {
    o.seeds.iter().map(|s| &s.epochs[..]).collect()
}

fn iterations(o: &OptimizerRun) -> Vec<&[IterationRecord]> {
    o.seeds.iter().map(|s| &s.iterations[..]).collect()
}

fn stability(o: &OptimizerRun) -> Vec<&[StabilityRecord]> {
    vec![&o.stability[..]]
}

/// The legend's name of an optimizer: its folder name, and for HomeAdam(W) which algorithm of
/// the paper it runs and how a variant beyond the paper departs from it.
fn label(name: &str) -> String {
    let rule = match name {
        "homeadam" | "homeadamw" => "Alg. 2, global",
        "homeadam-ew" | "homeadamw-ew" => "Alg. 3, element-wise",
        "homeadamw-ew-q8" => "Alg. 3, element-wise, q8 state",
        "homeadamw-active" => "Alg. 2, ρ over active",
        "homeadamw-calibrated" => "Alg. 2, ρ over active, calibrated τ",
        _ => return name.to_string(),
    };
    format!("{name} ({rule})")
}

fn curve_panels(run: &Run, task: Task) -> Vec<Panel> {
    let (quality_scale, percent, unit) = match task {
        Task::Classification => (Scale::Linear, 100.0, " (%)"),
        Task::LanguageModel => (Scale::Log, 1.0, ""),
    };
    let quality = task.quality_name();
    let loss = |value: fn(&EpochRecord) -> Option<f64>, title: &str, y_label: &str| {
        Panel::build(
            run,
            epochs,
            epoch_of,
            value,
            1.0,
            title,
            "epoch",
            y_label,
            Scale::Linear,
        )
    };
    // An accuracy climbs from chance within a few epochs; its axis shows the last epochs, which
    // the verdicts compare.
    let quality_panel = |value: fn(&EpochRecord) -> Option<f64>, title: String, y_label: String| {
        let panel = Panel::build(
            run,
            epochs,
            epoch_of,
            value,
            percent,
            &title,
            "epoch",
            &y_label,
            quality_scale,
        );
        match task {
            Task::Classification => panel.fitted_to_later_half(),
            Task::LanguageModel => panel,
        }
    };
    vec![
        loss(|r| Some(r.train_loss), "Training loss", "train loss"),
        quality_panel(
            |r| Some(r.train_quality),
            format!("Training {quality}"),
            format!("train {quality}{unit}"),
        ),
        loss(|r| Some(r.test_loss), "Test loss", "test loss"),
        quality_panel(
            |r| Some(r.test_quality),
            format!("Test {quality}"),
            format!("test {quality}{unit}"),
        ),
        loss(
            |r| r.clean_train_loss,
            "Training loss (eval mode)",
            "train loss, evaluated",
        ),
        quality_panel(
            |r| r.clean_train_quality,
            format!("Training {quality} (eval mode)"),
            format!("train {quality}{unit}, evaluated"),
        ),
    ]
}

/// The panels of the home branch's telemetry over `x` (`x_label`): the home share (titled
/// `share_title`), τ, and ρ over all and over the active elements side by side; `per` names
/// the stretch of steps one value covers. `fields` gives (home share, τ, ρ, ρ_active).
fn home_telemetry_panels<R>(
    run: &Run,
    rows: impl Fn(&OptimizerRun) -> Vec<&[R]> + Copy,
    x: impl Fn(&R) -> f64 + Copy,
    x_label: &'static str,
    (share_title, per): (&str, &str),
    fields: impl Fn(&R) -> [Option<f64>; 4],
) -> Vec<Panel> {
    let fields = &fields;
    let field = |i: usize| move |r: &R| fields(r)[i];
    vec![
        Panel::build(
            run,
            rows,
            x,
            field(0),
            100.0,
            share_title,
            x_label,
            "home updates (%)",
            Scale::Linear,
        ),
        Panel::build(
            run,
            rows,
            x,
            field(1),
            1.0,
            &format!("τ (home iff ρ < τ), at the {per}'s last step"),
            x_label,
            "τ",
            Scale::Log,
        ),
        Panel::build(
            run,
            rows,
            x,
            field(2),
            1.0,
            &format!("ρ over all elements, smallest per {per}"),
            x_label,
            "ρ = min v (bias-corrected)",
            Scale::Log,
        ),
        Panel::build(
            run,
            rows,
            x,
            field(3),
            1.0,
            &format!("ρ over active elements (v > 0), smallest per {per}"),
            x_label,
            "ρ = min v (bias-corrected)",
            Scale::Log,
        ),
    ]
}

fn home_panels(run: &Run) -> Vec<Panel> {
    home_telemetry_panels(
        run,
        epochs,
        epoch_of,
        "epoch",
        ("Share of home (SGDM) updates per epoch", "epoch"),
        |r| [r.home_share, r.tau, r.rho, r.rho_active],
    )
}

fn iteration_panels(run: &Run) -> Vec<Panel> {
    let step = |r: &IterationRecord| r.step as f64;
    let task = run.task.unwrap_or(Task::LanguageModel);
    let (quality_scale, percent, unit) = match task {
        Task::Classification => (Scale::Linear, 100.0, " (%)"),
        Task::LanguageModel => (Scale::Log, 1.0, ""),
    };
    let quality = task.quality_name();
    let mut panels = vec![Panel::build(
        run,
        iterations,
        step,
        |r| Some(r.train_loss),
        1.0,
        "Training loss",
        "iteration",
        "train loss",
        Scale::Linear,
    )];
    panels.extend(home_telemetry_panels(
        run,
        iterations,
        step,
        "iteration",
        (
            "Home share per logged window (per step at --log-every 1)",
            "window",
        ),
        |r| [r.home_share, r.tau, r.rho, r.rho_active],
    ));
    panels.extend([
        Panel::build(
            run,
            iterations,
            step,
            |r| r.test_loss,
            1.0,
            "Test loss (test subset)",
            "iteration",
            "test loss",
            Scale::Linear,
        ),
        Panel::build(
            run,
            iterations,
            step,
            |r| r.test_quality,
            percent,
            &format!("Test {quality} (test subset)"),
            "iteration",
            &format!("test {quality}{unit}"),
            quality_scale,
        ),
    ]);
    panels
}

fn stability_panels(run: &Run) -> Vec<Panel> {
    let by_epoch = |value: fn(&StabilityRecord) -> Option<f64>, title: &str, y_label: &str, scale: Scale| {
        Panel::build(
            run,
            stability,
            |r: &StabilityRecord| f64::from(r.epoch),
            value,
            1.0,
            title,
            "epoch",
            y_label,
            scale,
        )
    };
    vec![
        by_epoch(
            |r| Some(r.param_distance),
            "Parameter distance",
            "‖θ(S) − θ(S⁽ⁱ⁾)‖",
            Scale::Log,
        ),
        by_epoch(
            |r| r.relative_distance(),
            "Distance relative to the distance travelled",
            "‖θ(S) − θ(S⁽ⁱ⁾)‖ / ‖θ(S) − θ₀‖",
            Scale::Log,
        ),
        Panel::build(
            run,
            stability,
            |r| r.train_loss.unwrap_or(f64::NAN),
            |r| r.train_loss.map(|_| r.param_distance),
            1.0,
            "Distance at a training loss (compare at matched loss)",
            "training loss F_S(θ(S))",
            "‖θ(S) − θ(S⁽ⁱ⁾)‖",
            Scale::Log,
        ),
        by_epoch(
            |r| Some(r.generalization_gap),
            "Generalization gap",
            "test loss − train loss",
            Scale::Linear,
        ),
        by_epoch(
            |r| Some(r.train_loss_gap),
            "Train loss gap",
            "|F_S(θ(S)) − F_S(θ(S⁽ⁱ⁾))|",
            Scale::Linear,
        ),
        by_epoch(
            |r| Some(r.test_loss_gap),
            "Test loss gap",
            "|F_test(θ(S)) − F_test(θ(S⁽ⁱ⁾))|",
            Scale::Linear,
        ),
    ]
}

/// The smallest and largest finite value, if any.
fn finite_bounds(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.filter(|v| v.is_finite()).fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

/// An axis range around `bounds`: `frac` of the span on each side, or, around a single value v,
/// the larger of `flat` and 10 % of |v| (0.5 when both are zero); `0..1` without any finite value.
fn axis_range(bounds: Option<(f64, f64)>, frac: f64, flat: f64) -> std::ops::Range<f64> {
    match bounds {
        None => 0.0..1.0,
        Some((lo, hi)) if hi - lo > f64::EPSILON * hi.abs().max(lo.abs()) => {
            let pad = (hi - lo) * frac;
            lo - pad..hi + pad
        }
        Some((lo, hi)) => {
            let pad = flat.max(lo.abs() * 0.1);
            let pad = if pad > 0.0 { pad } else { 0.5 };
            lo - pad..hi + pad
        }
    }
}

/// Tick labels of the x axis (epochs, iterations): integers only.
fn x_tick(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round())
    } else {
        String::new()
    }
}

/// A value with about three significant digits, scientific when very large or small.
fn short_number(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".to_string()
    } else if !(1e-3..1e5).contains(&a) {
        let s = format!("{v:.2e}");
        match s.split_once('e') {
            Some((mantissa, exponent)) if mantissa.contains('.') => {
                let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
                format!("{mantissa}e{exponent}")
            }
            _ => s,
        }
    } else {
        let decimals = (2 - a.log10().floor() as i32).max(0) as usize;
        let s = format!("{v:.decimals$}");
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    }
}

/// Tick labels of a y axis spanning `span` (in decades on a log scale): a linear tick within
/// rounding of zero reads `0`; a log axis over two decades or more labels only powers of ten.
fn y_tick(v: f64, scale: Scale, span: f64) -> String {
    match scale {
        Scale::Linear if v.abs() < 1e-9 * span => "0".to_string(),
        Scale::Linear => short_number(v),
        Scale::Log if span >= 2.0 && (v - v.round()).abs() > 1e-9 => String::new(),
        Scale::Log => short_number(10f64.powf(v)),
    }
}

/// What a shaded band is, in the legend of a figure that draws one.
const BAND_NOTE: &str =
    "Lines: the mean over the seeds; shaded bands: from the seeds' smallest to their largest value.";

fn draw_figure(path: &Path, title: &str, entries: &[Entry], panels: &[Panel]) -> Result<()> {
    let cols = match panels.len() {
        4 => 2,
        n => n.min(3),
    };
    let grid_rows = panels.len().div_ceil(cols);
    let width = PANEL_WIDTH * cols as u32;
    // A panel in words draws no line: its optimizers need no legend entry there.
    let drawn = || panels.iter().filter(|p| !p.all_zero).flat_map(|p| &p.series);
    let mut shown: Vec<usize> = drawn().map(|s| s.optimizer).collect();
    shown.sort_unstable();
    shown.dedup();
    let banded = drawn().any(|s| !s.band.is_empty());
    let notes = if banded {
        vec![BAND_NOTE.to_string()]
    } else {
        Vec::new()
    };
    let legend = Legend::new(entries, &shown, notes, true, width)?;
    let height = TITLE_HEIGHT + PANEL_HEIGHT * grid_rows as u32 + legend.height();

    let mut pixels = vec![255u8; width as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let body = root
            .margin(10, 0, 0, 0)
            .titled(title, (FONT, 30).into_font().color(&BLACK))
            .map_err(plot_err)?;
        let (grid, legend_area) = body.split_vertically(PANEL_HEIGHT * grid_rows as u32);
        for (area, panel) in grid.split_evenly((grid_rows, cols)).iter().zip(panels) {
            draw_panel(&root, area, panel, entries)?;
        }
        legend.draw(&root, &legend_area)?;
        root.present().map_err(plot_err)?;
    }
    write_png(path, width, height, pixels)
}

/// The runs of a line's points that are drawn joined, as index ranges: a non-finite point breaks
/// the line and, with a `floor` line (a log panel with zeros), so does a step between a zero
/// (y = −∞, drawn on the floor) and a value above the axis break.
fn line_runs(points: &[(f64, f64)], floor: bool) -> Vec<Range<usize>> {
    // Some(whether on the floor) for a drawn point, None for a break.
    let class = |p: &(f64, f64)| {
        let zero = floor && p.1 == f64::NEG_INFINITY;
        (p.0.is_finite() && (p.1.is_finite() || zero)).then_some(zero)
    };
    let mut runs: Vec<Range<usize>> = Vec::new();
    let mut previous = None;
    for (i, p) in points.iter().enumerate() {
        let c = class(p);
        if c.is_some() {
            match runs.last_mut() {
                Some(run) if previous == c => run.end = i + 1,
                _ => runs.push(i..i + 1),
            }
        }
        previous = c;
    }
    runs
}

/// The pieces of the line through `points` that lie at or above `bottom`, each ending where
/// the line crosses it (a point below the axis of a cut panel is not drawn, nor clamped to it).
fn clip_below(points: &[(f64, f64)], bottom: f64) -> Vec<Vec<(f64, f64)>> {
    let crossing = |a: (f64, f64), b: (f64, f64)| (a.0 + (bottom - a.1) / (b.1 - a.1) * (b.0 - a.0), bottom);
    let mut pieces: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut previous: Option<(f64, f64)> = None;
    for &p in points {
        match previous {
            Some(q) if q.1 < bottom && p.1 > bottom => pieces.push(vec![crossing(q, p), p]),
            Some(q) if q.1 < bottom && p.1 == bottom => pieces.push(vec![p]),
            Some(q) if q.1 >= bottom && p.1 < bottom => {
                pieces.last_mut().into_iter().for_each(|l| l.push(crossing(q, p)))
            }
            Some(q) if q.1 >= bottom => pieces.last_mut().into_iter().for_each(|l| l.push(p)),
            None if p.1 >= bottom => pieces.push(vec![p]),
            _ => {}
        }
        previous = Some(p);
    }
    pieces
}

/// The bounds of a panel's values (means and bands) at x ≥ `from`.
fn values_from(panel: &Panel, from: f64) -> Option<(f64, f64)> {
    finite_bounds(panel.series.iter().flat_map(|s| {
        let points = s.points.iter().filter(move |p| p.0 >= from).map(|p| p.1);
        points.chain(
            s.band
                .iter()
                .filter(move |b| b.0 >= from)
                .flat_map(|b| [b.1, b.2]),
        )
    }))
}

/// The y bounds a panel's axis shows, and whether they leave earlier values out
/// ([`Panel::later_half`]).
fn shown_values(panel: &Panel, x_bounds: Option<(f64, f64)>) -> (Option<(f64, f64)>, bool) {
    let all = values_from(panel, f64::NEG_INFINITY);
    let later = match (panel.later_half, x_bounds, all) {
        (true, Some((lo, hi)), Some((all_lo, all_hi))) => {
            values_from(panel, lo + (hi - lo) / 2.0).filter(|(a, b)| b - a < (all_hi - all_lo) / 2.0)
        }
        _ => None,
    };
    match later {
        Some(bounds) => (Some(bounds), true),
        None => (all, false),
    }
}

/// A panel whose every value is 0, in words.
fn draw_all_zero<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    panel: &Panel,
) -> Result<()> {
    let body = area
        .margin(14, 14, 14, 14)
        .titled(&panel.title, (FONT, 24).into_font().color(&BLACK))
        .map_err(plot_err)?;
    let (w, h) = body.dim_in_pixel();
    let centre = Pos::new(HPos::Center, VPos::Center);
    let text = (FONT, 20).into_font().color(&BLACK.mix(0.7)).pos(centre);
    for (k, line) in [
        "Every value is 0,",
        "for every optimizer at every point:",
        "nothing to draw.",
    ]
    .iter()
    .enumerate()
    {
        body.draw(&Text::new(
            *line,
            (w as i32 / 2, h as i32 / 2 - 30 + 30 * k as i32),
            text.clone(),
        ))
        .map_err(plot_err)?;
    }
    Ok(())
}

fn draw_panel<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    area: &DrawingArea<DB, plotters::coord::Shift>,
    panel: &Panel,
    entries: &[Entry],
) -> Result<()> {
    if panel.all_zero {
        return draw_all_zero(area, panel);
    }
    let all = || panel.series.iter().flat_map(|s| s.points.iter());
    let x_bounds = finite_bounds(all().map(|p| p.0));
    let x_range = axis_range(x_bounds, 0.02, 1.0);
    let (shown, cut) = shown_values(panel, x_bounds);
    let values = axis_range(shown, 0.05, 0.0);
    let values_span = values.end - values.start;
    // Zeros on a log panel: the floor line under the values, with the axis broken between them.
    let floor = panel.zeros.then_some(values.start - FLOOR_GAP * values_span);
    let y_range = match floor {
        Some(f) => f - FLOOR_MARGIN * values_span..values.end,
        None => values.clone(),
    };
    let place = |y: f64| match floor {
        Some(f) if y == f64::NEG_INFINITY => f,
        _ => y,
    };
    let y_span = y_range.end - y_range.start;
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, (FONT, 24))
        .margin(14)
        .x_label_area_size(56)
        .y_label_area_size(90)
        .build_cartesian_2d(x_range.clone(), y_range)
        .map_err(plot_err)?;
    let x_fmt = |v: &f64| x_tick(*v);
    // No value lies between the floor and the values: ticks there would label nothing.
    let y_fmt = |v: &f64| {
        if floor.is_some() && *v < values.start {
            String::new()
        } else {
            y_tick(*v, panel.scale, y_span)
        }
    };
    chart
        .configure_mesh()
        .x_desc(panel.x_label)
        .y_desc(&panel.y_label)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .x_labels(10)
        .y_labels(8)
        .label_style((FONT, 17))
        .axis_desc_style((FONT, 19))
        .bold_line_style(BLACK.mix(0.12))
        .light_line_style(BLACK.mix(0.04))
        .draw()
        .map_err(plot_err)?;
    if cut {
        let (left, top) = chart.backend_coord(&(x_range.start, values.end));
        let note = (FONT, 15).into_font().color(&BLACK.mix(0.55));
        root.draw(&Text::new(
            "axis fitted to the later half; earlier values lie below it",
            (left + 6, top + 4),
            note.pos(Pos::new(HPos::Left, VPos::Top)),
        ))
        .map_err(plot_err)?;
    }
    if let Some(f) = floor {
        let grey = BLACK.mix(0.45);
        chart
            .draw_series(DashedLineSeries::new(
                [(x_range.start, f), (x_range.end, f)],
                6,
                4,
                grey.stroke_width(1),
            ))
            .map_err(plot_err)?;
        let (left, y) = chart.backend_coord(&(x_range.start, f));
        let label = (FONT, 17).into_font().color(&BLACK);
        root.draw(&Text::new(
            "0",
            (left - 8, y),
            label.pos(Pos::new(HPos::Right, VPos::Center)),
        ))
        .map_err(plot_err)?;
        let note = (FONT, 15).into_font().color(&grey);
        root.draw(&Text::new(
            "0, off the log scale (hollow markers)",
            (left + 6, y - 4),
            note.pos(Pos::new(HPos::Left, VPos::Bottom)),
        ))
        .map_err(plot_err)?;
    }
    for series in &panel.series {
        let colour = entries[series.optimizer].style.colour.mix(0.15).filled();
        // Under a cut axis a band ends at the axis, and where all of it lies below, it breaks.
        let placed: Vec<(f64, f64, f64)> = series
            .band
            .iter()
            .map(|b| match cut {
                true if b.2 < values.start => (b.0, f64::NAN, f64::NAN),
                true => (b.0, b.1.max(values.start), b.2),
                false => (b.0, place(b.1), place(b.2)),
            })
            .collect();
        let segments = placed
            .split(|b| !(b.0.is_finite() && b.1.is_finite() && b.2.is_finite()))
            .filter(|seg| !seg.is_empty());
        for segment in segments {
            let outline: Vec<(f64, f64)> = segment
                .iter()
                .map(|b| (b.0, b.1))
                .chain(segment.iter().rev().map(|b| (b.0, b.2)))
                .collect();
            chart
                .draw_series(std::iter::once(Polygon::new(outline, colour)))
                .map_err(plot_err)?;
        }
    }
    for series in &panel.series {
        let style = entries[series.optimizer].style;
        let stroke = style.colour.stroke_width(2);
        let every = series.points.len().div_ceil(MARKERS_PER_LINE).max(1);
        for run in line_runs(&series.points, floor.is_some()) {
            let placed: Vec<(f64, f64)> = series.points[run.clone()]
                .iter()
                .map(|p| (p.0, place(p.1)))
                .collect();
            let pieces = if cut {
                clip_below(&placed, values.start)
            } else {
                vec![placed]
            };
            for piece in pieces {
                if style.dashed {
                    chart
                        .draw_series(DashedLineSeries::new(piece, 10, 6, stroke))
                        .map_err(plot_err)?;
                } else {
                    chart
                        .draw_series(LineSeries::new(piece, stroke))
                        .map_err(plot_err)?;
                }
            }
            // Stagger the optimizers' markers; always mark an isolated point (else invisible).
            let isolated = run.len() == 1;
            for i in run {
                let (x, y) = series.points[i];
                // Under a cut axis, an earlier value below it has no marker (its line leaves
                // the panel through the axis).
                let below = cut && y < values.start;
                if !below && (isolated || i % every == style.slot % every) {
                    let at = chart.backend_coord(&(x, place(y)));
                    draw_marker(root, at, style, y == f64::NEG_INFINITY)?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels_are_short_and_distinct() {
        assert_eq!(short_number(0.0), "0");
        assert_eq!(short_number(1.0), "1");
        assert_eq!(short_number(0.25), "0.25");
        assert_eq!(short_number(123.456), "123");
        assert_eq!(short_number(1e-9), "1e-9");
        assert_eq!(short_number(1.05e-9), "1.05e-9");
        assert_eq!(short_number(-2.5e6), "-2.5e6");
        assert_eq!(y_tick(-5.6e-17, Scale::Linear, 1.0), "0");
        assert_eq!(y_tick(-12.0, Scale::Log, 10.0), "1e-12");
        assert_eq!(y_tick(2.0, Scale::Log, 1.0), "100");
        assert_eq!(y_tick(2.5, Scale::Log, 1.0), "316");
        assert_eq!(y_tick(2.5, Scale::Log, 3.0), "");
        assert_eq!(x_tick(3.0), "3");
        assert_eq!(x_tick(2.5), "");
    }

    #[test]
    fn zeros_on_the_floor_break_the_line_from_the_values_above() {
        let inf = f64::NEG_INFINITY;
        let points = [
            (1.0, -8.0),
            (2.0, -9.0),
            (3.0, inf),
            (4.0, inf),
            (5.0, f64::NAN),
            (6.0, -7.0),
            (7.0, inf),
        ];
        assert_eq!(line_runs(&points, true), [0..2, 2..4, 5..6, 6..7]);
        // Without a floor line (no zeros on a linear panel) −∞ is a break like NaN.
        assert_eq!(line_runs(&points, false), [0..2, 5..6]);
        assert!(line_runs(&[], true).is_empty());
    }

    #[test]
    fn the_variants_say_what_they_change() {
        assert_eq!(label("homeadamw"), "homeadamw (Alg. 2, global)");
        assert_eq!(
            label("homeadamw-active"),
            "homeadamw-active (Alg. 2, ρ over active)"
        );
        assert_eq!(
            label("homeadamw-calibrated"),
            "homeadamw-calibrated (Alg. 2, ρ over active, calibrated τ)"
        );
        assert_eq!(label("adamw"), "adamw");
    }

    /// Every panel's title fits its panel's width, and its axis label (with "(log scale)") the
    /// panel's height.
    #[test]
    fn titles_and_axis_labels_fit_their_panels() {
        register_bundled_font().unwrap();
        for task in Task::ALL {
            let run = Run {
                name: "run".into(),
                task: Some(task),
                optimizers: Vec::new(),
            };
            let panels = [
                curve_panels(&run, task),
                home_panels(&run),
                iteration_panels(&run),
                stability_panels(&run),
            ];
            for panel in panels.iter().flatten() {
                let width = |text: &str, size: f64| (FONT, size).into_font().box_size(text).unwrap().0;
                let title = width(&panel.title, 24.0);
                assert!(title + 2 * 14 <= PANEL_WIDTH - 40, "{}: {title} px", panel.title);
                let label = format!("{} (log scale)", panel.y_label);
                let height = width(&label, 19.0);
                assert!(height <= PANEL_HEIGHT - 140, "{label}: {height} px");
            }
        }
    }

    #[test]
    fn a_line_under_a_cut_axis_ends_where_it_crosses_it() {
        let points = [(1.0, 50.0), (2.0, 90.0), (3.0, 98.0), (4.0, 80.0), (5.0, 99.0)];
        assert_eq!(
            clip_below(&points, 90.0),
            [
                vec![(2.0, 90.0), (3.0, 98.0), (3.0 + 8.0 / 18.0, 90.0)],
                vec![(4.0 + 10.0 / 19.0, 90.0), (5.0, 99.0)]
            ]
        );
        assert!(clip_below(&points[..1], 90.0).is_empty());
        assert_eq!(clip_below(&points[2..3], 90.0), [vec![(3.0, 98.0)]]);
    }

    #[test]
    fn axis_ranges_never_collapse() {
        assert_eq!(axis_range(None, 0.05, 0.0), 0.0..1.0);
        assert_eq!(axis_range(Some((0.0, 0.0)), 0.05, 0.0), -0.5..0.5);
        assert_eq!(axis_range(Some((1.0, 1.0)), 0.02, 1.0), 0.0..2.0);
        let r = axis_range(Some((1e-9, 1e-9)), 0.05, 0.0);
        assert!(r.start < 1e-9 && r.end > 1e-9 && r.start > 0.0);
        let r = axis_range(Some((0.0, 10.0)), 0.05, 0.0);
        assert_eq!(r, -0.5..10.5);
    }
}
