//! How an optimizer is drawn: its colour, line style and marker, fixed by its name, so that it
//! looks the same in every figure the project draws (curves, telemetry, stability, sweeps)
//! whichever optimizers a run holds and in whatever order.

use plotters::prelude::*;

use super::canvas::plot_err;

/// Colours of the optimizers' lines, in order: the tab10 palette, then black, navy, dark
/// green, maroon, teal, dark magenta, olive, saddle brown, gold, steel blue, yellow green,
/// tomato, slate blue and chocolate (one for each of [`STYLE_ORDER`]).
const PALETTE: [RGBColor; 24] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(0, 0, 0),
    RGBColor(0, 0, 128),
    RGBColor(0, 100, 0),
    RGBColor(128, 0, 0),
    RGBColor(0, 128, 128),
    RGBColor(139, 0, 139),
    RGBColor(128, 128, 0),
    RGBColor(139, 69, 19),
    RGBColor(255, 215, 0),
    RGBColor(70, 130, 180),
    RGBColor(154, 205, 50),
    RGBColor(255, 99, 71),
    RGBColor(106, 90, 205),
    RGBColor(210, 105, 30),
];

/// The optimizers of the shipped presets in the order they take the styles: the paper's
/// comparison first (AdamW blue, HomeAdamW orange, AdamW-srf green, HomeAdamW-ew red, SGDM
/// purple), so that the verdicts' rows are the easiest to tell apart, then the other rules and
/// the presets' variants and controls.
const STYLE_ORDER: [&str; 23] = [
    "adamw",
    "homeadamw",
    "adamw-srf",
    "homeadamw-ew",
    "sgdm",
    "adam",
    "adam-srf",
    "homeadam",
    "homeadam-ew",
    "sgd",
    "homeadamw-calibrated",
    "homeadamw-active",
    "lion",
    "adabelief",
    "swats",
    "miadam",
    "adamw-q8",
    "homeadamw-ew-q8",
    "homeadamw-home-sgdm",
    "adamw-srf-capped",
    "homeadamw-paper",
    "homeadamw-ew-capped",
    "homeadamw-calibrated-home-sgdm",
];

/// The marker shapes, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Marker {
    Circle,
    Triangle,
    Square,
    Cross,
}

const MARKERS: [Marker; 4] = [Marker::Circle, Marker::Triangle, Marker::Square, Marker::Cross];

/// How one optimizer is drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct LineStyle {
    pub colour: RGBColor,
    pub dashed: bool,
    pub marker: Marker,
    /// The optimizer's slot: staggers the markers of lines drawn over each other.
    pub slot: usize,
}

fn style_at(slot: usize) -> LineStyle {
    LineStyle {
        colour: PALETTE[slot % PALETTE.len()],
        dashed: slot % 2 == 1,
        marker: MARKERS[slot % MARKERS.len()],
        slot,
    }
}

/// The style of the optimizer `name` (a run's folder name, a sweep's or a preset's entry
/// name): its slot in [`STYLE_ORDER`]. A name outside it (an entry of a user's own preset)
/// takes the colour of the longest listed name it starts with (its base rule), with the other
/// line style and the next marker; a name that starts with none takes a slot fixed by its
/// letters.
pub(crate) fn style_of(name: &str) -> LineStyle {
    if let Some(slot) = STYLE_ORDER.iter().position(|&n| n == name) {
        return style_at(slot);
    }
    let base = STYLE_ORDER
        .iter()
        .enumerate()
        .filter(|(_, n)| name.starts_with(&format!("{n}-")))
        .max_by_key(|(_, n)| n.len());
    match base {
        Some((slot, _)) => {
            let base = style_at(slot);
            LineStyle {
                dashed: !base.dashed,
                marker: MARKERS[(slot + 1) % MARKERS.len()],
                ..base
            }
        }
        None => {
            let letters = name
                .bytes()
                .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(usize::from(b)));
            style_at(STYLE_ORDER.len() + letters % PALETTE.len())
        }
    }
}

/// Draws `style`'s marker at `(x, y)`: filled, or `hollow` (the shape's outline; the cross, an
/// outline already, in a circle).
pub(crate) fn draw_marker<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    (x, y): (i32, i32),
    style: LineStyle,
    hollow: bool,
) -> anyhow::Result<()> {
    let outline = style.colour.stroke_width(2);
    let fill = if hollow { outline } else { style.colour.filled() };
    match style.marker {
        Marker::Circle => root.draw(&Circle::new((x, y), 5, fill)),
        // plotters fills its triangle marker whatever the style: the outline by hand, through
        // the same corners (radius 7 at −90°, −210°, −330°).
        Marker::Triangle if hollow => root.draw(&PathElement::new(
            vec![(x, y - 7), (x - 6, y + 4), (x + 6, y + 4), (x, y - 7)],
            outline,
        )),
        Marker::Triangle => root.draw(&TriangleMarker::new((x, y), 7, fill)),
        Marker::Square => root.draw(&Rectangle::new([(x - 4, y - 4), (x + 4, y + 4)], fill)),
        Marker::Cross if hollow => root
            .draw(&Cross::new((x, y), 5, outline))
            .and_then(|()| root.draw(&Circle::new((x, y), 8, outline))),
        Marker::Cross => root.draw(&Cross::new((x, y), 5, outline)),
    }
    .map_err(plot_err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preset::{Preset, ALL_OPTIMIZERS};

    impl Marker {
        fn name(self) -> &'static str {
            match self {
                Marker::Circle => "circle",
                Marker::Triangle => "triangle",
                Marker::Square => "square",
                Marker::Cross => "cross",
            }
        }
    }

    /// The style of every listed optimizer as JSON, for the scripts that draw figures without the
    /// host (`scripts/svg_plot.py` reads it from `docs/figures/styles.json`): per name, in
    /// [`STYLE_ORDER`], `{"colour": "#rrggbb", "dashed": bool, "marker": "circle" | "triangle" |
    /// "square" | "cross"}`.
    fn styles_json() -> String {
        let rows: Vec<String> = STYLE_ORDER
        .iter()
        .map(|name| {
            let s = style_of(name);
            let RGBColor(r, g, b) = s.colour;
            format!(
                "  \"{name}\": {{\"colour\": \"#{r:02x}{g:02x}{b:02x}\", \"dashed\": {}, \"marker\": \"{}\"}}",
                s.dashed,
                s.marker.name()
            )
        })
        .collect();
        format!("{{\n{}\n}}\n", rows.join(",\n"))
    }

    /// Every optimizer a shipped preset names has a slot and a colour of its own.
    #[test]
    fn every_shipped_optimizer_has_a_style_of_its_own() {
        let mut listed: Vec<&str> = STYLE_ORDER.to_vec();
        listed.sort_unstable();
        listed.dedup();
        assert_eq!(listed.len(), STYLE_ORDER.len(), "a name is listed twice");
        for name in ALL_OPTIMIZERS {
            assert!(STYLE_ORDER.contains(&name), "{name} has no slot");
        }
        for experiment in Preset::experiments() {
            let preset = Preset::load(experiment).unwrap();
            for name in preset.optimizers.keys() {
                assert!(
                    STYLE_ORDER.contains(&name.as_str()),
                    "{experiment}: {name} has no slot"
                );
            }
        }
        let colours: Vec<RGBColor> = STYLE_ORDER.iter().map(|n| style_of(n).colour).collect();
        for (i, c) in colours.iter().enumerate() {
            assert!(
                !colours[..i].contains(c),
                "{} has another's colour",
                STYLE_ORDER[i]
            );
        }
    }

    /// `docs/figures/styles.json` is the table's rendering; `HOMEADAM_WRITE_STYLES=1 cargo test
    /// -p homeadam-host styles_json` writes it after a change to the table.
    #[test]
    fn the_scripts_styles_json_is_the_style_table() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/figures/styles.json");
        if std::env::var_os("HOMEADAM_WRITE_STYLES").is_some() {
            std::fs::write(path, styles_json()).unwrap();
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == styles_json(),
            "{path} is not the style table: rewrite it with HOMEADAM_WRITE_STYLES=1 cargo test -p homeadam-host styles_json"
        );
        let parsed: serde_json::Value = serde_json::from_str(&committed).unwrap();
        assert_eq!(parsed.as_object().unwrap().len(), STYLE_ORDER.len());
    }

    #[test]
    fn a_variant_takes_its_base_rules_colour_and_another_line() {
        let base = style_of("adamw-srf");
        let variant = style_of("adamw-srf-nodecay");
        assert_eq!(variant.colour, base.colour);
        assert_ne!((variant.dashed, variant.marker), (base.dashed, base.marker));
        assert_eq!(style_of("my-rule"), style_of("my-rule"));
    }
}
