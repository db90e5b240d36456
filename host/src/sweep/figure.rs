//! `sweep.png`: per knob, every trial's validation score against the knob's value (log axis),
//! each optimizer in its colour and marker (as in every figure), the chosen trial ringed, the
//! legend under the panels. The y axis spans the better three quarters of the trials, where
//! the chosen ones lie; a trial below them (one that diverged or barely learnt) is drawn faded
//! on the axis' edge, and the panel says how many there are.

use std::path::Path;

use anyhow::Result;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::space::Axis;
use super::SweepOutcome;
use crate::report::canvas::{plot_err, register_bundled_font, write_png, FONT};
use crate::report::legend::{Entry, Legend};
use crate::report::style::{draw_marker, style_of, LineStyle};
use crate::report::Task;

const PANEL_WIDTH: u32 = 640;
const PANEL_HEIGHT: u32 = 480;
const TITLE_HEIGHT: u32 = 56;

/// One trial's point: the optimizer's index, the knob's value, the validation score, whether
/// it is the chosen trial.
type Point = (usize, f64, f64, bool);

/// The quarter of a sweep's trials with the worst scores, the chosen ones excepted, lies off the
/// y axis: this is the score that bounds it (the better three quarters' worst; lower is worse
/// for an accuracy, higher for a perplexity).
fn axis_edge(task: Task, scores: &mut [f64]) -> Option<f64> {
    scores.sort_by(|a, b| a.total_cmp(b));
    if scores.is_empty() {
        return None;
    }
    let quarter = scores.len() / 4;
    Some(match task {
        Task::Classification => scores[quarter],
        Task::LanguageModel => scores[scores.len() - 1 - quarter],
    })
}

/// Draws the figure of `outcome`, a sweep of `experiment` whose runs trained `epochs` epochs,
/// at `path` (nothing to draw: no file).
pub fn draw(path: &Path, experiment: &str, epochs: u64, outcome: &SweepOutcome) -> Result<()> {
    register_bundled_font()?;
    let knobs: Vec<Axis> = Axis::ALL
        .into_iter()
        .filter(|k| {
            outcome
                .optimizers
                .iter()
                .any(|o| o.trials.iter().any(|t| t.trial.knobs.contains_key(k)))
        })
        .collect();
    if knobs.is_empty() {
        return Ok(());
    }
    let entries: Vec<Entry> = outcome
        .optimizers
        .iter()
        .map(|o| Entry {
            label: o.optimizer.clone(),
            style: style_of(&o.optimizer),
        })
        .collect();
    let task = outcome.task;
    let mut scores: Vec<f64> = outcome
        .optimizers
        .iter()
        .flat_map(|o| o.trials.iter().map(|t| t.quality))
        .filter(|q| q.is_finite())
        .collect();
    let chosen: Vec<f64> = outcome.optimizers.iter().map(|o| o.chosen().quality).collect();
    // The chosen trials always lie on the axis.
    let edge = axis_edge(task, &mut scores).map(|e| match task {
        Task::Classification => chosen.iter().copied().fold(e, f64::min),
        Task::LanguageModel => chosen.iter().copied().fold(e, f64::max),
    });
    let cols = knobs.len().min(3);
    let rows = knobs.len().div_ceil(cols);
    let width = PANEL_WIDTH * cols as u32;
    let shown: Vec<usize> = (0..entries.len()).collect();
    let note =
        "Each point is a trial; a ring marks the chosen one; faded points on the axis' edge lie beyond it.";
    let legend = Legend::new(&entries, &shown, vec![note.to_string()], false, width)?;
    let height = TITLE_HEIGHT + PANEL_HEIGHT * rows as u32 + legend.height();
    let quality = task.quality_name();
    let mut pixels = vec![255u8; width as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let title = format!("{experiment}: validation {quality} of each trial after {epochs} epochs");
        let body = root
            .margin(10, 0, 0, 0)
            .titled(&title, (FONT, 26).into_font().color(&BLACK))
            .map_err(plot_err)?;
        let (grid, legend_area) = body.split_vertically(PANEL_HEIGHT * rows as u32);
        for (area, &knob) in grid.split_evenly((rows, cols)).iter().zip(&knobs) {
            let points: Vec<Point> = outcome
                .optimizers
                .iter()
                .enumerate()
                .flat_map(|(i, o)| {
                    o.trials.iter().enumerate().filter_map(move |(k, t)| {
                        let x = *t.trial.knobs.get(&knob)?;
                        (t.quality.is_finite()).then_some((i, x, t.quality, k == o.best))
                    })
                })
                .collect();
            draw_knob(&root, area, knob, &points, &entries, task, edge)?;
        }
        legend.draw(&root, &legend_area)?;
        root.present().map_err(plot_err)?;
    }
    write_png(path, width, height, pixels)
}

/// One knob's panel: `points` against the knob, the y axis cut at `edge`.
fn draw_knob<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    area: &DrawingArea<DB, plotters::coord::Shift>,
    knob: Axis,
    points: &[Point],
    entries: &[Entry],
    task: Task,
    edge: Option<f64>,
) -> Result<()> {
    let beyond = |y: f64| match (task, edge) {
        (Task::Classification, Some(e)) => y < e,
        (Task::LanguageModel, Some(e)) => y > e,
        (_, None) => false,
    };
    let bounds = |f: fn(&Point) -> f64, keep: &dyn Fn(&Point) -> bool| {
        points
            .iter()
            .filter(|p| keep(p))
            .map(f)
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            })
    };
    let (x_lo, x_hi) = bounds(|p| p.1, &|_| true);
    let (y_lo, y_hi) = bounds(|p| p.2, &|p| !beyond(p.2));
    if !(x_lo.is_finite() && y_lo.is_finite()) {
        return Ok(());
    }
    let y_pad = ((y_hi - y_lo) * 0.08).max(1e-3);
    let y_range = y_lo - y_pad..y_hi + y_pad;
    // Where a trial beyond the axis is drawn: on the edge it lies past.
    let pinned = match task {
        Task::Classification => y_range.start,
        Task::LanguageModel => y_range.end,
    };
    let mut chart = ChartBuilder::on(area)
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d((x_lo / 1.5..x_hi * 1.5).log_scale(), y_range)
        .map_err(plot_err)?;
    let quality = task.quality_name();
    chart
        .configure_mesh()
        .x_desc(format!("{knob} (log)"))
        .y_desc(format!("validation {quality}"))
        .x_labels(6)
        .light_line_style(TRANSPARENT)
        .x_label_formatter(&|v| format!("{v:.1e}"))
        .label_style((FONT, 16))
        .axis_desc_style((FONT, 18))
        .draw()
        .map_err(plot_err)?;
    for &(i, x, y, chosen) in points {
        let style = entries[i].style;
        let out = beyond(y);
        let at = chart.backend_coord(&(x, if out { pinned } else { y }));
        let faded = |c: u8| c + ((255 - c) as f64 * 0.6) as u8;
        let shown = match out {
            true => LineStyle {
                colour: RGBColor(
                    faded(style.colour.0),
                    faded(style.colour.1),
                    faded(style.colour.2),
                ),
                ..style
            },
            false => style,
        };
        draw_marker(root, at, shown, false)?;
        if chosen {
            root.draw(&Circle::new(at, 11, style.colour.stroke_width(2)))
                .map_err(plot_err)?;
        }
    }
    let off = points.iter().filter(|p| beyond(p.2)).count();
    if off > 0 {
        // The note goes to the edge opposite the one the faded trials lie on.
        let (words, y, v, shift) = match task {
            Task::Classification => ("below", y_hi + y_pad, VPos::Top, 4),
            Task::LanguageModel => ("above", y_lo - y_pad, VPos::Bottom, -4),
        };
        let (left, edge) = chart.backend_coord(&(x_lo / 1.5, y));
        let note = (FONT, 15).into_font().color(&BLACK.mix(0.55));
        root.draw(&Text::new(
            format!("{off} trials {words} the axis (faded, on its edge)"),
            (left + 6, edge + shift),
            note.pos(Pos::new(HPos::Left, v)),
        ))
        .map_err(plot_err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worst_quarter_lies_beyond_the_axis() {
        let mut accuracies = vec![0.9, 0.1, 0.95, 0.97, 0.2, 0.96, 0.98, 0.5];
        assert_eq!(axis_edge(Task::Classification, &mut accuracies), Some(0.5));
        let mut perplexities = vec![90.0, 500.0, 95.0, 100.0, 1000.0, 92.0, 91.0, 200.0];
        assert_eq!(axis_edge(Task::LanguageModel, &mut perplexities), Some(200.0));
        assert_eq!(axis_edge(Task::LanguageModel, &mut []), None);
    }
}
