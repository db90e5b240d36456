//! `sweep.png`: per knob, every trial's validation score against the knob's value (log axis),
//! one colour per optimizer, the chosen trial ringed.

use std::path::Path;

use anyhow::Result;
use plotters::prelude::*;

use super::space::Axis;
use super::{SweepOptions, SweepOutcome};
use crate::report::figures::{plot_err, register_bundled_font, write_png, FONT, PALETTE};

const PANEL_WIDTH: u32 = 640;
const PANEL_HEIGHT: u32 = 480;
const TITLE_HEIGHT: u32 = 56;

/// Draws the figure of `outcome` at `path` (nothing to draw: no file).
pub fn draw(path: &Path, opts: &SweepOptions, outcome: &SweepOutcome) -> Result<()> {
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
    let cols = knobs.len().min(3);
    let rows = knobs.len().div_ceil(cols);
    let (width, height) = (
        PANEL_WIDTH * cols as u32,
        TITLE_HEIGHT + PANEL_HEIGHT * rows as u32,
    );
    let quality = outcome.task.quality_name();
    let mut pixels = vec![255u8; width as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let title = format!(
            "{}: validation {quality} of each trial after {} epochs",
            opts.experiment.name(),
            opts.epochs
        );
        let body = root
            .margin(10, 0, 0, 0)
            .titled(&title, (FONT, 26).into_font().color(&BLACK))
            .map_err(plot_err)?;
        for (area, &knob) in body.split_evenly((rows, cols)).iter().zip(&knobs) {
            let points: Vec<(usize, f64, f64, bool)> = outcome
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
            let bounds = |f: fn(&(usize, f64, f64, bool)) -> f64| {
                points
                    .iter()
                    .map(f)
                    .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                        (lo.min(v), hi.max(v))
                    })
            };
            let (x_lo, x_hi) = bounds(|p| p.1);
            let (y_lo, y_hi) = bounds(|p| p.2);
            if !(x_lo.is_finite() && y_lo.is_finite()) {
                continue;
            }
            let y_pad = ((y_hi - y_lo) * 0.08).max(1e-3);
            let mut chart = ChartBuilder::on(area)
                .margin(16)
                .x_label_area_size(48)
                .y_label_area_size(64)
                .build_cartesian_2d((x_lo / 1.5..x_hi * 1.5).log_scale(), y_lo - y_pad..y_hi + y_pad)
                .map_err(plot_err)?;
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
            for (i, o) in outcome.optimizers.iter().enumerate() {
                let colour = PALETTE[i % PALETTE.len()];
                let mine = points.iter().filter(|p| p.0 == i);
                chart
                    .draw_series(mine.clone().map(|p| Circle::new((p.1, p.2), 5, colour.filled())))
                    .map_err(plot_err)?
                    .label(o.optimizer.as_str())
                    .legend(move |(x, y)| Circle::new((x, y), 5, colour.filled()));
                chart
                    .draw_series(
                        mine.filter(|p| p.3)
                            .map(|p| Circle::new((p.1, p.2), 10, colour.stroke_width(2))),
                    )
                    .map_err(plot_err)?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .label_font((FONT, 16))
                .draw()
                .map_err(plot_err)?;
        }
        root.present().map_err(plot_err)?;
    }
    write_png(path, width, height, pixels)
}
