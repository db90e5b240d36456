//! The seeded draw of a trial from a preset's search space ([`crate::preset::search`]) and its
//! application to an optimizer's entry.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use homeadam_core::{Config, Knob};
use homeadam_replay::{Calibration, HyperParams, Tau};
use serde::{Deserialize, Serialize};

pub use crate::preset::search::{Axis, Range, SearchSpace};
use crate::preset::OptimizerPreset;
use crate::rng::Rng;

/// One configuration of one optimizer: the knobs drawn for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    /// The trial's number among the optimizer's, from 0.
    pub index: usize,
    /// The drawn values.
    pub knobs: BTreeMap<Axis, f64>,
}

/// Rounds to three significant digits, so that the configurations read as typed.
fn three_digits(x: f64) -> f64 {
    format!("{x:.2e}").parse().unwrap_or(x)
}

/// FNV-1a of a name: the optimizer's stream of draws, independent of the list's order.
fn name_stream(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The seed of experiment `experiment`'s draws under `--seed seed`: a stream of its own, so
/// that two experiments swept with the same seed draw independent candidates (not the same
/// first trials of each optimizer).
pub fn search_seed(seed: u64, experiment: &str) -> u64 {
    Rng::new(seed).fork(name_stream(experiment)).next_u64()
}

/// The (low, high) each knob that optimizer `name`, of validated config `c`, reads is drawn
/// from, in the order [`Axis::read_by`] gives.
pub fn bounds(space: &SearchSpace, name: &str, c: &Config) -> Result<Vec<(Axis, (f64, f64))>> {
    let mut out = Vec::new();
    for knob in Axis::read_by(c) {
        let range = space.ranges.get(&knob).with_context(|| {
            format!("{name} reads {knob}, which has no range (add one to the preset's search section or pass --range {knob}=LOW:HIGH)")
        })?;
        let (low, high) = range.bounds(knob.value_in(c));
        // A range around the entry's value is checked only here, where the value is known.
        let share_above_1 = knob == Axis::HomeShare && high >= 1.0;
        if !(low > 0.0 && low < high && high.is_finite()) || share_above_1 {
            bail!(
                "{name}: the range of {knob} around its value {} is {low}..{high}: give it as LOW:HIGH{}",
                knob.value_in(c),
                if share_above_1 { " below 1" } else { "" }
            );
        }
        out.push((knob, (low, high)));
    }
    Ok(out)
}

/// Draws of one trial before [`draw`] gives up on finding one its check accepts.
const MAX_DRAWS: usize = 1000;

/// Trial `index` of optimizer `name`: each knob of `bounds` ([`bounds`], or a widened range
/// ([`widen`])) drawn log-uniformly from its range, from a stream fixed by (`seed`, `name`,
/// `index`) alone, so a trial's values do not depend on the budget, the other optimizers or the
/// order of running. A draw that `check` refuses (a rule's own limits across knobs, as
/// η·λ < 1 for decoupled decay) is drawn again from the same stream.
pub fn draw(
    bounds: &[(Axis, (f64, f64))],
    name: &str,
    seed: u64,
    index: usize,
    check: impl Fn(&Trial) -> Result<()>,
) -> Result<Trial> {
    let mut rng = Rng::new(seed).fork(name_stream(name)).fork(index as u64);
    let mut refused = None;
    for _ in 0..MAX_DRAWS {
        let mut knobs = BTreeMap::new();
        for &(knob, (low, high)) in bounds {
            let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            let value = (low.ln() + u * (high.ln() - low.ln())).exp();
            knobs.insert(knob, three_digits(value));
        }
        let trial = Trial { index, knobs };
        match check(&trial) {
            Ok(()) => return Ok(trial),
            Err(e) => refused = Some(e),
        }
    }
    let e = refused.expect("at least one draw");
    Err(e.context(format!(
        "{name}, trial {index}: none of {MAX_DRAWS} draws from its ranges passes the rule's checks"
    )))
}

/// The share of a knob's log range, at either end, where a chosen value suggests that the
/// optimum may lie outside the range.
pub const EDGE: f64 = 0.1;

/// A chosen knob in the outer [`EDGE`] of its log range.
#[derive(Clone, Debug, PartialEq)]
pub struct Edge {
    /// The knob.
    pub knob: Axis,
    /// Its chosen value.
    pub value: f64,
    /// The range it was drawn from.
    pub range: (f64, f64),
    /// Where the value lies in the range, (ln v − ln low) / (ln high − ln low): 0 at low, 1 at
    /// high.
    pub position: f64,
}

/// The knobs of `trial` that lie in the outer [`EDGE`] of their ranges `bounds`.
pub fn edges(trial: &Trial, bounds: &[(Axis, (f64, f64))]) -> Vec<Edge> {
    bounds
        .iter()
        .filter_map(|&(knob, (low, high))| {
            let value = *trial.knobs.get(&knob)?;
            let position = (value.ln() - low.ln()) / (high.ln() - low.ln());
            (!(EDGE..=1.0 - EDGE).contains(&position)).then_some(Edge {
                knob,
                value,
                range: (low, high),
                position,
            })
        })
        .collect()
}

/// `x` to three significant digits, rounded away from the range it bounds (`up` for a high end),
/// so that a widened range reads as typed and still holds what it was widened to hold.
fn outward(x: f64, up: bool) -> f64 {
    let r = three_digits(x);
    let inward = if up {
        r < x * (1.0 - 1e-9)
    } else {
        r > x * (1.0 + 1e-9)
    };
    if !inward {
        return r;
    }
    let unit = 10f64.powf(x.log10().floor() - 2.0);
    three_digits(if up { r + unit } else { r - unit })
}

/// How far [`widen`] moves an edge's end of a range: this share of the range's log width.
pub const WIDEN: f64 = 0.5;

/// The largest home share a widened range reaches: the share must stay below 1.
pub const HOME_SHARE_CAP: f64 = 0.9;

/// `bounds` with the end of each edge's range that the chosen value lies near moved outward by
/// [`WIDEN`] of the range's log width (low / (high/low)^WIDEN, or high · (high/low)^WIDEN, to
/// three digits), a home share's high end no further than [`HOME_SHARE_CAP`]; `None` when no
/// range could move.
pub fn widen(bounds: &[(Axis, (f64, f64))], edges: &[Edge]) -> Option<Vec<(Axis, (f64, f64))>> {
    let mut moved = false;
    let out = bounds
        .iter()
        .map(|&(knob, (low, high))| {
            let Some(edge) = edges.iter().find(|e| e.knob == knob) else {
                return (knob, (low, high));
            };
            let step = (high / low).powf(WIDEN);
            let range = if edge.position < 0.5 {
                (outward(low / step, false), high)
            } else if knob == Axis::HomeShare {
                (low, (high * step).min(HOME_SHARE_CAP).max(high))
            } else {
                (low, outward(high * step, true))
            };
            moved |= range != (low, high);
            (knob, range)
        })
        .collect();
    moved.then_some(out)
}

/// `entry` with the trial's knobs in place of its own.
pub fn apply(entry: &OptimizerPreset, trial: &Trial) -> OptimizerPreset {
    let mut hyper: HyperParams = entry.hyper.clone();
    for (&knob, &value) in &trial.knobs {
        match knob {
            Axis::Lr | Axis::Eps | Axis::WeightDecay => hyper
                .set(knob.name(), Knob::Real(value))
                .expect("the plain knobs are real keys of the core's knob table"),
            Axis::Tau => hyper.tau = Some(Tau::Fixed(value)),
            Axis::HomeShare => {
                let every = match hyper.tau {
                    Some(Tau::Calibrated(c)) => c.every,
                    _ => 1,
                };
                hyper.tau = Some(Tau::Calibrated(Calibration {
                    home_share: value,
                    every,
                }));
            }
            Axis::HomeLr => hyper.home_lr = Some(value),
        }
    }
    OptimizerPreset {
        hyper,
        ..entry.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space() -> SearchSpace {
        serde_json::from_str(
            r#"{"source": "ours: test", "ranges": {"lr": {"factor": 10}, "eps": {"low": 1e-8, "high": 1e-2},
                "weight_decay": {"factor": 10}, "tau": {"factor": 100}, "home_lr": {"factor": 10},
                "home_share": {"low": 0.01, "high": 0.5}}}"#,
        )
        .unwrap()
    }

    #[test]
    fn each_experiment_draws_from_its_own_stream() {
        let s = space();
        let c = Config::named("adamw").unwrap();
        let mlp = search_seed(0, "digits-mlp");
        assert_eq!(mlp, search_seed(0, "digits-mlp"));
        assert_ne!(mlp, search_seed(0, "digits-cnn"));
        assert_ne!(mlp, search_seed(1, "digits-mlp"));
        let b = bounds(&s, "adamw", &c).unwrap();
        let first = |seed| draw(&b, "adamw", seed, 0, |_| Ok(())).unwrap();
        assert_ne!(first(mlp), first(search_seed(0, "digits-cnn")));
    }

    #[test]
    fn chosen_values_in_the_outer_tenth_of_their_log_range_are_edges() {
        let trial = Trial {
            index: 0,
            knobs: BTreeMap::from([(Axis::Lr, 0.0091), (Axis::Eps, 1e-5), (Axis::Tau, 1.2e-9)]),
        };
        let bounds = [
            (Axis::Lr, (1e-4, 1e-2)),
            (Axis::Eps, (1e-8, 1e-2)),
            (Axis::Tau, (1e-9, 1e-3)),
        ];
        let found = edges(&trial, &bounds);
        let knobs: Vec<_> = found.iter().map(|e| e.knob).collect();
        assert_eq!(knobs, [Axis::Lr, Axis::Tau]);
        assert!((found[0].position - 0.98).abs() < 0.01, "{}", found[0].position);
        assert!(found[1].position < 0.1);
    }

    #[test]
    fn widening_moves_the_end_an_edge_lies_near_by_half_the_log_width() {
        let bounds = [
            (Axis::Lr, (1e-4, 1e-2)),
            (Axis::Eps, (1e-8, 1e-2)),
            (Axis::Tau, (1e-9, 1e-3)),
            (Axis::HomeShare, (0.02, 0.5)),
        ];
        let trial = Trial {
            index: 0,
            knobs: BTreeMap::from([
                (Axis::Lr, 0.0091),
                (Axis::Eps, 1e-5),
                (Axis::Tau, 1.2e-9),
                (Axis::HomeShare, 0.48),
            ]),
        };
        let found = edges(&trial, &bounds);
        let wide = widen(&bounds, &found).unwrap();
        let close = |a: (f64, f64), b: (f64, f64)| {
            assert!(
                (a.0 / b.0 - 1.0).abs() < 1e-12 && (a.1 / b.1 - 1.0).abs() < 1e-12,
                "{a:?} {b:?}"
            )
        };
        close(wide[0].1, (1e-4, 1e-1));
        assert_eq!(outward(1e-6 / 1.001f64.sqrt(), false), 9.99e-7);
        assert_eq!(outward(9.999999999999999e-5, true), 1e-4);
        assert_eq!(outward(1.0000000000000002e-6, true), 1e-6);
        close(wide[1].1, (1e-8, 1e-2));
        close(wide[2].1, (1e-12, 1e-3));
        close(wide[3].1, (0.02, HOME_SHARE_CAP));
        // Each chosen value lies inside its widened range; a share at the cap moves no more.
        assert!(edges(&trial, &wide).is_empty());
        let capped = [(Axis::HomeShare, (0.02, HOME_SHARE_CAP))];
        let at_cap = Trial {
            index: 0,
            knobs: BTreeMap::from([(Axis::HomeShare, 0.88)]),
        };
        assert_eq!(widen(&capped, &edges(&at_cap, &capped)), None);
    }

    #[test]
    fn each_rule_draws_the_knobs_it_reads_within_range() {
        let s = space();
        s.check().unwrap();
        let named = |n: &str| Config::named(n).unwrap();
        let any = |_: &Trial| Ok(());
        let sgdm = draw(&bounds(&s, "sgdm", &named("sgdm")).unwrap(), "sgdm", 0, 0, any).unwrap();
        assert_eq!(sgdm.knobs.keys().copied().collect::<Vec<_>>(), [Axis::Lr]);
        let mut c = named("homeadamw");
        c.lr = 0.01;
        let b = bounds(&s, "homeadamw", &c).unwrap();
        let t = draw(&b, "homeadamw", 0, 3, any).unwrap();
        assert_eq!(
            t.knobs.keys().copied().collect::<Vec<_>>(),
            [Axis::Lr, Axis::Eps, Axis::WeightDecay, Axis::Tau, Axis::HomeLr]
        );
        assert!((1e-3..=0.1).contains(&t.knobs[&Axis::Lr]));
        assert!((1e-8..=1e-2).contains(&t.knobs[&Axis::Eps]));
        assert_eq!(t, draw(&b, "homeadamw", 0, 3, any).unwrap());
        assert_ne!(t, draw(&b, "homeadamw", 0, 4, any).unwrap());
        assert_ne!(t, draw(&b, "homeadamw", 1, 3, any).unwrap());
        // A refused draw is drawn again from the same stream; one never accepted is an error.
        let small = |t: &Trial| {
            anyhow::ensure!(
                t.knobs[&Axis::Lr] * t.knobs[&Axis::WeightDecay] < 1e-5,
                "η·λ too large"
            );
            Ok(())
        };
        let redrawn = draw(&b, "homeadamw", 0, 3, small).unwrap();
        assert!(redrawn.knobs[&Axis::Lr] * redrawn.knobs[&Axis::WeightDecay] < 1e-5);
        let err = draw(&b, "homeadamw", 0, 3, |_| anyhow::bail!("never")).unwrap_err();
        assert!(format!("{err:#}").contains("none of 1000 draws"), "{err:#}");
    }

    #[test]
    fn a_preset_with_a_bad_search_section_is_refused() {
        let text = crate::preset::Preset::json("digits_quick").unwrap();
        let with = |ranges: &str| {
            let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
            v["search"]["ranges"] = serde_json::from_str(ranges).unwrap();
            crate::preset::Preset::from_json(&v.to_string()).map(|_| ())
        };
        with(r#"{"lr": {"factor": 10}}"#).unwrap();
        for (ranges, needle) in [
            (r#"{"lr": {"factor": 0.5}}"#, "above 1"),
            (r#"{"lr": {"low": 1, "high": 0.1}}"#, "0 < low"),
            (r#"{"beta": {"factor": 10}}"#, "beta"),
            (r#"{"lr": {"fctor": 10}}"#, "fctor"),
            (r#"{"lr": {"factor": 10, "low": 1}}"#, "a range is"),
        ] {
            let err = format!("{:#}", with(ranges).unwrap_err());
            assert!(err.contains(needle), "{ranges}: {err}");
        }
    }

    #[test]
    fn bad_ranges_and_names_are_errors() {
        for (text, needle) in [
            ("x1", "above 1"),
            ("0:1", "0 < low"),
            ("2:1", "0 < low"),
            ("1e-3:inf", "0 < low"),
            ("a:1", "not a number"),
            ("5", "LOW:HIGH"),
        ] {
            let err = Range::parse(text).and_then(|r| r.check(Axis::Lr)).unwrap_err();
            assert!(format!("{err:#}").contains(needle), "{text}: {err:#}");
        }
        let err = Range::parse("0.1:1").unwrap().check(Axis::HomeShare).unwrap_err();
        assert!(err.to_string().contains("below 1"), "{err}");
        assert!(Axis::from_name("beta")
            .unwrap_err()
            .to_string()
            .contains("home_lr"));
        let mut wide = space();
        wide.ranges
            .insert(Axis::HomeShare, Range::Around { factor: 20.0 });
        let preset = crate::preset::Preset::load("digits_quick").unwrap();
        let calibrated = preset.config("homeadamw-calibrated", 45).unwrap();
        let err = bounds(&wide, "homeadamw-calibrated", &calibrated).unwrap_err();
        assert!(err.to_string().contains("below 1"), "{err}");
        let mut s = space();
        s.ranges.remove(&Axis::Eps);
        let err = bounds(&s, "adam", &Config::named("adam").unwrap()).unwrap_err();
        assert!(err.to_string().contains("--range eps="), "{err}");
    }
}
