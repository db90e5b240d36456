//! The legend under a figure's panels, outside the data: one entry per optimizer drawn (its
//! line or marker, then its label) in rows as wide as the figure, then notes in words (what a
//! shaded band is).

use anyhow::Result;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::canvas::{plot_err, FONT};
use super::style::{draw_marker, LineStyle};

const ROW_HEIGHT: u32 = 34;
const PADDING: u32 = 14;
const FONT_SIZE: f64 = 20.0;
const NOTE_FONT_SIZE: f64 = 18.0;
const SAMPLE: i32 = 48;

/// One optimizer as the legend names and draws it.
pub(crate) struct Entry {
    /// The label.
    pub label: String,
    /// Its line, marker and colour.
    pub style: LineStyle,
}

/// A laid-out legend.
pub(crate) struct Legend<'a> {
    entries: &'a [Entry],
    /// Per row, the entries' indices and the row's width in pixels.
    rows: Vec<(Vec<usize>, i32)>,
    notes: Vec<String>,
    /// Entries drawn as a line through the marker (curves), else as the marker alone (points).
    lines: bool,
}

impl<'a> Legend<'a> {
    /// The legend of `entries[i]` for each `i` of `shown`, in rows that fit `width` pixels, and
    /// a row per note.
    pub fn new(
        entries: &'a [Entry],
        shown: &[usize],
        notes: Vec<String>,
        lines: bool,
        width: u32,
    ) -> Result<Self> {
        let font = (FONT, FONT_SIZE).into_font();
        let usable = (width - 2 * PADDING) as i32;
        let mut rows: Vec<(Vec<usize>, i32)> = Vec::new();
        for &i in shown {
            let (text_w, _) = font.box_size(&entries[i].label).map_err(plot_err)?;
            let entry = SAMPLE + 10 + text_w as i32 + 30;
            match rows.last_mut() {
                Some((row, w)) if *w + entry <= usable => {
                    row.push(i);
                    *w += entry;
                }
                _ => rows.push((vec![i], entry)),
            }
        }
        Ok(Legend {
            entries,
            rows,
            notes,
            lines,
        })
    }

    /// Its height in pixels.
    pub fn height(&self) -> u32 {
        ROW_HEIGHT * (self.rows.len() + self.notes.len()) as u32 + 2 * PADDING
    }

    /// Draws it in `area` (of `root`), each row centred.
    pub fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, plotters::coord::Shift>,
        area: &DrawingArea<DB, plotters::coord::Shift>,
    ) -> Result<()> {
        let (base_x, base_y) = area.get_base_pixel();
        let (width, _) = area.dim_in_pixel();
        let row_y = |r: usize| base_y + (PADDING + ROW_HEIGHT * r as u32 + ROW_HEIGHT / 2) as i32;
        let left = Pos::new(HPos::Left, VPos::Center);
        let text_style = (FONT, FONT_SIZE).into_font().color(&BLACK).pos(left);
        for (r, (row, row_width)) in self.rows.iter().enumerate() {
            let y = row_y(r);
            let mut x = base_x + (width as i32 - row_width) / 2;
            for &i in row {
                let Entry { label, style } = &self.entries[i];
                if self.lines {
                    let stroke = style.colour.stroke_width(2);
                    let line = [(x, y), (x + SAMPLE, y)];
                    if style.dashed {
                        root.draw(&DashedPathElement::new(line, 10, 6, stroke))
                    } else {
                        root.draw(&PathElement::new(line.to_vec(), stroke))
                    }
                    .map_err(plot_err)?;
                }
                draw_marker(root, (x + SAMPLE / 2, y), *style, false)?;
                let text_x = x + SAMPLE + 10;
                root.draw(&Text::new(label.as_str(), (text_x, y), text_style.clone()))
                    .map_err(plot_err)?;
                let (text_w, _) = text_style.font.box_size(label).map_err(plot_err)?;
                x = text_x + text_w as i32 + 30;
            }
        }
        let note_style = (FONT, NOTE_FONT_SIZE)
            .into_font()
            .color(&BLACK.mix(0.7))
            .pos(Pos::new(HPos::Center, VPos::Center));
        for (k, note) in self.notes.iter().enumerate() {
            let at = (base_x + width as i32 / 2, row_y(self.rows.len() + k));
            root.draw(&Text::new(note.as_str(), at, note_style.clone()))
                .map_err(plot_err)?;
        }
        Ok(())
    }
}
